"""DDPG: Polyak math, noise processes, action scaling, hooks, config validation, and
what Ape-X needs: n-step discount, importance weights, priorities, acting copies."""

import numpy as np
import pytest
import torch

from algorithms.noise import GaussianNoise, OrnsteinUhlenbeckNoise, make_noise
from algorithms.td3.ddpg import DDPG, DDPGConfig, polyak_update


def _batch(n=16, obs_dim=3, low=-2.0, high=2.0, seed=0, **extra):
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, obs_dim)), "action": rng.uniform(low, high, (n, 1)),
            "reward": rng.standard_normal(n), "next_obs": rng.standard_normal((n, obs_dim)),
            "terminated": (rng.random(n) < 0.2).astype(np.float32), **extra}


def _ddpg(seed=0, **config):
    return DDPG(obs_dim=3, action_low=[-2], action_high=[2], config=DDPGConfig(seed=seed, hidden=(16,), **config))


def test_polyak_update_math():
    target = [torch.zeros(3), torch.full((2, 2), 4.0)]
    source = [torch.ones(3), torch.zeros(2, 2)]
    polyak_update(target, source, 0.25)
    torch.testing.assert_close(target[0], torch.full((3,), 0.25))
    torch.testing.assert_close(target[1], torch.full((2, 2), 3.0))
    polyak_update(target, source, 1.0)  # tau=1 is a hard copy
    torch.testing.assert_close(target[1], torch.zeros(2, 2))
    with pytest.raises(ValueError, match="target tensors"):
        polyak_update(target, source[:1], 0.5)


def test_soft_update_moves_targets_by_tau():
    algo = DDPG(obs_dim=3, action_low=[-2], action_high=[2], config=DDPGConfig(tau=0.1, seed=0))
    before = [p.clone() for p in algo.target_critic.parameters()]
    algo.update(_batch())
    for b, t, s in zip(before, algo.target_critic.parameters(), algo.critic.parameters()):
        torch.testing.assert_close(t, 0.9 * b + 0.1 * s)


def test_critic_target_uses_target_networks_and_termination():
    algo = DDPG(obs_dim=3, action_low=[-1], action_high=[1], config=DDPGConfig(gamma=0.5, seed=0))
    data = algo.preprocess(_batch())
    with torch.no_grad():
        a = torch.tanh(algo.target_actor(data["next_obs"]))
        q = algo.target_critic(torch.cat([data["next_obs"], a], -1)).squeeze(-1)
        expected = data["reward"] + 0.5 * (1 - data["terminated"]) * q
        torch.testing.assert_close(algo.critic_target(data), expected)
        for p in algo.actor.parameters():  # online actor must not matter
            p.add_(1.0)
        torch.testing.assert_close(algo.critic_target(data), expected)


def test_actions_are_scaled_into_the_box_and_noise_explores():
    algo = DDPG(obs_dim=2, action_low=[0.0, -3.0], action_high=[1.0, 3.0],
                config=DDPGConfig(noise="gaussian", noise_scale=5.0, seed=0))
    obs = np.random.default_rng(0).standard_normal((64, 2))
    explored = algo.act(obs)
    assert explored.shape == (64, 2)
    assert (explored >= [0.0, -3.0]).all() and (explored <= [1.0, 3.0]).all()
    greedy = algo.act(obs, explore=False)
    assert not np.allclose(explored, greedy)
    np.testing.assert_allclose(greedy, algo.act(obs, explore=False))


def test_update_learns_a_one_step_bandit():
    # reward = -(a - 0.5)^2, episodes of one step: the actor should move toward 0.5.
    algo = DDPG(obs_dim=1, action_low=[-1], action_high=[1],
                config=DDPGConfig(actor_lr=1e-3, critic_lr=1e-2, hidden=(32,), seed=0))
    rng = np.random.default_rng(0)
    for _ in range(150):
        a = rng.uniform(-1, 1, (32, 1))
        algo.update({"obs": np.zeros((32, 1)), "action": a, "reward": -((a[:, 0] - 0.5) ** 2),
                     "next_obs": np.zeros((32, 1)), "terminated": np.ones(32)})
    assert abs(float(algo.act(np.zeros((1, 1)), explore=False)[0, 0]) - 0.5) < 0.15


def test_hooks_can_be_overridden():
    calls = []

    class Traced(DDPG):
        def critic_loss(self, data, y):
            calls.append("critic_loss")
            return super().critic_loss(data, y)

        def actor_loss(self, data):
            calls.append("actor_loss")
            return super().actor_loss(data)

    metrics = Traced(obs_dim=3, action_low=[-2], action_high=[2]).update(_batch())
    assert calls == ["critic_loss", "actor_loss"]
    assert set(metrics) >= {"critic_loss", "actor_loss", "q_mean"}


def test_state_dict_round_trip():
    a = DDPG(obs_dim=3, action_low=[-2], action_high=[2], config=DDPGConfig(seed=0))
    a.update(_batch())
    b = DDPG(obs_dim=3, action_low=[-2], action_high=[2], config=DDPGConfig(seed=1))
    b.load_state_dict(a.state_dict())
    obs = np.ones((2, 3))
    np.testing.assert_allclose(a.act(obs, explore=False), b.act(obs, explore=False))
    assert b.updates == 1


def test_ou_noise_is_correlated_and_resets():
    noise = OrnsteinUhlenbeckNoise(shape=(2000, 1), theta=0.15, sigma=0.2, dt=1.0, seed=0)
    for _ in range(40):  # reach the stationary regime, where corr = exp(-theta dt) ~ 0.86
        x1 = noise.sample()
    x2 = noise.sample()
    assert np.corrcoef(x1[:, 0], x2[:, 0])[0, 1] > 0.75
    mask = np.zeros(2000, bool)
    mask[:10] = True
    noise.reset(mask)
    assert (noise.state[:10] == 0).all() and (noise.state[10:] != 0).any()
    g = GaussianNoise(shape=(10000,), std=0.3, seed=0).sample()
    assert abs(g.std() - 0.3) < 0.02


@pytest.mark.parametrize("kwargs, match", [
    ({"gamma": 1.5}, "gamma"), ({"tau": 0.0}, "tau"), ({"actor_lr": -1.0}, "actor_lr"),
    ({"noise": "pink"}, "noise"), ({"grad_clip": 0.0}, "grad_clip"), ({"noise_scale": -0.1}, "noise_scale"),
    ({"priority_eps": -1e-6}, "priority_eps"),
])
def test_invalid_config_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DDPG(obs_dim=2, action_low=[-1], action_high=[1], config=DDPGConfig(**kwargs))


def test_invalid_construction_rejected():
    with pytest.raises(ValueError, match="low < high"):
        DDPG(obs_dim=2, action_low=[1], action_high=[-1])
    with pytest.raises(ValueError, match="obs_dim"):
        DDPG(obs_dim=0, action_low=[-1], action_high=[1])
    with pytest.raises(ValueError, match="noise kind"):
        make_noise("uniform", shape=(1,), scale=0.1)
    with pytest.raises(KeyError, match="reward"):
        DDPG(obs_dim=3, action_low=[-2], action_high=[2]).update({k: v for k, v in _batch().items() if k != "reward"})


def test_n_step_discount_from_the_batch_replaces_gamma():
    algo = _ddpg(gamma=0.99)
    one_step, three_step = algo.preprocess(_batch()), algo.preprocess(_batch(discount=np.full(16, 0.5**3)))
    with torch.no_grad():
        a = torch.tanh(algo.target_actor(one_step["next_obs"]))
        next_q = algo.target_critic(torch.cat([one_step["next_obs"], a], -1)).squeeze(-1)
        alive = 1 - one_step["terminated"]
        torch.testing.assert_close(algo.critic_target(one_step), one_step["reward"] + 0.99 * alive * next_q)
        torch.testing.assert_close(algo.critic_target(three_step), one_step["reward"] + 0.125 * alive * next_q)


def test_importance_weights_scale_the_critic_loss():
    algo = _ddpg()
    data = algo.preprocess(_batch())
    y = torch.randn(16)
    plain, td = algo.critic_loss(data, y)
    data["weights"] = torch.linspace(0.0, 1.0, 16)
    torch.testing.assert_close(algo.critic_loss(data, y)[0], (data["weights"] * td.pow(2)).mean())
    torch.testing.assert_close(plain, td.pow(2).mean())


def test_learn_returns_priorities_abs_td_plus_eps_beside_the_metrics():
    algo = _ddpg(priority_eps=1e-3)
    batch = _batch(discount=np.full(16, 0.9), weights=np.ones(16))
    data = algo.preprocess(batch)
    with torch.no_grad():
        y = algo.critic_target(data)
        td = y - algo.critic(torch.cat([data["obs"], data["action"]], -1)).squeeze(-1)
    metrics, priorities = algo.learn(batch)
    assert priorities.shape == (16,) and priorities.dtype == np.float64 and (priorities > 0).all()
    np.testing.assert_allclose(priorities, td.abs().numpy() + 1e-3, rtol=1e-5)
    assert set(metrics) == {"critic_loss", "actor_loss", "q_mean", "target_mean", "td_abs"}
    assert all(isinstance(v, float) for v in metrics.values())


def test_initial_priorities_of_a_tied_copy_equal_its_learned_priorities():
    algo = _ddpg()
    algo.tie_target()
    assert algo.target_actor is algo.actor and algo.target_critic is algo.critic
    batch = _batch(discount=np.full(16, 0.97))
    np.testing.assert_allclose(algo.initial_priorities(batch), algo.learn(batch).priorities, rtol=1e-6)


def test_policy_state_holds_actor_and_critic_and_round_trips():
    learner, actor = _ddpg(seed=0), _ddpg(seed=1)
    learner.learn(_batch())
    state = learner.policy_state()
    assert {key.split(".")[0] for key in state} == {"actor", "critic"}
    actor.tie_target()
    actor.load_policy_state(state)
    obs = _batch()["obs"]
    np.testing.assert_array_equal(actor.act(obs, explore=False), learner.act(obs, explore=False))
    learner.tie_target()
    np.testing.assert_allclose(actor.initial_priorities(_batch()), learner.initial_priorities(_batch()))
    with pytest.raises(KeyError, match="critic2"):
        actor.load_policy_state(state | {"critic2.weight": torch.zeros(1)})


@pytest.mark.parametrize("kind", ["gaussian", "ou"])
def test_noise_scale_per_row(kind):
    algo = DDPG(obs_dim=2, action_low=[-1.0], action_high=[3.0], config=DDPGConfig(noise=kind, seed=0))
    obs = np.random.default_rng(1).standard_normal((6, 2))
    algo.noise_scale = np.array([0.0, 0.0, 0.0, 0.5, 0.5, 0.5])
    explored, greedy = algo.act(obs), algo.act(obs, explore=False)
    np.testing.assert_array_equal(explored[:3], greedy[:3])
    assert (explored[3:] != greedy[3:]).all() and (explored >= -1).all() and (explored <= 3).all()
    algo.noise_scale = 0.0  # a float: every row
    np.testing.assert_array_equal(algo.act(obs), greedy)


def test_acting_copies_build_no_optimizer():
    algo = _ddpg()
    algo.tie_target()
    algo.act(np.zeros((2, 3)))
    algo.initial_priorities(_batch())
    assert algo._actor_opt is None and algo._critic_opt is None
