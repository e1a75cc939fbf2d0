"""The sequence adder against a hand loop: overlap, episode ends, padding, start states."""

import numpy as np
import pytest

from algorithms.r2d2 import SequenceAdder

ENVS, LENGTH, PERIOD = 3, 5, 2


def run(steps=40, seed=0):
    """Random episode ends in 3 envs; obs ``(env, episode, t)``, state ``(env, t)``.
    Returns what the adder emitted and the per-env episode logs for the reference."""
    rng = np.random.default_rng(seed)
    adder = SequenceAdder(num_envs=ENVS, length=LENGTH, period=PERIOD)
    episode, t = np.zeros(ENVS, int), np.zeros(ENVS, int)
    logs = {(e, 0): [] for e in range(ENVS)}
    out = []
    for _ in range(steps):
        obs = np.stack([episode, np.arange(ENVS), t], axis=1).astype(np.float32)
        state = {"h": np.stack([np.arange(ENVS), t], axis=1).astype(np.float32) + 1.0}
        action, reward = rng.integers(4, size=ENVS), rng.random(ENVS).astype(np.float32)
        terminated, truncated = rng.random(ENVS) < 0.08, rng.random(ENVS) < 0.08
        final = obs + np.array([0, 0, 1], np.float32)  # the observation after the last action
        for e in range(ENVS):
            logs[(e, episode[e])].append((obs[e], action[e], reward[e], terminated[e], state["h"][e]))
        batch = adder.add(obs=obs, action=action, reward=reward, terminated=terminated,
                          truncated=truncated, state=state, final_obs=final)
        if batch is not None:
            out.append(batch)
        for e in np.flatnonzero(terminated | truncated):
            logs[(e, episode[e])].append((final[e], 0, 0.0, False, None))  # the last observation
            episode[e] += 1
            t[e] = -1
            logs[(e, episode[e])] = []
        t += 1
    flushed = adder.flush()
    if flushed is not None:
        out.append(flushed)
    return out, logs, adder


def reference(logs):
    """Every sequence by a plain loop: starts every PERIOD steps of an episode (at its
    steps, never at its last observation), LENGTH items or up to the episode's end,
    zero-padded; state zero at an episode's start, else the state before the start step."""
    seqs = []
    for items in logs.values():
        transitions = sum(1 for item in items if item[4] is not None)
        for start in range(0, transitions, PERIOD):
            window = items[start : start + LENGTH]
            if len(window) < 2:
                continue
            seq = {"obs": np.zeros((LENGTH, 3), np.float32), "action": np.zeros(LENGTH, np.int64),
                   "reward": np.zeros(LENGTH, np.float32), "terminated": np.zeros(LENGTH, bool),
                   "mask": np.zeros(LENGTH, bool)}
            for i, (obs, action, reward, terminated, _) in enumerate(window):
                seq["obs"][i], seq["action"][i], seq["reward"][i] = obs, action, reward
                seq["terminated"][i], seq["mask"][i] = terminated, True
            seq["h"] = np.zeros(2, np.float32) if start == 0 else window[0][4]
            seqs.append(seq)
    return seqs


def key(seq):
    return tuple(seq["obs"][0].tolist()) + (int(seq["mask"].sum()),)


def test_sequences_overlap_stop_at_episode_ends_and_are_padded_as_a_hand_loop_cuts_them():
    out, logs, adder = run()
    got = [{k: v[i] for k, v in batch.items()} for batch in out for i in range(len(batch["mask"]))]
    expected = reference(logs)
    assert adder.sequences == len(got) == len(expected)
    assert len({key(s) for s in expected}) == len(expected)
    by_key = {key(s): s for s in expected}
    for seq in got:
        want = by_key[key(seq)]
        assert seq.keys() == want.keys()
        for k in want:
            np.testing.assert_array_equal(seq[k], want[k], err_msg=k)
    # The run had every case: full sequences, ends inside them (padding), terminations.
    masks = np.array([s["mask"] for s in got])
    assert masks.all(axis=1).any() and (~masks).any() and any(s["terminated"].any() for s in got)


def test_episode_start_state_is_zero_and_steps_without_a_successor_are_not_emitted():
    adder = SequenceAdder(num_envs=1, length=4, period=4)
    step = dict(action=np.zeros(1, np.int64), reward=np.ones(1), truncated=np.zeros(1, bool),
                state={"h": np.full((1, 2), 7.0, np.float32)})
    assert adder.add(obs=np.zeros((1, 1)), terminated=np.zeros(1, bool), **step) is None
    batch = adder.add(obs=np.ones((1, 1)), terminated=np.ones(1, bool), **step)
    np.testing.assert_array_equal(batch["mask"], [[True, True, True, False]])
    np.testing.assert_array_equal(batch["h"], np.zeros((1, 2)))  # not the 7s given
    np.testing.assert_array_equal(batch["obs"][0, :, 0], [0, 1, 0, 0])  # no final_obs: zeros
    assert adder.add(obs=np.zeros((1, 1)), terminated=np.zeros(1, bool), **step) is None
    assert adder.flush() is None  # one step, no successor: nothing to learn


def test_bad_input_is_refused_with_its_name():
    with pytest.raises(ValueError, match="period \\(6\\) must be <= length \\(5\\)"):
        SequenceAdder(num_envs=1, length=5, period=6)
    with pytest.raises(ValueError, match="num_envs must be an int >= 1"):
        SequenceAdder(num_envs=0, length=5, period=1)
    adder = SequenceAdder(num_envs=2, length=3, period=1)
    ok = dict(obs=np.zeros((2, 1)), action=np.zeros(2), reward=np.zeros(2), terminated=np.zeros(2, bool),
              truncated=np.zeros(2, bool), state={"h": np.zeros((2, 1))})
    with pytest.raises(ValueError, match="reward must have a leading axis of num_envs=2"):
        adder.add(**{**ok, "reward": np.zeros(3)})
    with pytest.raises(ValueError, match="truncated but no final_obs"):
        adder.add(**{**ok, "truncated": np.array([True, False])})
    with pytest.raises(ValueError, match=r"state fields \['mask'\] would overwrite"):
        adder.add(**{**ok, "state": {"mask": np.zeros((2, 1))}})


def test_sequences_cut_short_below_min_valid_are_dropped():
    adder = SequenceAdder(num_envs=1, length=6, period=2, min_valid=4)
    step = dict(action=np.zeros(1, np.int64), reward=np.zeros(1), truncated=np.zeros(1, bool),
                state={"h": np.zeros((1, 1), np.float32)})
    for t in range(4):
        batch = adder.add(obs=np.full((1, 1), t), terminated=np.array([t == 3]), **step)
    # Starts 0 and 2 hold 5 and 3 valid steps (the last observation included): one kept.
    np.testing.assert_array_equal(batch["obs"][:, :, 0], [[0, 1, 2, 3, 0, 0]])
    np.testing.assert_array_equal(batch["mask"].sum(axis=1), [5])
    with pytest.raises(ValueError, match="min_valid must be in \\[2, length=6\\]"):
        SequenceAdder(num_envs=1, length=6, period=2, min_valid=7)


def test_a_cut_row_is_not_recorded_and_its_episode_ends_at_the_last_observation_reached():
    adder = SequenceAdder(num_envs=2, length=4, period=4)
    state = {"h": np.ones((2, 1), np.float32)}
    no = np.zeros(2, bool)
    for t in range(3):
        obs = np.full((2, 1), t, np.float32)
        assert adder.add(obs=obs, action=np.zeros(2, int), reward=np.ones(2, np.float32), terminated=no,
                         truncated=no, state=state) is None
    # Env 0's worker was replaced: its step 3 never happened (and it says truncated
    # without a final observation, which a cut row needs none of).
    out = adder.add(obs=np.full((2, 1), 3, np.float32), action=np.zeros(2, int), reward=np.ones(2, np.float32),
                    terminated=no, truncated=np.array([True, False]), state=state, cut=np.array([True, False]))
    assert out["mask"].tolist() == [[True, True, True, False], [True, True, True, True]]
    assert out["obs"][0, :, 0].tolist() == [0, 1, 2, 0]  # ends at the last observation reached
    assert out["obs"][1, :, 0].tolist() == [0, 1, 2, 3]  # env 1 goes on: its first sequence is full
    # Env 0 starts a new episode at its next step: a new sequence from a zero state.
    for t in range(4):
        out = adder.add(obs=np.full((2, 1), 10 + t, np.float32), action=np.zeros(2, int),
                        reward=np.ones(2, np.float32), terminated=no, truncated=no, state=state)
    assert out["obs"][:, 0, 0].tolist() == [10, 10] and out["h"][0].tolist() == [0.0]


def test_held_steps_counts_the_env_steps_no_returned_sequence_holds_yet():
    # Sequences of 4 starting every 2 steps: each one returned covers every step before
    # it ends, though the next open one shares its last 2 (held once, not twice).
    adder = SequenceAdder(num_envs=2, length=4, period=2)
    state = {"h": np.ones((2, 1), np.float32)}
    no = np.zeros(2, bool)

    def add(t, terminated=no, cut=None):
        return adder.add(obs=np.full((2, 1), t, np.float32), action=np.zeros(2, int), reward=np.ones(2, np.float32),
                         terminated=terminated, truncated=no, state=state, cut=cut)

    held = []
    for t in range(6):
        add(t)
        held.append(adder.held_steps)
    assert held == [2, 4, 6, 0, 2, 0]  # both envs: sequences end at steps 3 and 5
    # Env 0's episode ends at its step 6: its open sequences (starts 4 and 6) are
    # returned, padded; env 1's step 6 is in none yet.
    out = add(6, terminated=np.array([True, False]))
    assert out["mask"].sum(axis=1).tolist() == [4, 2] and adder.held_steps == 1
    # Env 1's worker is replaced: its step never happened; of what it held, the open
    # sequence with 3 valid steps is returned, the one with 1 dropped (not held either).
    out = add(7, cut=np.array([False, True]))
    assert out["mask"].sum(axis=1).tolist() == [3] and adder.held_steps == 1  # env 0's new episode
    add(8)
    assert adder.held_steps == 2 + 1
    flushed = adder.flush()  # the end of the run: env 0's 2 steps go out, padded; env 1's 1 cannot
    assert flushed["mask"].sum(axis=1).tolist() == [2] and adder.held_steps == 0


def test_episodes_all_too_short_for_the_burn_in_end_the_actor_with_a_clear_error():
    """Every episode shorter than min_valid: no sequence would ever reach the replay
    and the learner would never start; the actor's adder says why instead, once the
    sub-envs have ended EPISODES_PER_ENV episodes each."""
    from algorithms.r2d2.actor import EPISODES_PER_ENV, SequenceItems

    def items(episode_length):
        adder = SequenceAdder(num_envs=2, length=10, period=2, min_valid=6)
        return SequenceItems(adder), episode_length

    def step(items, t, episode_length):
        done = np.full(2, (t + 1) % episode_length == 0)
        return items.add(obs=np.zeros((2, 1)), action=np.zeros(2, np.int64), reward=np.zeros(2),
                         next_obs=np.zeros((2, 1)), reset_obs=np.zeros((2, 1)), terminated=done,
                         truncated=np.zeros(2, bool), extras={"h": np.zeros((2, 1), np.float32)}, cut=None)

    short, length = items(3)  # 3 steps and the last observation: 4 valid, below 6
    last = 3 * EPISODES_PER_ENV - 1  # the step that ends each sub-env's EPISODES_PER_ENV-th episode
    for t in range(last):
        step(short, t, length)
    with pytest.raises(ValueError, match=rf"no sequence from the first {2 * EPISODES_PER_ENV} episodes "
                                         r"\(about 3.0 env steps each\).*needs 6 steps \(--burn-in \+ 2\).*"
                                         r"lower --burn-in"):
        step(short, last, length)
    kept, length = items(5)  # 5 steps and the last observation: the sequence from step 0 is kept
    for t in range(5 * EPISODES_PER_ENV):
        step(kept, t, length)
    assert kept.kept > 0


def test_an_episodes_first_sequence_is_kept_from_start_min_valid_steps_the_others_from_min_valid():
    # R2D2 trains an episode's first sequence from its first step (its state is the
    # zero one, nothing to burn in): it needs 2 valid steps, the others burn-in + 2.
    adder = SequenceAdder(num_envs=1, length=6, period=2, min_valid=4, start_min_valid=2)
    step = dict(action=np.zeros(1, np.int64), reward=np.zeros(1), truncated=np.zeros(1, bool),
                state={"h": np.ones((1, 1), np.float32)})
    batch = adder.add(obs=np.full((1, 1), 0.0), terminated=np.array([True]), **step)  # a 1-step episode
    np.testing.assert_array_equal(batch["mask"].sum(axis=1), [2])  # its step and the last observation
    np.testing.assert_array_equal(batch["h"], [[0.0]])  # from the zero state
    for t in range(4):  # 4 steps: starts 0 (5 valid, kept), 2 (3 valid, below 4: dropped)
        batch = adder.add(obs=np.full((1, 1), t), terminated=np.array([t == 3]), **step)
    np.testing.assert_array_equal(batch["mask"].sum(axis=1), [5])
    with pytest.raises(ValueError, match="start_min_valid must be in \\[2, length=6\\]"):
        SequenceAdder(num_envs=1, length=6, period=2, start_min_valid=1)
