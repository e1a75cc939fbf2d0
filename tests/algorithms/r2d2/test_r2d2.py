"""The R2D2 learner: config, acting with a kept state, the stored state's round trip
through the adder and replay, burn-in, priorities, checkpoints, and a memory task."""

import dataclasses
import io

import numpy as np
import pytest
import torch

from algorithms.r2d2 import R2D2, R2D2Config, SequenceAdder, recurrent_q_network
from algorithms.r2d2.targets import inverse_value_rescale, value_rescale
from rlpar.buffers import PrioritizedReplayBuffer, sequence_spec
from rlpar.errors import StateError


def make(seed=0, lstm=16, actions=2, obs_dim=3, **config):
    torch.manual_seed(seed)
    cfg = R2D2Config(**{"burn_in": 2, "unroll": 3, "n_step": 2, "period": 3, "lstm_size": lstm,
                        "hidden": (16,), "lr": 1e-3, **config})
    net = recurrent_q_network((obs_dim,), actions, lstm_size=lstm, hidden=cfg.hidden, dueling=cfg.dueling,
                              last_action_reward=cfg.last_action_reward)
    return R2D2(network=net, num_actions=actions, config=cfg, seed=seed)


def collect(algo, *, envs=4, steps=24, episode=8, epsilon=1.0, seed=0):
    """Sequences from ``envs`` envs whose obs is ``(env, episode, t) / 10`` and whose
    episodes end every ``episode`` steps (alternately terminated and truncated); the
    Q values the actor saw at every ``(env, episode, t)``."""
    rng = np.random.default_rng(seed)
    adder = SequenceAdder(num_envs=envs, length=algo.config.sequence_length, period=algo.config.period, min_valid=algo.config.min_sequence_steps)
    algo.epsilon = epsilon
    state, ep, t, seen, out = algo.initial_state(envs), np.zeros(envs, int), np.zeros(envs, int), {}, []
    for _ in range(steps):
        obs = np.stack([np.arange(envs), ep, t], axis=1).astype(np.float32) / 10
        q, _ = algo.q_values(obs, state)
        for e in range(envs):
            seen[(e, ep[e], t[e])] = q[e].numpy()
        action, after = algo.act(obs, state)
        after = algo.last_step(after, action=action)  # what R2D2Actor keeps (a no-op without those inputs)
        done = t == episode - 1
        reward = rng.normal(size=envs)
        batch = adder.add(obs=obs, action=action, reward=reward, terminated=done & (ep % 2 == 0),
                          truncated=done & (ep % 2 == 1), state=state, final_obs=obs + np.float32([0, 0, 0.1]))
        if batch is not None:
            out.append(batch)
        state = algo.reset_state(algo.last_step(after, reward=reward), done)
        ep, t = np.where(done, ep + 1, ep), np.where(done, 0, t + 1)
    return {k: np.concatenate([b[k] for b in out]) for k in out[0]}, seen


def test_config_fields_have_help_and_bad_values_name_the_field():
    from algorithms.params import is_flag

    # Its flags (the Ape-X job's r2d2 section) have help; the rest the job derives.
    assert all(f.metadata.get("help") for f in dataclasses.fields(R2D2Config) if is_flag(f))
    assert R2D2Config().sequence_length == 85
    for bad, match in (({"n_step": 0}, "n_step must be an int >= 1"), ({"burn_in": -1}, "burn_in must be an int >= 0"),
                       ({"gamma": 1.5}, "gamma must be in"), ({"lr": float("nan")}, "lr must be a finite"),
                       ({"period": 100}, "period \\(100\\) must be <= sequence_length \\(85"),
                       ({"hidden": ()}, "hidden must be a non-empty tuple"),
                       ({"max_grad_norm": 0.0}, "max_grad_norm must be"),
                       ({"lr_anneal_steps": -1}, "lr_anneal_steps must be an int >= 0"),
                       ({"lr_anneal_updates": 0}, "lr_anneal_updates must be an int >= 1")):
        with pytest.raises(ValueError, match=match):
            R2D2Config(**bad)


def test_acting_keeps_the_state_and_episode_ends_zero_it():
    algo = make()
    state = algo.initial_state(3)
    obs = np.ones((3, 3), np.float32)
    _, one = algo.act(obs, state, explore=False)
    q_two, two = algo.q_values(obs, one)
    q_fresh, _ = algo.q_values(obs, state)
    assert not torch.allclose(q_two, q_fresh)  # the state carries the first step
    reset = algo.reset_state(two, np.array([True, False, True]))
    np.testing.assert_array_equal(reset["state_h"][[0, 2]], 0.0)
    np.testing.assert_array_equal(reset["state_c"][1], two["state_c"][1])
    with pytest.raises(ValueError, match=r"state must hold the network's state fields \['state_h', 'state_c'\]"):
        algo.act(obs, {"h": state["state_h"]})


@pytest.mark.parametrize("last_action_reward", [False, True], ids=["lstm", "lstm-last-action-reward"])
def test_the_stored_state_replays_the_q_values_the_actor_saw(last_action_reward):
    # With the previous action and reward as inputs, the learner's pass over a whole
    # sequence feeds each step the one before's (the stored state's at the first).
    algo = make(last_action_reward=last_action_reward)
    sequences, seen = collect(algo)
    start = {"state_h": ((16,), np.float32), "state_c": ((16,), np.float32)}
    if last_action_reward:
        start.update(last_action=((2,), np.float32), last_reward=((), np.float32))
    spec = sequence_spec(length=algo.config.sequence_length,
                         steps={"obs": ((3,), np.float32), "action": ((), np.int64), "reward": ((), np.float32),
                                "terminated": ((), bool)}, start=start)
    buffer = PrioritizedReplayBuffer(capacity=64, spec=spec, seed=0)
    buffer.add(sequences)
    batch = buffer.storage.gather(np.arange(len(buffer)))
    with torch.no_grad():
        tensors = algo.preprocess(batch)
        q, _ = algo.unroll(algo.network, tensors, {k: tensors[k] for k in algo.state_keys}, slice(None))
    if last_action_reward:  # sequences starting mid-episode stored a previous action and reward
        assert (batch["last_action"].sum(axis=1) == 1).sum() > 0 and (batch["last_reward"] != 0).any()
        assert ((batch["last_action"].sum(axis=1) == 0) == (batch["last_reward"] == 0)).all()
    covered = set()
    for i in range(len(buffer)):
        for t in np.flatnonzero(batch["mask"][i]):
            key = tuple(int(round(v)) for v in batch["obs"][i, t] * 10)
            if key in seen:  # not the episode's last observation, which no one acted on
                np.testing.assert_allclose(q[i, t].numpy(), seen[key], rtol=1e-5, atol=1e-6)
                covered.add(key)
    assert covered == set(seen)  # every step the actor took (its episodes all ended)
    assert (np.abs(batch["state_h"]).sum(axis=1) > 0).any()


def test_the_previous_action_and_reward_are_inputs_that_an_episode_start_zeroes():
    algo = make(last_action_reward=True, actions=3)
    assert algo.takes_last and set(algo.state_keys) == {"state_h", "state_c", "last_action", "last_reward"}
    state = algo.initial_state(2)
    obs = np.ones((2, 3), np.float32)
    actions, after = algo.act(obs, state, explore=False)
    np.testing.assert_array_equal(after["last_action"], 0.0)  # acting does not know the action it picks
    kept = algo.last_step(algo.last_step(after, action=np.array([2, 0])), reward=np.array([1.5, -3.0]))
    np.testing.assert_array_equal(kept["last_action"], [[0, 0, 1], [1, 0, 0]])
    np.testing.assert_array_equal(kept["last_reward"], np.float32([1.5, -3.0]))
    np.testing.assert_array_equal(kept["state_h"], after["state_h"])
    q_kept, _ = algo.q_values(obs, kept)
    q_other, _ = algo.q_values(obs, algo.last_step(kept, reward=np.array([0.0, 0.0])))
    assert not torch.allclose(q_kept, q_other)  # the reward is an input
    reset = algo.reset_state(kept, np.array([True, False]))
    assert reset["last_action"][0].sum() == 0 and reset["last_reward"][0] == 0 and reset["last_reward"][1] == -3.0
    with pytest.raises(ValueError, match="4 steps need their actions and rewards"):
        algo.network(torch.zeros(2, 4, 3), {k: torch.as_tensor(v) for k, v in state.items()})
    plain = make()
    assert not plain.takes_last and plain.last_step(plain.initial_state(2), action=np.array([1, 1])).keys() == {
        "state_h", "state_c"}
    # The paper's input: a network with it has a wider LSTM input (the action's one-hot and the reward).
    assert algo.network.lstm.input_size == make(actions=3).network.lstm.input_size + 3 + 1


def test_the_values_run_from_the_stored_state_and_the_burn_in_passes_gradient_only_where_an_episode_starts():
    algo = make(target_update_interval=10**6, train_episode_starts=True)
    batch, _ = collect(algo)
    tensors = algo.preprocess(batch)
    stored = {k: tensors[k] for k in algo.state_keys}
    starts = algo.episode_starts(tensors)
    zero = (batch["state_h"] == 0).all(axis=1) & (batch["state_c"] == 0).all(axis=1)
    np.testing.assert_array_equal(starts.numpy(), zero)  # the adder stores the zero state at an episode's start
    assert 0 < zero.sum() < len(zero)
    q, target_q = algo.values(tensors, starts)
    whole, _ = algo.network(tensors["obs"], stored)  # one pass over the sequence from the stored state
    np.testing.assert_allclose(q.detach().numpy(), whole.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(target_q.numpy(), whole.detach().numpy(), rtol=1e-5, atol=1e-6)  # a copy so far
    assert not target_q.requires_grad
    # What reaches the stored state's gradient: where an episode starts, through the
    # burn-in; elsewhere nothing (sec. 3's burn-in without gradient).
    b = algo.config.burn_in
    leaf = {k: v.clone().requires_grad_(True) for k, v in stored.items()}
    q, _ = algo.values({**tensors, **leaf}, starts)
    q[:, b:].sum().backward()
    reached = leaf["state_h"].grad.abs().sum(dim=1) > 0
    np.testing.assert_array_equal(reached.numpy(), zero)
    with torch.no_grad():  # initial priorities: no graph at all
        q, _ = algo.values(tensors, starts)
    assert not q.requires_grad


@pytest.mark.parametrize("train_starts", [True, False], ids=["episode-starts-trained", "paper"])
def test_priorities_mix_each_sequences_largest_and_mean_td_error(train_starts):
    algo = make(priority_eta=0.9, train_episode_starts=train_starts)
    batch, _ = collect(algo)
    tensors = algo.preprocess(batch)
    b, u = algo.config.burn_in, algo.config.unroll
    starts = algo.episode_starts(tensors)
    assert bool(starts.any()) is train_starts
    with torch.no_grad():
        q, target_q = algo.values(tensors, starts)
        y, trained = algo.target(tensors, q, target_q, starts)
    assert trained.shape == (len(batch["mask"]), b + u)
    # Burn-in steps are trained only in sequences that start an episode.
    np.testing.assert_array_equal(trained[:, :b].any(dim=1).numpy(), starts.numpy() & trained[:, :b].any(dim=1).numpy())
    assert bool(trained[:, :b].any()) is train_starts
    q_taken = q[:, : b + u].gather(-1, tensors["action"][:, : b + u].long().unsqueeze(-1)).squeeze(-1)
    learned = algo.learn(batch)
    assert learned.priorities.shape == (len(batch["mask"]),) and learned.priorities.dtype == np.float64
    for i in range(len(batch["mask"])):
        td = [abs(float(y[i, t] - q_taken[i, t])) for t in range(b + u) if trained[i, t]]
        mixed = 0.9 * max(td) + 0.1 * sum(td) / len(td) if td else 0.0
        assert learned.priorities[i] == pytest.approx(mixed + algo.config.priority_eps, rel=1e-5)
    assert learned.metrics["trained_steps"] == trained.sum().item() > 0


def test_targets_over_the_whole_sequence_match_a_loop_over_each_trained_step():
    algo = make(gamma=0.9, n_step=2, rescale_eps=1e-3, train_episode_starts=True)
    batch, _ = collect(algo)
    tensors = algo.preprocess(batch)
    starts = algo.episode_starts(tensors)
    with torch.no_grad():
        q, target_q = algo.values(tensors, starts)
        y, trained = algo.target(tensors, q, target_q, starts)
    cfg = algo.config

    def h(x):  # the rescaling and its inverse have their own tests (test_targets.py)
        return float(value_rescale(torch.tensor(x, dtype=torch.float32), cfg.rescale_eps))

    def h_inv(x):
        return float(inverse_value_rescale(torch.tensor(x, dtype=torch.float32), cfg.rescale_eps))

    checked = 0
    for i in range(len(batch["mask"])):
        last = int(batch["mask"][i].sum()) - 1
        for t in range(cfg.burn_in + cfg.unroll):
            want = t < last and (t >= cfg.burn_in or bool(starts[i]))
            assert bool(trained[i, t]) is want
            if not want:
                continue
            total, discount, k = 0.0, 1.0, 0
            while k < cfg.n_step and t + k < last:
                total += discount * float(batch["reward"][i, t + k])
                discount *= 0.0 if batch["terminated"][i, t + k] else cfg.gamma
                k += 1
            end = t + k
            boot = float(target_q[i, end, int(q[i, end].argmax())])
            assert float(y[i, t]) == pytest.approx(h(total + discount * h_inv(boot)), rel=1e-4, abs=1e-5)
            checked += 1
    assert checked > 0


def test_without_sequences_that_start_an_episode_both_rules_learn_the_same():
    # Sequences from mid-episode only (a stored state that is not zero): training the
    # starts changes nothing, to the bit, for them.
    batch, _ = collect(make())
    keep = ~((batch["state_h"] == 0).all(axis=1))
    batch = {k: v[keep] for k, v in batch.items()}
    a, b = make(train_episode_starts=True), make(train_episode_starts=False)
    for _ in range(3):
        la, lb = a.learn(batch), b.learn(batch)
        assert la.metrics == lb.metrics
        np.testing.assert_array_equal(la.priorities, lb.priorities)
    for pa, pb in zip(a.network.parameters(), b.network.parameters()):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)


def test_a_subclass_that_overrides_the_old_burn_in_hook_is_told_where_it_went():
    class OldHook(R2D2):
        def burn_in(self, batch):
            return {}, {}

    net = recurrent_q_network((3,), 2, lstm_size=8, hidden=(8,))
    with pytest.raises(TypeError, match=r"OldHook.burn_in overrides a hook R2D2 no longer has.*values\(batch, starts\)"):
        OldHook(network=net, num_actions=2)


def test_bad_batches_are_refused():
    algo = make()
    batch, _ = collect(algo)
    with pytest.raises(ValueError, match="mask must be \\[batch, sequence_length=7\\]"):
        algo.learn({k: (v[:, :-1] if v.ndim > 1 and k != "state_h" and k != "state_c" else v)
                    for k, v in batch.items()})
    holes = dict(batch, mask=batch["mask"].copy())
    holes["mask"][0, 1] = False
    holes["mask"][0, 2] = True
    with pytest.raises(ValueError, match="must be a prefix"):
        algo.learn(holes)
    with pytest.raises(ValueError, match=r"batch is missing \['state_c'\]"):
        algo.learn({k: v for k, v in batch.items() if k != "state_c"})


def test_a_checkpoint_round_trip_learns_on_identically():
    algo = make(target_update_interval=2)
    batch, _ = collect(algo)
    for _ in range(3):
        algo.learn(batch)
    file = io.BytesIO()
    torch.save(algo.state_dict(), file)
    file.seek(0)
    again = make(seed=5, target_update_interval=2)
    again.load_state_dict(torch.load(file, weights_only=True))
    assert again.updates == 3
    a, b = algo.learn(batch), again.learn(batch)
    assert a.metrics == b.metrics
    np.testing.assert_array_equal(a.priorities, b.priorities)
    with pytest.raises(StateError, match="updates"):
        again.load_state_dict({k: v for k, v in algo.state_dict().items() if k != "updates"})


def test_the_learning_rate_anneals_linearly_to_zero_over_its_updates_and_a_resume_goes_on_from_there():
    algo, constant = make(lr_anneal_updates=4), make()
    batch, _ = collect(algo)
    rates = []
    for _ in range(5):
        algo.learn(batch)
        constant.learn(batch)
        rates.append(algo.optimizer.param_groups[0]["lr"])
    # Set before each update from the updates made so far: 1e-3 x (1 - k/4), then 0 at the end.
    np.testing.assert_allclose(rates, [1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0], rtol=1e-9, atol=1e-15)
    assert constant.optimizer.param_groups[0]["lr"] == 1e-3
    again = make(seed=5, lr_anneal_updates=4)
    head = make(lr_anneal_updates=4)
    for _ in range(2):
        head.learn(batch)
    again.load_state_dict(head.state_dict())
    again.learn(batch)
    assert again.optimizer.param_groups[0]["lr"] == pytest.approx(5e-4)


class Recall:
    """Episodes of ``k + 2`` steps: a blank step, the cue (obs[0] = +-1, the bit), ``k - 1``
    blank steps, then the query (obs[1] = 1): action = bit pays 1, else -1. Only the
    LSTM can carry the bit to the query."""

    def __init__(self, envs, k, seed):
        self.envs, self.k, self.rng = envs, k, np.random.default_rng(seed)
        self.t, self.bit = np.zeros(envs, int), self.rng.integers(2, size=envs)

    def obs(self):
        obs = np.zeros((self.envs, 3), np.float32)
        obs[:, 0] = np.where(self.t == 1, 2.0 * self.bit - 1.0, 0.0)
        obs[:, 1] = self.t == self.k + 1
        return obs

    def step(self, action):
        done = self.t == self.k + 1
        reward = np.where(done, np.where(action == self.bit, 1.0, -1.0), 0.0).astype(np.float32)
        self.t = np.where(done, 0, self.t + 1)
        self.bit = np.where(done, self.rng.integers(2, size=self.envs), self.bit)
        return reward, done


def test_r2d2_learns_to_recall_a_bit_across_steps_from_replayed_sequences():
    # Burn-in 1: the cue (step 1) is the first trained step of an episode's first
    # sequence, so the query's error reaches it through the LSTM.
    algo = make(lstm=32, burn_in=1, unroll=5, n_step=1, period=3, gamma=0.9, lr=1e-2,
                target_update_interval=25)
    env, envs = Recall(16, k=3, seed=0), 16
    adder = SequenceAdder(num_envs=envs, length=algo.config.sequence_length, period=algo.config.period, min_valid=algo.config.min_sequence_steps)
    buffer = PrioritizedReplayBuffer(capacity=2000, alpha=0.9, beta=0.6, seed=0)
    state, algo.epsilon = algo.initial_state(envs), 0.5
    for _ in range(150):  # about 140 updates; it recalls after 50-100 (3 seeds)
        obs = env.obs()
        action, after = algo.act(obs, state)
        reward, done = env.step(action)
        batch = adder.add(obs=obs, action=action, reward=reward, terminated=done, truncated=np.zeros(envs, bool),
                          state=state)
        state = algo.reset_state(after, done)
        if batch is not None:
            buffer.add(batch)
        if len(buffer) >= 64:
            sample = buffer.sample(32)
            learned = algo.learn({**sample.batch, "weights": sample.weights})
            buffer.update_priorities(sample.indices, learned.priorities)

    test, state, correct = Recall(64, k=3, seed=1), algo.initial_state(64), 0.0
    for _ in range(5):  # one episode of each of 64 envs, greedy
        action, state = algo.act(test.obs(), state, explore=False)
        reward, _ = test.step(action)
        correct += (reward > 0).sum()
    assert correct / 64 >= 0.9, correct / 64


def test_the_default_network_takes_minatar_images_and_vectors_over_time():
    image = recurrent_q_network((10, 10, 4), 3, lstm_size=8)
    state = image.initial_state(2)
    q, after = image(torch.zeros(2, 5, 10, 10, 4, dtype=torch.bool), state)
    assert q.shape == (2, 5, 3) and after["state_h"].shape == (2, 8)
    algo = R2D2(network=image, num_actions=3, config=R2D2Config(lstm_size=8))
    actions, kept = algo.act(np.ones((2, 10, 10, 4), bool), algo.initial_state(2))
    assert actions.shape == (2,) and kept["state_c"].shape == (2, 8)
    with pytest.raises(ValueError, match="the default networks support"):
        recurrent_q_network((4, 5), 3)


def test_the_image_torso_runs_in_contiguous_nchw_and_learns_as_the_channels_last_one_does():
    """Only the activations' layout differs; the two sum in the same order or within
    the tolerance of two convolution kernels (1e-5 on one update)."""
    from algorithms.nets import ChannelsLast

    torch.manual_seed(0)
    fast = recurrent_q_network((10, 10, 3), 3, lstm_size=8, hidden=(16,))
    plain = recurrent_q_network((10, 10, 3), 3, lstm_size=8, hidden=(16,))
    plain.load_state_dict(fast.state_dict())
    (layout,) = [m for m in fast.modules() if isinstance(m, ChannelsLast)]
    (other,) = [m for m in plain.modules() if isinstance(m, ChannelsLast)]
    assert layout.contiguous
    other.contiguous = False
    config = R2D2Config(burn_in=2, unroll=3, period=2, lstm_size=8, n_step=2, hidden=(16,))
    algos = [R2D2(network=net, num_actions=3, config=config) for net in (fast, plain)]
    length, rng = config.sequence_length, np.random.default_rng(0)
    batch = {"obs": rng.random((4, length, 10, 10, 3)) < 0.2, "action": rng.integers(3, size=(4, length)),
             "reward": rng.random((4, length)).astype(np.float32), "terminated": np.zeros((4, length), bool),
             "mask": np.ones((4, length), bool), "state_h": np.zeros((4, 8), np.float32),
             "state_c": np.zeros((4, 8), np.float32)}
    learned = [algo.learn(batch) for algo in algos]
    np.testing.assert_allclose(learned[0].priorities, learned[1].priorities, rtol=1e-5, atol=1e-6)
    for a, b in zip(fast.parameters(), plain.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
