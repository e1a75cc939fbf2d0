"""PPO (algorithms.ppo): the loss terms by hand, the update, the data-parallel hook
(two members simulated by two threads and an in-process all-reduce), preempted
rollouts, state and errors."""

import copy
import threading

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from algorithms.ppo import PPO, PPOConfig, clipped_surrogate_loss, normalize, value_loss
from algorithms.rollout import RolloutCollector
from envs.testing import CountingEnv
from rlpar.errors import StateError

SMALL = PPOConfig(hidden=(16,), lr=1e-2, minibatches=2, epochs=2)


def cartpole(n=2, seed=0, mode=AutoresetMode.NEXT_STEP):
    return SyncVectorEnv([lambda: gym.make("CartPole-v1")] * n, autoreset_mode=mode)


def make(env, config=SMALL, **kwargs):
    kwargs.setdefault("seed", 0)
    kwargs.setdefault("sample_seed", 0)
    return PPO(observation_space=env.single_observation_space, action_space=env.single_action_space,
               config=config, device="cpu", **kwargs)


def params(agent):
    return [p.detach().clone() for p in agent.model.parameters()]


# ------------------------------------------------------------ the loss terms by hand
def test_clipped_surrogate_by_hand_inside_and_outside_the_clip_range():
    ratio = torch.tensor([0.5, 0.5, 1.5, 1.5, 1.1], requires_grad=True)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0, 2.0])
    loss = clipped_surrogate_loss(ratio, adv, 0.2)
    # min(r A, clip(r) A): 0.5 (below range, A > 0: unclipped is lower), min(-0.5, -0.8)
    # = -0.8 (clipped), min(1.5, 1.2) = 1.2 (clipped), min(-1.5, -1.2) = -1.5, 2.2 (inside).
    assert loss.item() == pytest.approx(-(0.5 - 0.8 + 1.2 - 1.5 + 2.2) / 5)
    loss.backward()
    # Where the clipped term is the minimum, the ratio gets no gradient.
    torch.testing.assert_close(ratio.grad, torch.tensor([-1.0, 0.0, 0.0, 1.0, -2.0]) / 5)


def test_value_loss_with_and_without_clipping_by_hand():
    values, old = torch.tensor([1.0, 2.0, 0.0]), torch.zeros(3)
    returns = torch.tensor([0.0, 2.0, 1.0])
    # Unclipped errors 1, 0, 1; clipped values 0.2, 0.2, 0 -> errors 0.04, 3.24, 1.
    assert value_loss(values, returns, old, None).item() == pytest.approx(0.5 * 2 / 3)
    assert value_loss(values, returns, old, 0.2).item() == pytest.approx(0.5 * (1 + 3.24 + 1) / 3)


def test_advantage_normalization():
    adv = torch.tensor([1.0, 2.0, 3.0, 4.0])
    torch.testing.assert_close(normalize(adv), (adv - 2.5) / (1.25 ** 0.5 + 1e-8))
    assert normalize(torch.tensor([3.0])).item() == 0.0  # one sample: 0, not NaN
    # The loss sees normalized advantages only: an affine change of them is invisible.
    env = cartpole()
    agent = make(env)
    roll = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=4, seed=0).collect()
    data = agent.compute_advantages(agent.preprocess(roll))
    batch = {k: data[k].flatten(0, 1) for k in ("obs", "actions", "log_probs", "values", "returns")}
    with torch.no_grad():  # a ratio away from 1 so that the policy loss is not trivially 0
        agent.model.actor[-1][-1].weight[0].add_(0.5)
    losses = {}
    for normalized in (True, False):
        agent.config = PPOConfig(hidden=(16,), normalize_advantages=normalized)
        for scale in (1.0, 5.0):
            adv = data["advantages"].flatten() * scale + 3.0 * (scale - 1)
            losses[normalized, scale] = agent.compute_loss({**batch, "advantages": adv})[1]["policy_loss"]
    assert losses[True, 1.0] == pytest.approx(losses[True, 5.0], rel=1e-5)
    assert losses[False, 1.0] != pytest.approx(losses[False, 5.0], rel=1e-2)


def fixed_batch(agent, steps=16, envs=4, seed=0):
    """One-step episodes (gamma irrelevant) paying +1 when the action is [obs_0 > 0],
    else -1, with the agent's behaviour log-probs and values: a learnable signal."""
    obs = np.random.default_rng(seed).normal(size=(steps, envs, 4)).astype(np.float32)
    actions, _, behaviour = agent.sample_actions(obs.reshape(steps * envs, 4))
    actions = actions.reshape(steps, envs)
    rewards = np.where(actions == (obs[..., 0] > 0), 1.0, -1.0).astype(np.float32)
    return {"obs": obs, "actions": actions, "rewards": rewards, "next_obs": obs,
            "terminated": np.ones((steps, envs), bool), "truncated": np.zeros((steps, envs), bool),
            **{key: value.reshape(steps, envs) for key, value in behaviour.items()}}


def test_update_improves_the_clipped_surrogate_on_a_fixed_batch():
    agent = make(cartpole(), PPOConfig(hidden=(32,), lr=3e-3, entropy_coef=0.0))
    roll = fixed_batch(agent)
    data = agent.compute_advantages(agent.preprocess(roll))
    obs, actions = data["obs"].flatten(0, 1), data["actions"].flatten()
    adv, old = normalize(data["advantages"].flatten()), data["log_probs"].flatten()

    def surrogate():
        with torch.no_grad():
            log_prob = agent.head.distribution(agent.model.policy(obs), None).log_prob(actions)
            return -clipped_surrogate_loss((log_prob - old).exp(), adv, 0.2).item()

    assert surrogate() == pytest.approx(0.0, abs=1e-5)  # ratio 1 at the behaviour policy
    metrics = agent.update(roll)
    # At most 0.2 E|A| (about 0.16 here): the clip bounds what one update can gain.
    assert surrogate() > 0.08
    assert metrics["minibatch_steps"] == 16 and metrics["approx_kl"] > 0 and metrics["clip_fraction"] > 0


# ------------------------------------------------------------ loops
@pytest.mark.timeout(60)
def test_short_cartpole_loop_updates_without_nan():
    env = cartpole(4)
    agent = make(env, PPOConfig(hidden=(32,), lr_anneal_updates=10))
    collector = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=32, seed=0)
    before = params(agent)
    for _ in range(5):
        roll = collector.collect()
        metrics = agent.update(roll)
    assert set(roll) >= {"log_probs", "values"} and roll["log_probs"].shape == (32, 4)
    assert agent.updates == 5 and metrics["lr"] == pytest.approx(2.5e-4 * 0.6)
    expected = {"loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction",
                "grad_norm", "explained_variance", "lr", "epochs", "minibatch_steps"}
    assert set(metrics) == expected and all(np.isfinite(v) for v in metrics.values())
    assert all(isinstance(v, float) for v in metrics.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, agent.model.parameters()))
    assert collector.drain_episodes()[0]  # episodes finished and were counted


@pytest.mark.parametrize("state_dependent", [False, True])
def test_gaussian_policy_runs_on_pendulum(state_dependent):
    env = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    agent = make(env, PPOConfig(hidden=(16,), state_dependent_std=state_dependent, minibatches=2))
    collector = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=8, seed=0)
    for _ in range(2):
        metrics = agent.update(collector.collect())
    assert all(np.isfinite(v) for v in metrics.values())
    obs = np.stack([env.single_observation_space.sample() for _ in range(5)])
    greedy = agent.act(obs, explore=False)
    assert greedy.shape == (5, 1) and np.array_equal(greedy, agent.act(obs, explore=False))
    env.close()


def test_reset_steps_of_next_step_autoreset_are_left_out():
    env = SyncVectorEnv([lambda: CountingEnv(episode_length=3)] * 2, autoreset_mode=AutoresetMode.NEXT_STEP)
    counts = []

    class Recording(PPO):
        def minibatch_indices(self, count):
            counts.append(count)
            return super().minibatch_indices(count)

    agent = Recording(observation_space=env.single_observation_space,
                      action_space=env.single_action_space, config=SMALL, device="cpu", seed=0)
    roll = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=8, seed=0).collect()
    agent.update(roll)
    assert counts == [int(roll["valid"].sum())] * SMALL.epochs and roll["valid"].sum() == 12


# ------------------------------------------------------------ data parallel
class ThreadGroup:
    """An in-process all-reduce (mean) over threads: every member posts its tensors,
    then each computes the same sum in rank order, so all get bit-identical results."""

    def __init__(self, size):
        self.size, self.slots = size, [None] * size
        self.barrier = threading.Barrier(size, timeout=60)
        self.calls = [0] * size

    def mean(self, rank, tensors):
        self.slots[rank] = [t.clone() for t in tensors]
        self.barrier.wait()
        out = []
        for i in range(len(tensors)):
            total = self.slots[0][i].clone()
            for other in self.slots[1:]:
                total += other[i]
            out.append(total / self.size)
        self.barrier.wait()  # nobody overwrites a slot another is still reading
        return out

    def grad_hook(self, rank):
        def hook(parameters):
            self.calls[rank] += 1
            for p, mean in zip(parameters, self.mean(rank, [p.grad for p in parameters])):
                p.grad.copy_(mean)
        return hook

    def mean_hook(self, rank):
        return lambda tensor: self.mean(rank, [tensor])[0]


def run_members(group, work):
    errors = []

    def target(rank):
        try:
            work(rank)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)
            group.barrier.abort()

    threads = [threading.Thread(target=target, args=(rank,)) for rank in range(group.size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("target_kl", [None, 1e-4])
def test_members_with_averaged_gradients_stay_bit_identical_on_different_data(target_kl):
    config = PPOConfig(hidden=(16,), lr=1e-2, minibatches=3, epochs=3, target_kl=target_kl)
    group = ThreadGroup(2)
    agents = [make(cartpole(3), config, seed=7, sample_seed=100 + rank,
                   grad_hook=group.grad_hook(rank), mean_hook=group.mean_hook(rank)) for rank in range(2)]
    rollouts, metrics = [[], []], [[], []]

    def work(rank):
        collector = RolloutCollector(env=cartpole(3), sample_actions=agents[rank].sample_actions,
                                     n_steps=10, seed=rank)
        for _ in range(4):
            rollouts[rank].append(collector.collect())
            metrics[rank].append(agents[rank].update(rollouts[rank][-1]))

    run_members(group, work)
    assert not np.array_equal(rollouts[0][-1]["obs"], rollouts[1][-1]["obs"])  # different data
    for a, b in zip(agents[0].model.parameters(), agents[1].model.parameters()):
        assert torch.equal(a, b)
    for a, b in zip(agents[0].optimizer.state.values(), agents[1].optimizer.state.values()):
        assert torch.equal(a["exp_avg_sq"], b["exp_avg_sq"])
    steps = [[m["minibatch_steps"] for m in ms] for ms in metrics]
    assert steps[0] == steps[1] and group.calls[0] == group.calls[1] == sum(steps[0])
    if target_kl is not None:
        assert max(steps[0]) < 9  # stopped early, both members at the same epoch
    # Without the hook the same two members part ways at once.
    lone = [make(cartpole(3), config, seed=7, sample_seed=100 + rank) for rank in range(2)]
    for agent, roll in zip(lone, (rollouts[0][0], rollouts[1][0])):
        agent.update(roll)
    assert not all(torch.equal(a, b) for a, b in zip(lone[0].model.parameters(), lone[1].model.parameters()))


@pytest.mark.timeout(60)
def test_a_preempted_shorter_rollout_updates_with_the_same_minibatch_count():
    config = PPOConfig(hidden=(16,), minibatches=4, epochs=2)
    group = ThreadGroup(2)
    agents = [make(cartpole(2), config, seed=3, sample_seed=rank, grad_hook=group.grad_hook(rank))
              for rank in range(2)]
    lengths, asked = [None, None], []

    def work(rank):
        collector = RolloutCollector(env=cartpole(2), sample_actions=agents[rank].sample_actions,
                                     n_steps=12, seed=rank)
        # Member 1 is preempted: stop as soon as allowed (min_steps 3, a quarter of 12).
        stop = (lambda t: asked.append(t) or True) if rank == 1 else None
        for _ in range(2):
            roll = collector.collect(should_stop=stop)
            lengths[rank] = roll["rewards"].shape[0]
            assert agents[rank].update(roll)["minibatch_steps"] == 8

    run_members(group, work)
    assert lengths == [12, 3] and asked == [3, 3]
    assert group.calls == [16, 16]
    for a, b in zip(agents[0].model.parameters(), agents[1].model.parameters()):
        assert torch.equal(a, b)


def test_collector_preemption_and_extras():
    env = SyncVectorEnv([lambda: CountingEnv(episode_length=100)], autoreset_mode=AutoresetMode.SAME_STEP)

    def sample(obs):
        return np.zeros(1, np.int64), np.zeros(1, np.int64), {"tag": obs[:, 0] * 2}

    collector = RolloutCollector(env=env, sample_actions=sample, n_steps=8, seed=0)
    asked = []
    roll = collector.collect(should_stop=lambda t: asked.append(t) or t >= 5, min_steps=3)
    assert asked == [3, 4, 5] and roll["obs"][:, 0, 0].tolist() == [0, 1, 2, 3, 4]
    assert all(v.shape[0] == 5 for v in roll.values()) and roll["tag"][:, 0].tolist() == [0, 2, 4, 6, 8]
    roll = collector.collect()  # the next one goes on where the cut one stopped
    assert roll["obs"][:, 0, 0].tolist() == list(range(5, 13)) and collector.env_steps == 13
    with pytest.raises(ValueError, match="min_steps"):
        collector.collect(should_stop=lambda t: True, min_steps=0)
    with pytest.raises(ValueError, match="a rollout key"):
        RolloutCollector(env=env, sample_actions=lambda o: (o, o, {"rewards": o}), n_steps=2).collect()


# ------------------------------------------------------------ seeds, state, errors
def test_seeds_fix_the_initial_parameters_and_the_sample_stream():
    env = cartpole()
    obs = np.zeros((64, 4), np.float32)
    a, b, c = make(env, seed=5, sample_seed=1), make(env, seed=5, sample_seed=1), make(env, seed=5, sample_seed=2)
    assert all(torch.equal(x, y) for x, y in zip(a.model.parameters(), c.model.parameters()))
    assert np.array_equal(a.sample_actions(obs)[0], b.sample_actions(obs)[0])
    assert not np.array_equal(a.sample_actions(obs)[0], c.sample_actions(obs)[0])
    d = make(env, seed=6)
    assert not all(torch.equal(x, y) for x, y in zip(a.model.parameters(), d.model.parameters()))


def test_state_round_trip_resumes_the_same_run():
    env = cartpole()
    a, b = make(env, seed=0, sample_seed=0), make(env, seed=1, sample_seed=1)
    collector = RolloutCollector(env=env, sample_actions=a.sample_actions, n_steps=6, seed=0)
    a.update(collector.collect())
    roll = collector.collect()  # (sampling draws from a's generator)
    b.load_state_dict(copy.deepcopy(a.state_dict()))
    assert b.updates == 1
    a.update(roll), b.update(roll)  # same shuffles too: the generator is part of the state
    for x, y in zip(a.model.parameters(), b.model.parameters()):
        assert torch.equal(x, y)
    c = make(env, seed=2)
    c.load_policy_state(a.policy_state())
    assert np.array_equal(c.act(np.ones((3, 4), np.float32), explore=False),
                          a.act(np.ones((3, 4), np.float32), explore=False))


def test_bad_state_is_refused_and_nothing_changes():
    env = cartpole()
    agent, other = make(env), make(env, PPOConfig(hidden=(8,)))
    before = params(agent)
    state = agent.state_dict()
    for bad, match in [({k: v for k, v in state.items() if k != "generator"}, r"missing key\(s\) \['generator'\]"),
                       ({**state, "generator": torch.zeros(3)}, r"state\['generator'\] is not a generator"),
                       ({**state, "model": other.state_dict()["model"]}, r"state\['model'\]\[.*\] has shape"),
                       ({**state, "updates": -1}, r"state\['updates'\]")]:
        with pytest.raises(StateError, match=match):
            agent.load_state_dict(bad)
    with pytest.raises(StateError, match="PPO.load_policy_state"):
        agent.load_policy_state(other.policy_state())
    assert all(torch.equal(x, y) for x, y in zip(before, agent.model.parameters()))


@pytest.mark.parametrize("field, value", [("gamma", 1.5), ("clip_coef", 0.0), ("epochs", 0),
                                          ("minibatches", 2.0), ("lr", -1.0), ("target_kl", 0.0),
                                          ("lr_anneal_updates", 0), ("entropy_coef", -0.1),
                                          ("max_grad_norm", float("nan")), ("clip_vloss", 1)])
def test_invalid_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        PPOConfig(**{field: value})


def test_bad_construction_and_batches_give_clear_errors():
    env = cartpole()
    with pytest.raises(TypeError, match="PPOConfig"):
        make(env, config={"lr": 1.0})
    with pytest.raises(ValueError, match="target_kl with a grad_hook needs mean_hook"):
        make(env, PPOConfig(target_kl=0.01), grad_hook=lambda ps: None)
    agent = make(env)
    roll = RolloutCollector(env=env, sample_actions=agent.sample_actions, n_steps=2, seed=0).collect()
    with pytest.raises(KeyError, match="PPO.sample_actions"):
        agent.update({k: v for k, v in roll.items() if k != "log_probs"})
    with pytest.raises(ValueError, match=r"values must be \(T, N\)"):
        agent.update({**roll, "values": roll["values"][:1]})
    with pytest.raises(ValueError, match="cannot make minibatches=8"):
        make(env, PPOConfig(minibatches=8)).update(roll)  # 4 steps for 8 minibatches
