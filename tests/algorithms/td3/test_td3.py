"""TD3: the target by hand, delayed updates, priorities, n-step discount, importance
weights, acting copies, state, per-actor exploration scales, config validation."""

import io
import math

import numpy as np
import pytest
import torch
from torch import nn

from algorithms.noise import actor_noise_scale, exploration_scales
from algorithms.td3 import TD3, DDPGConfig, TD3Config


def _batch(n=16, obs_dim=3, low=-2.0, high=2.0, seed=0, **extra):
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, obs_dim)), "action": rng.uniform(low, high, (n, 1)),
            "reward": rng.standard_normal(n), "next_obs": rng.standard_normal((n, obs_dim)),
            "terminated": (rng.random(n) < 0.2).astype(np.float32), **extra}


def _td3(seed=0, **config):
    config = {"hidden": (16,)} | config
    return TD3(obs_dim=3, action_low=[-2], action_high=[2], config=TD3Config(seed=seed, **config))


def _linear(weights, bias):
    layer = nn.Linear(len(weights), 1)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([weights]))
        layer.bias.fill_(bias)
    return layer


def _tiny(**config):
    """obs and actions of one dimension: mu(s) = tanh(0.5 s + 0.1),
    Q1(s, a) = s + 2a, Q2(s, a) = -s + a + 0.5 (a normalized)."""
    return TD3(obs_dim=1, action_low=[-2], action_high=[2], actor=_linear([0.5], 0.1),
               critic=_linear([1.0, 2.0], 0.0), critic2=_linear([-1.0, 1.0], 0.5),
               config=TD3Config(seed=0, **config))


_TINY_BATCH = {"obs": np.array([[1.0], [2.0]]), "action": np.array([[1.0], [-2.0]]),
               "reward": np.array([1.0, -1.0]), "next_obs": np.array([[0.5], [-1.0]]),
               "terminated": np.array([0.0, 1.0]), "discount": np.array([0.9, 0.9])}


def _by_hand(noise=(0.0, 0.0)):
    ys = []
    for s, r, done, eps in zip([0.5, -1.0], [1.0, -1.0], [0.0, 1.0], noise):
        a = min(1.0, max(-1.0, math.tanh(0.5 * s + 0.1) + eps))
        ys.append(r + 0.9 * (1 - done) * min(s + 2 * a, -s + a + 0.5))
    return torch.tensor(ys)


def test_target_is_the_min_of_twin_target_critics_by_hand():
    algo = _tiny(target_noise=0.0)
    data = algo.preprocess(_TINY_BATCH)
    with torch.no_grad():
        torch.testing.assert_close(algo.critic_target(data), _by_hand())
        for p in [*algo.actor.parameters(), *algo.critic.parameters(), *algo.critic2.parameters()]:
            p.add_(1.0)  # the online networks must not matter
        torch.testing.assert_close(algo.critic_target(data), _by_hand())


def test_target_policy_smoothing_noise_is_clipped():
    # A huge standard deviation: every noise draw is clipped to +-0.5, its sign random.
    algo = _tiny(target_noise=100.0, target_noise_clip=0.5)
    replay = torch.Generator().set_state(algo.generator.get_state())
    with torch.no_grad():
        y = algo.critic_target(algo.preprocess(_TINY_BATCH))
    noise = (torch.randn((2, 1), generator=replay) * 100.0).clamp(-0.5, 0.5)[:, 0].tolist()
    assert all(abs(e) == 0.5 for e in noise)
    torch.testing.assert_close(y, _by_hand(noise))
    assert not torch.allclose(y, _by_hand())


def test_actor_and_targets_move_every_policy_delay_learns():
    algo = _td3(policy_delay=3)
    moved = []
    for i in range(7):
        before = [[p.clone() for p in m.parameters()] for m in (algo.actor, algo.target_actor,
                                                               algo.target_critic2, algo.critic2)]
        algo.learn(_batch(seed=i))
        after = [list(m.parameters()) for m in (algo.actor, algo.target_actor, algo.target_critic2, algo.critic2)]
        moved.append([any(not torch.equal(a, b) for a, b in zip(xs, ys)) for xs, ys in zip(before, after)])
    actor, target_actor, target_critic, critic = zip(*moved)
    assert actor == target_actor == target_critic == (True, False, False, True, False, False, True)
    assert all(critic) and algo.updates == 7


@pytest.mark.parametrize("noise", [0.0, 0.2])
def test_priorities_are_the_mean_of_both_critics_abs_td_plus_eps(noise):
    algo = _td3(target_noise=noise, priority_eps=1e-3)
    batch = _batch(weights=np.linspace(0.1, 1.0, 16))
    data = algo.preprocess(batch)
    replay = algo.generator.get_state()
    with torch.no_grad():
        y = algo.critic_target(data)
        x = torch.cat([data["obs"], data["action"]], -1)
        td1, td2 = y - algo.critic(x).squeeze(-1), y - algo.critic2(x).squeeze(-1)
    algo.generator.set_state(replay)  # the same smoothing noise inside learn
    priorities = algo.learn(batch).priorities
    assert priorities.shape == (16,) and priorities.dtype == np.float64 and (priorities > 0).all()
    np.testing.assert_allclose(priorities, ((td1.abs() + td2.abs()) / 2).numpy() + 1e-3, rtol=1e-5)


def test_n_step_discount_from_the_batch_is_honoured():
    algo = _td3(target_noise=0.0, gamma=0.99)
    one_step = algo.preprocess(_batch())
    three_step = algo.preprocess(_batch(discount=np.full(16, 0.5**3)))
    with torch.no_grad():
        y1, y3 = algo.critic_target(one_step), algo.critic_target(three_step)
        a = torch.tanh(algo.target_actor(one_step["next_obs"]))
        x = torch.cat([one_step["next_obs"], a], -1)
        next_q = torch.minimum(algo.target_critic(x), algo.target_critic2(x)).squeeze(-1)
    alive = 1 - one_step["terminated"]
    torch.testing.assert_close(y1, one_step["reward"] + 0.99 * alive * next_q)
    torch.testing.assert_close(y3, one_step["reward"] + 0.125 * alive * next_q)
    assert not torch.allclose(y1, y3)


def test_importance_weights_scale_the_critic_loss():
    algo = _td3()
    data = algo.preprocess(_batch())
    y = torch.randn(16)
    plain, td = algo.critic_loss(data, y)
    torch.testing.assert_close(plain, td.pow(2).sum(0).mean())
    data["weights"] = torch.full((16,), 2.0)
    torch.testing.assert_close(algo.critic_loss(data, y)[0], 2 * plain)
    data["weights"] = torch.zeros(16)
    data["weights"][3] = 1.0  # only transition 3 counts
    torch.testing.assert_close(algo.critic_loss(data, y)[0], td[:, 3].pow(2).sum() / 16)


def test_initial_priorities_of_a_tied_copy_equal_its_learned_priorities():
    algo = _td3()
    algo.tie_target()
    assert algo.target_critic2 is algo.critic2 and algo.target_actor is algo.actor
    batch = _batch(discount=np.full(16, 0.97))
    replay = algo.generator.get_state()
    initial = algo.initial_priorities(batch)
    algo.generator.set_state(replay)
    np.testing.assert_allclose(initial, algo.learn(batch).priorities, rtol=1e-6)


def test_policy_state_round_trip_acts_and_scores_identically():
    learner, actor = _td3(seed=0, target_noise=0.0), _td3(seed=1, target_noise=0.0)
    for i in range(3):
        learner.learn(_batch(seed=i))
    state = learner.policy_state()
    assert {key.split(".")[0] for key in state} == {"actor", "critic", "critic2"}
    actor.tie_target()
    actor.load_policy_state(state)
    obs = _batch()["obs"]
    np.testing.assert_array_equal(actor.act(obs, explore=False), learner.act(obs, explore=False))
    learner.tie_target()  # the learner's own online networks, scored like the actor does
    np.testing.assert_allclose(actor.initial_priorities(_batch()), learner.initial_priorities(_batch()))


def test_exploration_noise_is_per_row_and_clipped_to_the_box():
    algo = TD3(obs_dim=3, action_low=[0.0, -3.0], action_high=[1.0, 3.0], config=TD3Config(seed=0))
    obs = np.random.default_rng(0).standard_normal((64, 3))
    algo.noise_scale = np.where(np.arange(64) < 32, 0.0, 5.0)
    explored, greedy = algo.act(obs), algo.act(obs, explore=False)
    assert explored.shape == (64, 2) and explored.dtype == np.float32
    np.testing.assert_array_equal(explored[:32], greedy[:32])
    assert (explored[32:] != greedy[32:]).all()
    assert (explored >= [0.0, -3.0]).all() and (explored <= [1.0, 3.0]).all()
    assert ((explored[32:] == [0.0, -3.0]) | (explored[32:] == [1.0, 3.0])).mean() > 0.5  # clipped
    algo.noise_scale = np.ones(5)
    with pytest.raises(ValueError, match="one scale per row of obs, \\(64,\\)"):
        algo.act(obs)


def test_state_dict_round_trip_resumes_identically():
    a = _td3(seed=0, target_noise=0.0)
    for i in range(3):
        a.learn(_batch(seed=i))
    a.noise_scale = np.array([0.1, 0.2])
    b = _td3(seed=5, target_noise=0.0)
    # Through bytes, as a checkpoint goes (an in-process torch optimizer state would be shared).
    saved = io.BytesIO()
    torch.save(a.state_dict(), saved)
    saved.seek(0)
    b.load_state_dict(torch.load(saved, weights_only=True))
    assert b.updates == 3 and np.array_equal(b.noise_scale, [0.1, 0.2])
    for step in (4, 5):  # the critics alone, then the actor and the targets too
        la, lb = a.learn(_batch(seed=step)), b.learn(_batch(seed=step))
        assert la.metrics == lb.metrics
        np.testing.assert_array_equal(la.priorities, lb.priorities)
    for x, y in zip(a.critic2.parameters(), b.critic2.parameters()):
        torch.testing.assert_close(x, y)


def test_learns_a_one_step_bandit():
    # reward = -(a - 0.5)^2, episodes of one step: the actor moves toward a = 0.5.
    algo = TD3(obs_dim=1, action_low=[-1], action_high=[1],
               config=TD3Config(actor_lr=1e-3, critic_lr=1e-2, hidden=(32,), seed=0))
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = rng.uniform(-1, 1, (32, 1))
        algo.update({"obs": np.zeros((32, 1)), "action": a, "reward": -((a[:, 0] - 0.5) ** 2),
                     "next_obs": np.zeros((32, 1)), "terminated": np.ones(32)})
    assert abs(float(algo.act(np.zeros((1, 1)), explore=False)[0, 0]) - 0.5) < 0.15


def test_twin_critics_start_apart():
    algo = _td3()
    assert any(not torch.equal(a, b) for a, b in zip(algo.critic.parameters(), algo.critic2.parameters()))

    class Fixed(nn.Module):  # no reset_parameters: no way to make an independent twin
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.ones(4, 1))

        def forward(self, x):
            return x @ self.w

    with pytest.raises(ValueError, match="critic2"):
        TD3(obs_dim=3, action_low=[-1], action_high=[1], critic=Fixed())


def test_critic_layer_norm_normalizes_both_critics_and_not_the_actor():
    algo = _td3(critic_layer_norm=True, hidden=(16, 8))
    for net in (algo.critic, algo.critic2, algo.target_critic, algo.target_critic2):
        assert sum(isinstance(m, nn.LayerNorm) for m in net.modules()) == 2  # one per hidden layer
    assert not any(isinstance(m, nn.LayerNorm) for m in algo.actor.modules())
    # The twins still start apart (LayerNorm's reset_parameters is the identity, the
    # Linears' are not), and an update runs through the normalized critics.
    assert any(not torch.equal(a, b) for a, b in zip(algo.critic.parameters(), algo.critic2.parameters()))
    before = [p.clone() for p in algo.critic.parameters()]
    algo.learn(_batch())
    assert all(not torch.equal(a, b) for a, b in zip(before, algo.critic.parameters()))


def test_exploration_scales_spread_over_every_env_copy():
    first, second = exploration_scales(0, 2, 8), exploration_scales(1, 2, 8)
    scales = np.concatenate([first, second])
    np.testing.assert_allclose(scales, 0.5 ** (1 + 3 * np.arange(16) / 15))
    np.testing.assert_allclose(scales[[0, 7, 8, 15]], [0.5, 0.1895, 0.1649, 0.0625], atol=1e-4)
    assert exploration_scales(1, 2, 8, per_env=False) == actor_noise_scale(1, 2) == 0.0625
    assert exploration_scales(0, 1, 1) == pytest.approx([0.5]) and actor_noise_scale(0, 1, sigma=0.3) == 0.3
    with pytest.raises(ValueError, match="index"):
        exploration_scales(2, 2, 8)
    with pytest.raises(ValueError, match="sigma"):
        exploration_scales(0, 2, 8, sigma=1.5)
    with pytest.raises(ValueError, match="num_envs"):
        exploration_scales(0, 2, 0)


@pytest.mark.parametrize("kwargs, match", [
    ({"policy_delay": 0}, "policy_delay"), ({"policy_delay": 1.5}, "policy_delay"),
    ({"target_noise": -0.1}, "target_noise"), ({"target_noise_clip": -1.0}, "target_noise_clip"),
    ({"tau": 0.0}, "tau"), ({"gamma": 1.5}, "gamma"), ({"priority_eps": -1.0}, "priority_eps"),
    ({"noise": "pink"}, "noise"),
])
def test_invalid_config_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TD3(obs_dim=2, action_low=[-1], action_high=[1], config=TD3Config(**kwargs))


def test_a_ddpg_config_is_refused():
    with pytest.raises(TypeError, match="TD3Config"):
        TD3(obs_dim=2, action_low=[-1], action_high=[1], config=DDPGConfig())


def test_random_start_acts_uniformly_until_trained_parameters_arrive():
    """With ``random_start`` an Ape-X TD3 actor's actions cover the Box uniformly while
    it holds the learner's initial weights (version 0), then are its policy's; without
    it the policy acts from the first step."""
    import gymnasium as gym

    from algorithms.dqn import ApexConfig, ApexDPGActor
    from rlpar.servers import ModelStore

    class Recorder:
        def __init__(self):
            self.batches = []

        def add(self, batch, priorities):
            self.batches.append(batch)

    def actor(random_start, store):
        td3 = _td3()
        env = gym.vector.SyncVectorEnv([lambda: gym.make("Pendulum-v1")] * 4)
        sink = Recorder()
        made = ApexDPGActor(ddpg=td3, env=env, buffer=sink, params=store, index=0, num_actors=1,
                            config=ApexConfig(n_step=1, add_every=1, pull_every=4), sigma=1e-6,
                            sigma_alpha=0.0, random_start=random_start, seed=0)
        return made, td3, sink

    def by_policy(td3, batches):  # the noiseless policy's actions on the recorded obs
        obs = np.concatenate([b["obs"] for b in batches])
        return np.abs(np.concatenate([b["action"] for b in batches]) - td3.act(obs, explore=False)).max()

    store = ModelStore()
    store.push(_td3().policy_state(), version=0)  # the learner's initial weights
    random, td3, sink = actor(True, store)
    for _ in range(50):
        random.step()
    early = np.concatenate([b["action"] for b in sink.batches])
    assert early.shape == (200, 1) and early.min() < -1.5 and early.max() > 1.5 and abs(early.mean()) < 0.4
    assert by_policy(td3, sink.batches) > 1.0
    store.push({k: v * 2.0 for k, v in td3.policy_state().items()}, version=8)  # first trained ones
    while random.version <= 0:
        random.step()
    sink.batches.clear()
    random.step()
    assert by_policy(td3, sink.batches) < 1e-3
    fresh = ModelStore()
    fresh.push(_td3().policy_state(), version=0)
    plain, td3, sink = actor(False, fresh)
    plain.step()
    assert plain.version == 0 and by_policy(td3, sink.batches) < 1e-3


def test_a_box_of_any_shape_gets_actions_in_its_shape_and_learns_from_them():
    """Networks see flat actions; the env gets its Box's shape, e.g. (2, 2), from
    ``act`` and from the random start alike, and batches of such actions learn."""
    import gymnasium as gym
    from gymnasium import spaces

    from algorithms.dqn import ApexConfig, ApexDPGActor
    from rlpar.servers import ModelStore

    low, high = np.full((2, 2), -2.0, np.float32), np.array([[2.0, 1.0], [3.0, 0.0]], np.float32)
    td3 = TD3(obs_dim=3, action_low=low, action_high=high, config=TD3Config(seed=0, hidden=(16,)))
    assert (td3.action_dim, td3.action_shape) == (4, (2, 2))
    obs = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    for explore in (False, True):
        action = td3.act(obs, explore=explore)
        assert action.shape == (5, 2, 2) and np.all(action >= low) and np.all(action <= high)
    batch = _batch(n=8) | {"action": np.random.default_rng(1).uniform(-2.0, 0.0, (8, 2, 2))}
    assert np.isfinite(td3.learn(batch).priorities).all()

    class Box22(gym.Env):
        observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)
        action_space = spaces.Box(low, high, dtype=np.float32)

        def reset(self, *, seed=None, options=None):
            return np.zeros(3, np.float32), {}

        def step(self, action):
            assert action.shape == (2, 2)
            return np.zeros(3, np.float32), 0.0, False, False, {}

    class Recorder:
        def __init__(self):
            self.actions = []

        def add(self, batch, priorities):
            self.actions.append(batch["action"])

    store, sink = ModelStore(), Recorder()
    store.push(td3.policy_state(), version=0)
    actor = ApexDPGActor(ddpg=td3, env=gym.vector.SyncVectorEnv([Box22] * 2), buffer=sink, params=store,
                         index=0, num_actors=1, config=ApexConfig(n_step=1, add_every=1, pull_every=4),
                         sigma=0.1, sigma_alpha=0.0, random_start=True, seed=0)
    for _ in range(4):
        actor.step()
    assert sink.actions and all(a.shape[1:] == (2, 2) for a in sink.actions)


def test_integer_observations_act_and_learn_as_floats():
    """A uint8 vector Box (e.g. a game's RAM) reaches the MLPs as float values."""
    td3 = _td3()
    obs = np.random.default_rng(0).integers(0, 255, (5, 3), dtype=np.uint8)
    assert np.array_equal(td3.act(obs, explore=False), td3.act(obs.astype(np.float32), explore=False))
    batch = _batch(n=8) | {"obs": obs[:4].repeat(2, 0), "next_obs": obs[1:5].repeat(2, 0)}
    assert np.isfinite(td3.learn(batch).priorities).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_actions_at_the_extremes_stay_inside_the_box_in_its_dtype(dtype):
    """center + half_range at +-1 rounds one float32 step past a bound like 0.1: the
    env's Box.contains refused it. Actions are clipped to the bounds in the Box's dtype."""
    from gymnasium import spaces

    rng = np.random.default_rng(0)
    for _ in range(200):
        low = rng.uniform(-3, 3, size=2)
        box = spaces.Box(low=low, high=low + rng.uniform(0.01, 2, size=2), dtype=dtype)
        algo = TD3(obs_dim=3, action_low=box.low, action_high=box.high, config=TD3Config(seed=0, hidden=(8,)))
        actions = algo.to_env(np.array([[-1.0, -1.0], [1.0, 1.0], [-1.0, 1.0], [0.0, 0.0]]))
        assert actions.dtype == dtype
        assert all(box.contains(a) for a in actions), (box, actions)
    assert _td3().to_env(np.array([[1.0]])).dtype == np.float32  # bounds given as lists: float32
