"""Ape-X in one process with local parts: epsilon schedule, actor/learner plumbing,
and a run that learns a trivially learnable task."""

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from algorithms.dqn import DQN, DQNConfig
from algorithms.dqn.apex import (
    ApexActor,
    ApexConfig,
    ApexLearner,
    DQNApex,
    actor_epsilon,
    evaluate,
    exploration_rates,
)
from algorithms.nets import q_network
from envs.testing import CountingEnv


def test_epsilon_schedule_matches_the_paper():
    n = 8
    eps = [actor_epsilon(i, n) for i in range(n)]
    assert eps[0] == pytest.approx(0.4)
    assert eps[-1] == pytest.approx(0.4**8)
    assert eps[3] == pytest.approx(0.4 ** (1 + 3 / 7 * 7))
    assert all(a > b for a, b in zip(eps, eps[1:]))
    assert actor_epsilon(0, 1) == pytest.approx(0.4)
    assert actor_epsilon(1, 2, eps=0.5, alpha=1.0) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="index"):
        actor_epsilon(3, 3)


def test_exploration_rates_spread_the_schedule_over_env_copies():
    # 2 actors x 3 envs: env copy k of actor i is "actor" 3 * i + k of 6.
    rates = np.concatenate([exploration_rates(i, 2, 3) for i in range(2)])
    np.testing.assert_allclose(rates, [actor_epsilon(j, 6) for j in range(6)])
    assert exploration_rates(1, 2, 3, per_env=False) == pytest.approx(0.4**8)
    with pytest.raises(ValueError, match="index"):
        exploration_rates(2, 2, 3)
    with pytest.raises(ValueError, match="num_envs"):
        exploration_rates(0, 2, 0)


@pytest.mark.parametrize("field", ["n_step", "batch_size", "push_every"])
def test_invalid_apex_config(field):
    with pytest.raises(ValueError, match=field):
        ApexConfig(**{field: 0}).validate()


def parity_env(num_envs=2, length=8):
    # Reward 1 when action == step parity: the optimal return is `length`.
    return SyncVectorEnv([lambda: CountingEnv(episode_length=length)] * num_envs,
                         autoreset_mode=AutoresetMode.SAME_STEP)


def make_dqn(seed=0, **config):
    torch.manual_seed(seed)
    cfg = DQNConfig(gamma=0.5, lr=3e-3, target_update_interval=50, **config)
    # The parity of the counter is easy to read off a one-hot-ish feature; an MLP
    # on the raw count also works but slower.
    net = torch.nn.Sequential(Parity(), q_network((2,), 2, hidden=(16,), dueling=True))
    return DQN(network=net, num_actions=2, config=cfg, seed=seed)


class Parity(torch.nn.Module):
    def forward(self, x):
        p = torch.remainder(x.float(), 2.0)
        return torch.cat([p, 1 - p], dim=-1)


def test_one_process_apex_learns_the_parity_task():
    config = ApexConfig(n_step=2, batch_size=32, learning_starts=64, push_every=4, pull_every=8,
                        add_every=2)
    apex = DQNApex.local(make_dqn=make_dqn, make_env=lambda i: parity_env(), num_actors=2,
                         config=config, capacity=2000, updates_per_step=0.5, seed=1)
    greedy = make_dqn()

    def solved():
        state, _ = apex.learner.params.pull()
        greedy.load_policy_state(state)
        return evaluate(greedy, parity_env(4), episodes=4).mean() >= 8.0

    apex.run(env_steps=6000, stop=solved, check_every=200)
    assert solved(), "greedy policy did not reach the optimal return 8"
    assert apex.learner.updates > 0
    assert apex.actors[0].version > 0 and apex.actors[1].version > 0  # parameters flowed
    assert len(apex.learner.buffer) == sum(a.transitions_added for a in apex.actors)


def test_actor_adds_n_step_transitions_with_its_own_priorities():
    from rlpar.buffers import PrioritizedReplayBuffer
    from rlpar.servers import ModelStore

    buffer = PrioritizedReplayBuffer(capacity=100, seed=0)
    store = ModelStore()
    dqn = make_dqn()
    learner = ApexLearner(dqn=make_dqn(), buffer=buffer, params=store,
                          config=ApexConfig(batch_size=4, learning_starts=8))
    actor = ApexActor(dqn=dqn, env=parity_env(num_envs=1, length=4), buffer=buffer, params=store,
                      index=1, num_actors=2, config=ApexConfig(n_step=2, add_every=1, pull_every=1000))
    assert actor.dqn.epsilon == pytest.approx(0.4**8)
    assert actor.sync() and actor.version == 0  # the learner published version 0
    for _ in range(4):
        actor.step()
    # 4 steps of a length-4 episode with n=2: 3 full transitions + the terminal tail.
    assert len(buffer) == actor.transitions_added == 4
    sample = buffer.sample(4)
    assert set(sample.batch) >= {"obs", "action", "reward", "next_obs", "terminated", "discount"}
    assert actor.finished_episodes and actor.finished_episodes[0][1] == 4
    before = buffer.max_priority
    learner.step()
    assert learner.updates == 1
    assert buffer.max_priority >= before  # learner sent priorities back


@pytest.mark.timeout(30)
def test_actor_drops_the_step_and_episode_a_restarted_env_worker_cut():
    from envs import SubprocVectorEnv
    from rlpar.servers import ModelStore
    from tests.procs import kill_and_wait

    class Recorder:
        def __init__(self):
            self.batches = []

        def add(self, batch, priorities):
            self.batches.append(batch)

    env = SubprocVectorEnv([lambda: CountingEnv(episode_length=50)], num_workers=1, restart_on_crash=True,
                           autoreset_mode=AutoresetMode.SAME_STEP)
    buffer = Recorder()
    actor = ApexActor(dqn=make_dqn(), env=env, buffer=buffer, params=ModelStore(), index=0, num_actors=1,
                      config=ApexConfig(n_step=2, add_every=1, pull_every=1000))
    try:
        for _ in range(3):
            actor.step()
        kill_and_wait(env._workers.procs[0].pid)
        assert actor.step() == 0 and actor.env_steps == 3  # the cut step never happened
        actor.step()  # the fresh env's first step
    finally:
        env.close()
    next_obs = [float(x) for b in buffer.batches for x in b["next_obs"][:, 0]]
    # Windows 0-2 and 1-3, then the pending one (obs 2) ends at obs 3, the last reached;
    # nothing bootstraps from the fresh env's reset observation.
    assert next_obs == [2.0, 3.0, 3.0] and actor.transitions_added == 3
    assert not any(b["terminated"].any() for b in buffer.batches)
    assert actor.finished_episodes == []


def test_learner_publishes_every_push_every_updates():
    from rlpar.buffers import PrioritizedReplayBuffer
    from rlpar.servers import ModelStore

    buffer, store = PrioritizedReplayBuffer(capacity=100, seed=0), ModelStore()
    learner = ApexLearner(dqn=make_dqn(), buffer=buffer, params=store,
                          config=ApexConfig(batch_size=4, learning_starts=4, push_every=3))
    buffer.add({"obs": np.arange(8, dtype=np.float32)[:, None], "action": np.zeros(8, np.int64),
                "reward": np.ones(8, np.float32), "next_obs": np.ones((8, 1), np.float32),
                "terminated": np.zeros(8, np.float32), "discount": np.full(8, 0.25, np.float32)})
    assert learner.ready()
    for _ in range(5):
        learner.step()
    assert store.version == 3


class _Recorder:
    def __init__(self):
        self.batches, self.priorities = [], []

    def add(self, batch, priorities):
        self.batches.append(batch)
        self.priorities.append(np.asarray(priorities))


class _OwnTarget(DQN):
    """A DQN with its own target hook (here the stock one): the actor must then score
    by a forward, through the hook."""

    def target(self, batch):
        return super().target(batch)


def _scored_run(dqn, *, truncate, add_every, steps=23, num_envs=3):
    from rlpar.servers import ModelStore

    env = SyncVectorEnv([lambda k=k: CountingEnv(episode_length=4 + k, truncate=truncate) for k in range(num_envs)],
                        autoreset_mode=AutoresetMode.SAME_STEP)
    sink = _Recorder()
    actor = ApexActor(dqn=dqn, env=env, buffer=sink, params=ModelStore(), index=0, num_actors=2, seed=3,
                      config=ApexConfig(n_step=1, add_every=add_every, pull_every=10**6))
    for _ in range(steps):
        actor.step()
    actor.flush()  # as the roles do when an actor stops: the open last step is scored too
    return actor, sink


@pytest.mark.parametrize("truncate", [False, True])
@pytest.mark.parametrize("add_every", [1, 4, 7])
def test_acting_scores_equal_the_forward_pass_priorities(truncate, add_every):
    """One-step priorities from the Q values computed to act (and, for time limits,
    the final observation's) equal a forward over each flushed batch: same batches,
    priorities within float rounding (a batch-8 and a batch-2N forward sum in another
    order: rtol 1e-5)."""
    fast, slow = make_dqn(seed=2, fast="auto"), _OwnTarget(network=make_dqn(seed=2).network, num_actions=2,
                                                          config=make_dqn(seed=2, fast="auto").config, seed=2)
    scored_actor, scored = _scored_run(fast, truncate=truncate, add_every=add_every)
    forward_actor, forward = _scored_run(slow, truncate=truncate, add_every=add_every)
    assert scored_actor.scores is not None and forward_actor.scores is None
    assert len(scored.batches) == len(forward.batches) > 1
    for a, b, pa, pb in zip(scored.batches, forward.batches, scored.priorities, forward.priorities):
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
        assert pa.shape == pb.shape == (len(a["reward"]),)
        np.testing.assert_allclose(pa, pb, rtol=1e-5, atol=1e-6)
    assert scored_actor.transitions_added == sum(len(b["reward"]) for b in scored.batches)
    ended = np.concatenate([b["terminated"] for b in scored.batches])
    assert ended.any() != truncate  # episodes ended by termination, or only by time limits


def test_acting_scores_apply_only_where_they_are_the_same_computation():
    from rlpar.servers import ModelStore

    def scores(dqn, n_step=1):
        return ApexActor(dqn=dqn, env=parity_env(), buffer=_Recorder(), params=ModelStore(), index=0,
                         num_actors=1, config=ApexConfig(n_step=n_step)).scores

    assert scores(make_dqn(fast="auto")) is not None
    assert scores(make_dqn(fast="auto"), n_step=3) is None  # n-step windows: a forward at each flush
    assert scores(make_dqn(fast="off")) is None  # the plain path stays as it was
    base = make_dqn(fast="auto")
    assert scores(_OwnTarget(network=base.network, num_actions=2, config=base.config)) is None

    class Boltzmann(ApexActor):  # an actor that explores otherwise: its own behaviour, a forward to score
        def behaviour(self, obs):
            q = self.dqn.q_values(obs)
            return torch.distributions.Categorical(logits=q).sample().numpy(), {}

    actor = Boltzmann(dqn=make_dqn(fast="auto"), env=parity_env(), buffer=_Recorder(), params=ModelStore(),
                      index=0, num_actors=1, config=ApexConfig(n_step=1, add_every=2))
    assert actor.scores is None
    for _ in range(6):
        actor.step()
    assert actor.transitions_added == 12 and all(len(p) == 4 for p in actor.sink.priorities)


@pytest.mark.timeout(30)
def test_acting_scores_skip_the_step_a_restarted_env_worker_cut():
    from envs import SubprocVectorEnv
    from rlpar.servers import ModelStore
    from tests.procs import kill_and_wait

    env = SubprocVectorEnv([lambda: CountingEnv(episode_length=50)] * 2, num_workers=2, restart_on_crash=True,
                           autoreset_mode=AutoresetMode.SAME_STEP)
    sink = _Recorder()
    actor = ApexActor(dqn=make_dqn(fast="auto"), env=env, buffer=sink, params=ModelStore(), index=0,
                      num_actors=1, config=ApexConfig(n_step=1, add_every=2, pull_every=1000))
    assert actor.scores is not None
    try:
        for _ in range(3):
            actor.step()
        worker = next(p for p in env._workers.procs if p is not None)  # (a group may run in this process)
        kill_and_wait(worker.pid)
        assert actor.step() == 1  # the killed worker's env lost its step, the other's happened
        for _ in range(3):
            actor.step()
        actor.flush()
    finally:
        env.close()
    rows = sum(len(b["reward"]) for b in sink.batches)
    assert rows == actor.transitions_added == actor.env_steps == 3 * 2 + 1 + 3 * 2
    priorities = np.concatenate(sink.priorities)
    assert priorities.shape == (rows,) and np.isfinite(priorities).all() and (priorities > 0).all()
