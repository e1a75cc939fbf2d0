import copy
import threading

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from algorithms.a2c import A2C, A2CConfig, make_optimizer
from algorithms.a2c.a3c import A3C, run_worker
from algorithms.rollout import RolloutCollector
from envs.testing import CountingEnv
from rlpar.servers import GradServer

CONFIG = A2CConfig(optimizer="adam", lr=1e-2, max_grad_norm=None, hidden=(16,))


def make_env(n=2):
    return SyncVectorEnv([lambda: CountingEnv(episode_length=5, truncate=True)] * n,
                         autoreset_mode=AutoresetMode.SAME_STEP)


def make_agent(env, seed=0):
    torch.manual_seed(seed)
    return A2C(observation_space=env.single_observation_space, action_space=env.single_action_space,
               config=CONFIG, device="cpu")


def make_server(agent, **kwargs):
    return GradServer(model=copy.deepcopy(agent.model),
                      optimizer_factory=lambda params: make_optimizer(params, CONFIG), **kwargs)


class RecordingSink:
    """A GradientSink that keeps a copy of everything pushed through it."""

    def __init__(self, inner):
        self.inner, self.pushed = inner, []

    def push_gradients(self, grads, version):
        self.pushed.append(({k: v.clone() for k, v in grads.items()}, version))
        return self.inner.push_gradients(grads, version)

    def pull(self, newer_than=-1):
        return self.inner.pull(newer_than)

    def push(self, state, version=None):
        return self.inner.push(state, version)


def test_pushed_gradient_is_the_gradient_of_the_rollout_loss_on_the_pulled_parameters():
    env = make_env()
    server = make_server(make_agent(env, seed=1))
    sink = RecordingSink(server)
    worker = A3C(agent=make_agent(env, seed=2), sink=sink)  # different init: must pull first
    collector = RolloutCollector(env=env, sample_actions=worker.sample_actions, n_steps=4, seed=0)
    # A reference learner that sees the same parameters and rollouts.
    reference = make_agent(env, seed=3)
    for step in range(3):
        if step == 0:
            worker.sync()
        reference.load_policy_state(server.pull()[0])
        rollout = collector.collect()
        metrics = worker.update(rollout)
        loss = reference.compute_loss(reference.compute_advantages(reference.preprocess(rollout)))[0]
        names, params = zip(*reference.model.named_parameters())
        expected = torch.autograd.grad(loss, params)
        grads, version = sink.pushed[-1]
        assert version == step
        assert set(grads) == set(names)
        for name, grad in zip(names, expected):
            torch.testing.assert_close(grads[name], grad)
        assert metrics["accepted"] == 1.0 and metrics["version"] == step + 1
    # The worker now holds exactly the server's parameters.
    state, version = server.pull()
    assert version == 3 == worker.version
    for key, value in worker.agent.model.state_dict().items():
        torch.testing.assert_close(value, state[key])


def test_every_rollout_gradient_reaches_the_server_from_concurrent_workers():
    env0 = make_env()
    server = make_server(make_agent(env0))
    initial = {k: v.clone() for k, v in server.pull()[0].items()}
    workers, errors, updates = [], [], 25

    def work(seed):
        try:
            env = make_env()
            worker = A3C(agent=make_agent(env, seed), sink=server)
            workers.append(worker)
            collector = RolloutCollector(env=env, sample_actions=worker.sample_actions, n_steps=3,
                                         seed=seed)
            assert run_worker(worker, collector.collect, max_updates=updates) == updates
        except BaseException as exc:  # surfaced in the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    metrics = server.metrics()
    assert metrics["received"] == metrics["applied"] == metrics["steps"] == 2 * updates
    assert metrics["version"] == 2 * updates and metrics["dropped"] == 0
    assert sum(w.pushed for w in workers) == 2 * updates
    final = server.pull()[0]
    assert any(not torch.equal(final[k], initial[k]) for k in initial)


def test_stale_gradients_dropped_by_the_server_are_reported():
    env = make_env()
    server = make_server(make_agent(env), max_staleness=0)
    a = A3C(agent=make_agent(env), sink=server)
    b = A3C(agent=make_agent(env), sink=server)
    a.sync(), b.sync()
    roll = RolloutCollector(env=env, sample_actions=a.sample_actions, n_steps=2).collect()
    assert a.update(roll)["accepted"] == 1.0
    stale = b.update(roll)  # computed on version 0, server is at 1
    assert stale["accepted"] == 0.0 and b.version == 1  # ... but it still catches up
    assert (a.pushed, a.accepted, b.pushed, b.accepted) == (1, 1, 1, 0)
    assert server.metrics()["dropped"] == 1


def test_run_worker_stops_on_request_and_rejects_endless_loops():
    env = make_env()
    worker = A3C(agent=make_agent(env), sink=make_server(make_agent(env)))
    collector = RolloutCollector(env=env, sample_actions=worker.sample_actions, n_steps=2)
    seen = []
    done = run_worker(worker, collector.collect, should_stop=lambda: len(seen) >= 3,
                      on_update=seen.append)
    assert done == 3 and worker.version == 3
    with pytest.raises(ValueError, match="never ends"):
        run_worker(worker, collector.collect)


def test_invalid_worker_arguments():
    env = make_env()
    agent = make_agent(env)
    with pytest.raises(TypeError, match="GradientSink"):
        A3C(agent=agent, sink=object())
    with pytest.raises(TypeError, match="agent must be an A2C"):
        A3C(agent=object(), sink=make_server(agent))


def test_state_dict_round_trip():
    env = make_env()
    server = make_server(make_agent(env))
    worker = A3C(agent=make_agent(env), sink=server)
    worker.update(RolloutCollector(env=env, sample_actions=worker.sample_actions, n_steps=2).collect())
    other = A3C(agent=make_agent(env, seed=5), sink=server)
    other.load_state_dict(worker.state_dict())
    assert (other.version, other.pushed) == (1, 1)
    obs = np.arange(4, dtype=np.float32).reshape(4, 1)
    np.testing.assert_array_equal(other.act(obs, explore=False), worker.act(obs, explore=False))


def test_a_sink_with_push_gradients_and_pull_costs_one_call_per_update():
    env = make_env()
    server = make_server(make_agent(env, seed=1))

    class Exchanging(RecordingSink):
        calls = 0

        def push_gradients_and_pull(self, grads, version, newer_than=-1):
            self.calls += 1
            self.pushed.append((grads, version))
            return self.inner.push_gradients_and_pull(grads, version, newer_than)

        def pull(self, newer_than=-1):
            assert newer_than == -1, "only the first sync pulls on its own"
            return self.inner.pull(newer_than)

    sink = Exchanging(server)
    worker = A3C(agent=make_agent(env, seed=2), sink=sink)
    collector = RolloutCollector(env=env, sample_actions=worker.sample_actions, n_steps=4, seed=0)
    for _ in range(3):
        metrics = worker.update(collector.collect())
    assert sink.calls == 3 and [v for _, v in sink.pushed] == [0, 1, 2]
    assert worker.version == server.version == 3 and metrics["version_lag"] == 1.0
    state, _ = server.pull()
    for key, value in worker.agent.model.state_dict().items():
        torch.testing.assert_close(value, state[key])
