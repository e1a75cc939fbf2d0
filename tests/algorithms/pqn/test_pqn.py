"""PQN (algorithms.pqn) and its single-process runner (algorithms.pqn.runner): the
targets, the update, the gradient hook, the schedules, the networks, state and
checkpoint resume, errors. Whether it learns is a benchmark (experiments/bench/learning/pqn_single.py)."""

import copy

import numpy as np
import pytest
import torch
from gymnasium.vector import AutoresetMode
from torch import nn

from algorithms.nets import ChannelNorm
from algorithms.pqn import PQN, PQNConfig, PQNRunner, linear_schedule, pqn_network
from algorithms.returns import q_lambda
from envs.inprocess import InProcessVectorEnv
from envs.testing import CountingEnv
from rlpar.checkpoint import load_checkpoint, save_checkpoint
from rlpar.errors import StateError

SMALL = {"hidden": (16,), "epochs": 2, "minibatches": 4}


def make_pqn(seed=0, obs_dim=3, actions=2, **config):
    torch.manual_seed(seed)
    return PQN(num_actions=actions, observation_shape=(obs_dim,), seed=seed,
               config=PQNConfig(**{**SMALL, **config}))


def rollout(steps=4, envs=2, obs_dim=3, seed=0, actions=2):
    """A (T, N) rollout with a termination and a truncation inside it."""
    rng = np.random.default_rng(seed)
    terminated = np.zeros((steps, envs), bool)
    truncated = np.zeros((steps, envs), bool)
    terminated[min(1, steps - 1), 0] = truncated[min(2, steps - 1), envs - 1] = True
    return {"obs": rng.normal(size=(steps, envs, obs_dim)).astype(np.float32),
            "actions": rng.integers(actions, size=(steps, envs)),
            "rewards": rng.normal(size=(steps, envs)).astype(np.float32),
            "next_obs": rng.normal(size=(steps, envs, obs_dim)).astype(np.float32),
            "terminated": terminated, "truncated": truncated}


def squared_error(pqn, batch, targets):
    q = pqn.q_values(batch["obs"].reshape(-1, batch["obs"].shape[-1]))
    taken = q.gather(-1, torch.as_tensor(batch["actions"]).reshape(-1, 1)).squeeze(-1)
    return float((taken - targets.flatten()).pow(2).mean())


# ------------------------------------------------------------------ targets, update


def test_targets_are_q_lambda_over_the_current_networks_greedy_values():
    pqn = make_pqn(gamma=0.9, lam=0.65)
    batch = rollout()
    data = pqn.preprocess(batch)
    with torch.no_grad():
        best = pqn.network(data["next_obs"].flatten(0, 1)).max(-1).values.view(4, 2)
        expected = q_lambda(rewards=data["rewards"], next_values=best, terminated=data["terminated"],
                            truncated=data["truncated"], gamma=0.9, lam=0.65)
        torch.testing.assert_close(pqn.targets(data), expected)


def test_targets_reuse_the_acting_q_values_where_next_obs_is_the_next_obs():
    pqn = make_pqn()
    batch = rollout(steps=6, envs=3)
    # As a vector env makes them: s'_t is s_{t+1} but where an episode ended at t.
    ended = batch["terminated"] | batch["truncated"]
    batch["next_obs"][:-1] = np.where(ended[:-1, :, None], batch["next_obs"][:-1], batch["obs"][1:])
    _, max_q = pqn.act_and_max_q(batch["obs"].reshape(18, 3))
    rows = []
    pqn.network.register_forward_pre_hook(lambda module, args: rows.append(args[0].shape[0]))
    with torch.no_grad():
        plain = pqn.targets(pqn.preprocess(batch))
        reused = pqn.targets(pqn.preprocess({**batch, "max_q": max_q.reshape(6, 3)}))
    torch.testing.assert_close(reused, plain)
    assert rows == [18, 3 + 2]  # all rows; then the last step's and the two episode ends'


def test_update_moves_q_toward_fixed_targets():
    # gamma = 0: the targets are the rewards, whatever the network does.
    pqn = make_pqn(gamma=0.0, lr=1e-2, max_grad_norm=None)
    batch = rollout(steps=8, envs=4)
    targets = torch.as_tensor(batch["rewards"])
    before = squared_error(pqn, batch, targets)
    for _ in range(30):
        metrics = pqn.update(batch)
    assert squared_error(pqn, batch, targets) < 0.5 * before
    assert pqn.updates == 30 and pqn.env_steps == 30 * 32
    assert metrics["target_mean"] == pytest.approx(float(targets.mean()), abs=1e-6)
    assert set(metrics) == {"loss", "q_mean", "grad_norm", "target_mean", "lr"}


def test_targets_are_computed_once_per_rollout_before_any_step():
    pqn = make_pqn()
    calls = []
    original = pqn.targets
    pqn.targets = lambda data: calls.append(copy.deepcopy(pqn.network.state_dict())) or original(data)
    before = copy.deepcopy(pqn.network.state_dict())
    pqn.update(rollout())
    assert len(calls) == 1
    assert all(torch.equal(calls[0][k], v) for k, v in before.items())


def test_invalid_steps_carry_no_loss():
    batch = rollout()
    batch["valid"] = np.ones((4, 2), bool)
    batch["valid"][2, 0] = False  # the reset step after env 0's termination at t = 1
    changed = copy.deepcopy(batch)
    changed["rewards"][2, 0] = 1e6
    changed["obs"][2, 0] = 1e3
    one, two = make_pqn(), make_pqn()
    one.update(batch)
    two.update(changed)
    for a, b in zip(one.network.parameters(), two.network.parameters(), strict=True):
        torch.testing.assert_close(a, b)
    assert one.env_steps == 7


def test_grad_hook_sees_every_gradient_once_per_minibatch_before_clip_and_step():
    seen = []

    def hook(grads):
        seen.append(([g is p.grad for g, p in zip(grads, pqn.params, strict=True)],
                     float(torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])))))
        for g in grads:  # in place, as an all-reduce would: here, to zero
            g.zero_()

    pqn = make_pqn(epochs=3, minibatches=5, max_grad_norm=1e-6)
    pqn.grad_hook = hook
    before = copy.deepcopy(pqn.network.state_dict())
    pqn.update(rollout(steps=5, envs=3))
    assert len(seen) == 3 * 5
    assert all(all(same) and len(same) == len(pqn.params) for same, _ in seen)
    assert all(norm > 1e-6 for _, norm in seen)  # not clipped yet
    # Zero gradients from the hook: RAdam's first steps move nothing.
    assert all(torch.equal(before[k], v) for k, v in pqn.network.state_dict().items())


def test_the_hook_is_a_constructor_argument_and_a_method_to_override():
    calls = []

    class Counting(PQN):
        def reduce_gradients(self, grads):
            calls.append(len(grads))

    Counting(num_actions=2, observation_shape=(3,), config=PQNConfig(**SMALL)).update(rollout())
    assert calls == [len(list(pqn_network((3,), 2, config=PQNConfig(**SMALL)).parameters()))] * 8
    with pytest.raises(TypeError, match="grad_hook"):
        PQN(num_actions=2, observation_shape=(3,), grad_hook="all-reduce")


@pytest.mark.parametrize("optimizer, huber", [("adam", 1.0), ("radam", None)])
def test_other_optimizer_and_huber_loss(optimizer, huber):
    pqn = make_pqn(optimizer=optimizer, huber_delta=huber)
    before = copy.deepcopy(pqn.network.state_dict())
    metrics = pqn.update(rollout())
    assert np.isfinite(metrics["loss"])
    assert any(not torch.equal(before[k], v) for k, v in pqn.network.state_dict().items())


# ------------------------------------------------------------- acting and schedules


def test_epsilon_and_learning_rate_schedules_count_env_steps():
    assert linear_schedule(0, start=1.0, end=0.05, steps=100) == 1.0
    assert linear_schedule(50, start=1.0, end=0.05, steps=100) == pytest.approx(0.525)
    assert linear_schedule(100, start=1.0, end=0.05, steps=100) == 0.05
    assert linear_schedule(10**9, start=1.0, end=0.05, steps=100) == 0.05
    assert linear_schedule(5, start=1.0, end=0.05, steps=0) == 0.05
    pqn = make_pqn(epsilon_decay_steps=64, lr=1e-3, lr_decay_steps=128)
    assert pqn.epsilon_at(32) == pytest.approx(0.525)
    assert pqn.lr_at(32) == pytest.approx(0.75e-3)
    assert make_pqn(lr=1e-3).lr_at(10**9) == 1e-3  # lr_decay_steps = 0: constant
    batch = rollout(steps=8, envs=4)
    pqn.update(batch)  # 32 env steps learned: lr set from the steps before the update
    assert pqn.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
    pqn.update(batch)
    assert pqn.optimizer.param_groups[0]["lr"] == pytest.approx(0.75e-3)


def test_act_is_epsilon_greedy_with_one_rate_or_one_per_row():
    pqn = make_pqn(actions=4)
    obs = np.random.default_rng(0).normal(size=(200, 3)).astype(np.float32)
    greedy = pqn.q_values(obs).argmax(-1).numpy()
    np.testing.assert_array_equal(pqn.act(obs, explore=False), greedy)
    pqn.epsilon = 0.0
    np.testing.assert_array_equal(pqn.act(obs), greedy)
    pqn.epsilon = 1.0
    assert set(pqn.act(obs)) == {0, 1, 2, 3}
    pqn.epsilon = np.where(np.arange(200) < 100, 0.0, 1.0)
    actions = pqn.act(obs)
    np.testing.assert_array_equal(actions[:100], greedy[:100])
    assert (actions[100:] != greedy[100:]).any()


def test_default_networks_put_layer_norm_before_every_hidden_activation():
    vector = pqn_network((4,), 2, config=PQNConfig(hidden=(32, 32)))
    assert sum(isinstance(m, nn.LayerNorm) for m in vector.modules()) == 2
    minatar = pqn_network((10, 10, 4), 3, config=PQNConfig())
    norms = [m for m in minatar.modules() if isinstance(m, nn.LayerNorm)]
    assert [type(m) for m in norms] == [ChannelNorm, nn.LayerNorm]
    assert norms[0].normalized_shape == (16,) and norms[1].normalized_shape == (128,)
    assert minatar(torch.zeros(5, 10, 10, 4, dtype=torch.bool)).shape == (5, 3)
    off = pqn_network((10, 10, 4), 3, config=PQNConfig(layer_norm=False))
    assert not any(isinstance(m, nn.LayerNorm) for m in off.modules())
    frames = pqn_network((4, 84, 84), 6, config=PQNConfig())
    assert sum(isinstance(m, nn.LayerNorm) for m in frames.modules()) == 4


def test_channel_norm_normalises_each_position_over_its_channels():
    norm = ChannelNorm(8)
    x = torch.randn(2, 8, 3, 5) * 4 + 3
    y = norm(x)
    torch.testing.assert_close(y.mean(dim=1), torch.zeros(2, 3, 5), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.var(dim=1, unbiased=False), torch.ones(2, 3, 5), atol=1e-3, rtol=0)


# --------------------------------------------------------------- runner and resume


def counting_env(mode, envs=4):
    return InProcessVectorEnv([lambda: CountingEnv(episode_length=5)] * envs, autoreset_mode=mode)


@pytest.mark.parametrize("mode", [AutoresetMode.SAME_STEP, AutoresetMode.NEXT_STEP])
def test_runner_updates_on_every_rollout_and_tracks_episodes(mode):
    pqn = make_pqn(obs_dim=1, epsilon_decay_steps=100)
    runner = PQNRunner(pqn=pqn, env=counting_env(mode), n_steps=8, seed=0)
    before = copy.deepcopy(pqn.network.state_dict())
    seen = []
    last = runner.run(env_steps=60, on_step=seen.append)
    assert pqn.updates == len(seen) == runner.rollouts >= 2 and pqn.env_steps >= 60
    assert [m["epsilon"] for m in seen][:2] == [1.0, pytest.approx(1.0 - 0.95 * seen[0]["env_steps"] / 100)]
    assert last["episodic_length"] == 5.0 and sum(m["episodes"] for m in seen) >= 8
    # Next-step autoreset: the reset steps (one per env in steps 8-15) are not learned from.
    assert seen[1]["env_steps"] - seen[0]["env_steps"] == (32 if mode == AutoresetMode.SAME_STEP else 28)
    assert any(not torch.equal(before[k], v) for k, v in pqn.network.state_dict().items())


def test_checkpoint_resume_continues_exactly(tmp_path):
    one = make_pqn(obs_dim=1)
    runner = PQNRunner(pqn=one, env=counting_env(AutoresetMode.SAME_STEP), n_steps=8, seed=0)
    runner.run(env_steps=64)
    save_checkpoint(tmp_path, one.state_dict(), kind="pqn-test", step=one.updates)
    state, _ = load_checkpoint(tmp_path, kind="pqn-test")
    two = make_pqn(obs_dim=1, seed=7)
    two.load_state_dict(state)
    assert (two.updates, two.env_steps, two.epsilon) == (one.updates, one.env_steps, one.epsilon)
    batch = rollout(steps=4, envs=4, obs_dim=1)
    m1, m2 = one.update(batch), two.update(batch)  # same shuffles, same steps
    assert m1 == m2
    for a, b in zip(one.network.parameters(), two.network.parameters(), strict=True):
        assert torch.equal(a, b)
    obs = np.arange(50, dtype=np.float32).reshape(50, 1)
    np.testing.assert_array_equal(one.act(obs), two.act(obs))  # same exploration draws
    # A runner around the restored PQN continues its epsilon schedule.
    resumed = PQNRunner(pqn=two, env=counting_env(AutoresetMode.SAME_STEP), n_steps=8, seed=1)
    assert resumed.step()["epsilon"] == pytest.approx(two.epsilon_at(one.env_steps))


def test_policy_state_round_trip():
    one, two = make_pqn(seed=0), make_pqn(seed=1)
    obs = np.eye(3, dtype=np.float32)
    two.load_policy_state(one.policy_state())
    torch.testing.assert_close(one.q_values(obs), two.q_values(obs))
    with pytest.raises(StateError, match="shape"):
        make_pqn(obs_dim=4).load_policy_state(one.policy_state())


# ------------------------------------------------------------------------- errors


@pytest.mark.parametrize("field, value", [
    ("gamma", 1.5), ("lam", -0.1), ("lr", 0.0), ("epochs", 0), ("minibatches", 2.0),
    ("epsilon_end", 2.0), ("epsilon_decay_steps", -1), ("lr_decay_steps", 0.5),
    ("optimizer", "sgd"), ("max_grad_norm", 0.0), ("huber_delta", -1.0), ("hidden", ()),
    ("reward_scale", float("nan")),
])
def test_bad_config_is_named(field, value):
    with pytest.raises(ValueError, match=field):
        PQN(num_actions=2, observation_shape=(3,), config=PQNConfig(**{field: value}))


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="either network= or observation_shape="):
        PQN(num_actions=2)
    with pytest.raises(ValueError, match="either network= or observation_shape="):
        PQN(num_actions=2, network=nn.Linear(3, 2), observation_shape=(3,))
    with pytest.raises(ValueError, match="num_actions"):
        PQN(num_actions=0, network=nn.Linear(3, 2))
    with pytest.raises(TypeError, match="nn.Module"):
        PQN(num_actions=2, network=lambda x: x)


@pytest.mark.parametrize("change, error, message", [
    (lambda b: b.pop("truncated"), KeyError, r"missing \['truncated'\]"),
    (lambda b: b.update(rewards=b["rewards"].reshape(-1)), ValueError, "time-major"),
    (lambda b: b.update(actions=b["actions"] + 2), ValueError, r"actions must be in \[0, 2\)"),
    (lambda b: b.update(actions=b["actions"].astype(np.float32)), ValueError, "integers"),
    (lambda b: b.update(next_obs=b["next_obs"][:, :, :2]), ValueError, "one shape"),
    (lambda b: b.update(obs=b["obs"][:3]), ValueError, r"obs must start with \(T, N\)"),
    (lambda b: b.update(max_q=np.zeros((4, 2, 1))), ValueError, r"max_q must be \(T, N\)"),
])
def test_bad_rollout_is_named(change, error, message):
    batch = rollout()
    change(batch)
    with pytest.raises(error, match=message):
        make_pqn().update(batch)


def test_a_rollout_too_small_for_the_minibatches_is_refused():
    with pytest.raises(ValueError, match="cannot make 16 minibatches"):
        make_pqn(minibatches=16).update(rollout(steps=2, envs=2))


def refused(pqn, state, match):
    before = copy.deepcopy(pqn.state_dict())
    with pytest.raises(StateError, match=match):
        pqn.load_state_dict(state)
    after = pqn.state_dict()
    for key in ("network",):
        assert all(torch.equal(before[key][k], v) for k, v in after[key].items())
    assert (after["updates"], after["env_steps"], after["epsilon"]) == (
        before["updates"], before["env_steps"], before["epsilon"])
    assert torch.equal(after["shuffle_rng"], before["shuffle_rng"]) and after["rng"] == before["rng"]


def test_bad_states_are_refused_and_change_nothing():
    pqn = make_pqn()
    pqn.update(rollout())
    good = pqn.state_dict()
    refused(pqn, {k: v for k, v in good.items() if k != "env_steps"}, "missing key")
    refused(pqn, {**good, "extra": 1}, "unexpected key")
    refused(pqn, {**good, "updates": -1}, "updates")
    refused(pqn, {**good, "epsilon": [0.5, 1.5]}, r"epsilon'\]\[1\]")
    refused(pqn, {**good, "shuffle_rng": torch.zeros(3, dtype=torch.uint8)}, "torch generator")
    refused(pqn, {**good, "rng": {"bit_generator": "nonsense"}}, "rng")
    refused(pqn, {**good, "network": make_pqn(obs_dim=5).network.state_dict()}, "shape")
    wider = make_pqn(obs_dim=5)
    wider.update(rollout(obs_dim=5))
    refused(pqn, {**good, "optimizer": wider.optimizer.state_dict()}, r"optimizer.*shape")
