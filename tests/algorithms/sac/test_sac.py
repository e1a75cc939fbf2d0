"""SAC: the critic, actor and temperature losses by hand on a tiny fixed network, the
squashed log-prob against a numerical change of variables, priorities, weights, the
grad hook, acting, state, config validation, and two short learning checks."""

import io
import math

import numpy as np
import pytest
import torch
from torch import nn

from algorithms.sac import SAC, SACConfig
from algorithms.sac.squashed import squashed_log_prob, squashed_sample


def _linear(rows, bias):
    layer = nn.Linear(len(rows[0]), len(rows))
    with torch.no_grad():
        layer.weight.copy_(torch.tensor(rows))
        layer.bias.copy_(torch.tensor(bias))
    return layer


LOG_STD = -1.5  # raw log-std 0 -> -5 + 0.5 * 7 * (tanh(0) + 1)


def _tiny(**config):
    """obs and actions of one dimension (Box [-2, 2]): mean(s) = 0.5 s + 0.1, log-std
    -1.5; Q1(s, a) = s + 2a, Q2(s, a) = -s + a + 0.5 (a normalized)."""
    config = {"alpha": 0.5, "seed": 0} | config
    return SAC(obs_dim=1, action_low=[-2], action_high=[2], actor=_linear([[0.5], [0.0]], [0.1, 0.0]),
               critic=_linear([[1.0, 2.0]], [0.0]), critic2=_linear([[-1.0, 1.0]], [0.5]),
               config=SACConfig(**config))


_TINY_BATCH = {"obs": np.array([[1.0], [2.0]]), "action": np.array([[1.0], [-2.0]]),
               "reward": np.array([1.0, -1.0]), "next_obs": np.array([[0.5], [-1.0]]),
               "terminated": np.array([0.0, 1.0]), "discount": np.array([0.9, 0.9])}


def _noise(algo, *shapes):
    """The standard normal draws ``algo`` will make next, in order."""
    g = torch.Generator()
    g.set_state(algo.generator.get_state())
    return [torch.randn(shape, generator=g).reshape(-1).tolist() for shape in shapes]


def _policy(s, e):
    """(a, log pi(a)) by hand for the tiny actor at obs s with noise e."""
    u = 0.5 * s + 0.1 + math.exp(LOG_STD) * e
    log_prob = -0.5 * e * e - LOG_STD - 0.5 * math.log(2 * math.pi) - math.log(1 - math.tanh(u) ** 2)
    return math.tanh(u), log_prob


def _q1(s, a):
    return s + 2 * a


def _q2(s, a):
    return -s + a + 0.5


def _targets(noise, alpha=0.5):
    ys = []
    for s, r, done, e in zip([0.5, -1.0], [1.0, -1.0], [0.0, 1.0], noise):
        a, log_prob = _policy(s, e)
        ys.append(r + 0.9 * (1 - done) * (min(_q1(s, a), _q2(s, a)) - alpha * log_prob))
    return ys


def test_critic_loss_by_hand():
    algo = _tiny()
    [noise] = _noise(algo, (2, 1))
    data = algo.preprocess(_TINY_BATCH)
    with torch.no_grad():
        y = algo.critic_target(data)
        loss, td = algo.critic_loss(data, y)
    ys = _targets(noise)
    torch.testing.assert_close(y, torch.tensor(ys), rtol=1e-5, atol=1e-5)
    by_hand = np.mean([(y - _q1(s, a)) ** 2 + (y - _q2(s, a)) ** 2
                       for y, s, a in zip(ys, [1.0, 2.0], [0.5, -1.0])])
    assert float(loss) == pytest.approx(by_hand, rel=1e-5)
    np.testing.assert_allclose(algo.priorities(td), np.mean(np.abs(td.numpy()), 0) + 1e-6, rtol=1e-6)


def test_actor_loss_by_hand():
    algo = _tiny()
    [noise] = _noise(algo, (2, 1))
    loss, log_prob = algo.actor_loss(algo.preprocess(_TINY_BATCH))
    terms = []
    for s, e in zip([1.0, 2.0], noise):
        a, lp = _policy(s, e)
        terms.append(0.5 * lp - min(_q1(s, a), _q2(s, a)))
    assert float(loss.detach()) == pytest.approx(np.mean(terms), rel=1e-5)
    loss.backward()  # reparameterized: the gradient reaches the actor's mean
    assert algo.actor.weight.grad is not None and algo.actor.weight.grad.abs().sum() > 0


def test_temperature_update_by_hand():
    # One learn: the target's draws, then the actor step's; alpha's loss uses the latter.
    algo = _tiny(alpha_lr=0.01)
    _, actor_noise = _noise(algo, (2, 1), (2, 1))
    log_probs = [_policy(s, e)[1] for s, e in zip([1.0, 2.0], actor_noise)]
    metrics = algo.update(_TINY_BATCH)
    gap = np.mean(log_probs) + algo.target_entropy
    assert algo.target_entropy == -1.0
    assert metrics["alpha_loss"] == pytest.approx(-0.5 * gap, rel=1e-5)
    # Adam's first step moves log alpha by lr against the sign of its gradient -alpha * gap.
    expected = math.log(0.5) + 0.01 * np.sign(gap)
    assert float(algo.temperature.log_alpha.detach()) == pytest.approx(expected, abs=1e-6)
    fixed = _tiny(autotune=False)
    fixed.update(_TINY_BATCH)
    assert float(fixed.alpha) == pytest.approx(0.5)


def test_squashed_log_prob_matches_a_numerical_change_of_variables():
    mean, log_std = torch.tensor([[0.3, -1.2]], dtype=torch.float64), torch.tensor([[-0.2, 0.4]],
                                                                                     dtype=torch.float64)
    y = torch.tensor([[0.55, -0.9]], dtype=torch.float64)
    # p_Y(y) = prod_i N(atanh y_i) |d atanh(y_i) / dy_i|, the derivative by central differences.
    h = 1e-6
    slope = (torch.atanh(y + h) - torch.atanh(y - h)) / (2 * h)
    gaussian = torch.distributions.Normal(mean, log_std.exp()).log_prob(torch.atanh(y))
    numerical = (gaussian + slope.log()).sum(-1)
    torch.testing.assert_close(squashed_log_prob(mean, log_std, y), numerical, rtol=1e-7, atol=1e-7)
    # A sample's log-prob is the density at its action, and the density integrates to 1.
    noise = torch.tensor([[0.7, -0.4]], dtype=torch.float64)
    action, log_prob = squashed_sample(mean, log_std, noise)
    torch.testing.assert_close(log_prob, squashed_log_prob(mean, log_std, action))
    grid = torch.linspace(-1 + 1e-9, 1 - 1e-9, 200_001, dtype=torch.float64)[:, None]
    density = squashed_log_prob(mean[:, :1], log_std[:, :1], grid).exp()
    assert float(torch.trapezoid(density, grid[:, 0])) == pytest.approx(1.0, abs=1e-4)


def test_squashed_log_prob_stays_finite_where_tanh_saturates():
    _, log_prob = squashed_sample(torch.tensor([[12.0]]), torch.tensor([[0.0]]), torch.tensor([[0.0]]))
    assert torch.isfinite(log_prob).all()  # log(1 - tanh(12)^2) = -46.6, not log(0)


def test_importance_weights_scale_the_critic_loss():
    algo = _tiny()
    state = algo.generator.get_state()
    data = algo.preprocess(_TINY_BATCH | {"weights": np.array([2.0, 0.0])})
    with torch.no_grad():
        weighted, td = algo.critic_loss(data, algo.critic_target(data))
    per_row = td.pow(2).sum(0)
    assert float(weighted) == pytest.approx(float(per_row[0]), rel=1e-6)  # (2 * e0 + 0 * e1) / 2
    algo.generator.set_state(state)


def test_grad_hook_runs_between_backward_and_every_step():
    # A hook that zeroes every gradient: Adam's first step is then 0, so no parameter
    # moves, which holds only if the hook ran before each of the three optimizer steps.
    seen = []

    def hook(params):
        seen.append(len(params))
        for p in params:
            assert p.grad is not None
            p.grad.zero_()

    algo = _tiny()
    algo.grad_hook = hook
    names = ("actor", "critic", "critic2", "temperature")

    def flat():
        return {n: torch.cat([p.detach().reshape(-1) for p in getattr(algo, n).parameters()]) for n in names}

    before = flat()
    algo.update(_TINY_BATCH)
    assert seen == [4, 2, 1]  # critics (2 weights, 2 biases), actor, log alpha
    for name, after in flat().items():
        torch.testing.assert_close(after, before[name])


def _sac(seed=0, **config):
    return SAC(obs_dim=3, action_low=[-2], action_high=[2], config=SACConfig(hidden=(16,), seed=seed, **config))


def _batch(n=16, seed=0, **extra):
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, 3)), "action": rng.uniform(-2, 2, (n, 1)),
            "reward": rng.standard_normal(n), "next_obs": rng.standard_normal((n, 3)),
            "terminated": (rng.random(n) < 0.2).astype(np.float32), **extra}


def test_learn_returns_metrics_and_one_priority_per_transition():
    learned = _sac().learn(_batch())
    assert set(learned.metrics) == {"critic_loss", "actor_loss", "alpha_loss", "alpha", "entropy", "q_mean",
                                    "target_mean", "td_abs"}
    assert learned.priorities.shape == (16,) and learned.priorities.dtype == np.float64
    assert np.all(learned.priorities > 0)


def test_initial_priorities_run_the_learning_hooks():
    algo = _sac()
    algo.tie_target()
    state = algo.generator.get_state()
    scored = algo.initial_priorities(_batch())
    algo.generator.set_state(state)
    data = algo.preprocess(_batch())
    with torch.no_grad():
        _, td = algo.critic_loss(data, algo.critic_target(data))
    np.testing.assert_allclose(scored, algo.priorities(td), rtol=1e-6)


def test_act_greedy_is_tanh_of_the_mean_and_exploration_is_per_row():
    algo = _tiny()
    obs = np.array([[1.0], [-3.0]])
    greedy = algo.act(obs, explore=False)
    np.testing.assert_allclose(greedy[:, 0], 2 * np.tanh(0.5 * obs[:, 0] + 0.1), rtol=1e-6)
    assert greedy.dtype == np.float32 and greedy.shape == (2, 1)
    algo.noise_scale = np.array([0.0, 1.0])
    explored = algo.act(obs)
    assert explored[0, 0] == pytest.approx(greedy[0, 0]) and explored[1, 0] != pytest.approx(greedy[1, 0])
    algo.noise_scale = 5.0
    assert np.all(np.abs(algo.act(np.full((64, 1), 3.0))) <= 2.0)
    algo.noise_scale = np.array([1.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="noise_scale of shape"):
        algo.act(obs)


def test_state_dict_round_trip_resumes_identically():
    a, b = _sac(seed=0), _sac(seed=1)
    for step in range(3):
        a.update(_batch(seed=step))
    a.noise_scale = np.array([0.1, 0.2])
    # Through bytes, as a checkpoint goes (an in-process optimizer state would be shared).
    saved = io.BytesIO()
    torch.save(a.state_dict(), saved)
    saved.seek(0)
    b.load_state_dict(torch.load(saved, weights_only=True))
    b.generator.set_state(a.generator.get_state())
    assert b.updates == 3 and np.allclose(b.noise_scale, [0.1, 0.2])
    la, lb = a.learn(_batch(seed=9)), b.learn(_batch(seed=9))
    assert la.metrics == lb.metrics
    np.testing.assert_array_equal(la.priorities, lb.priorities)


def test_policy_state_carries_actor_critics_and_temperature():
    a, b = _sac(seed=0), _sac(seed=1)
    a.update(_batch())
    b.load_policy_state(a.policy_state())
    assert {k.split(".")[0] for k in a.policy_state()} == {"actor", "critic", "critic2", "temperature"}
    np.testing.assert_array_equal(a.act(np.ones((2, 3)), explore=False), b.act(np.ones((2, 3)), explore=False))
    assert float(a.alpha) == float(b.alpha)
    with pytest.raises(KeyError, match="target"):
        b.load_policy_state({"target.x": torch.zeros(1)})


@pytest.mark.parametrize("kwargs,match", [({"tau": 0.0}, "tau"), ({"alpha": 0.0}, "alpha"),
                                          ({"batch_size": 0}, "batch_size"), ({"hidden": ()}, "hidden"),
                                          ({"log_std_min": 3.0}, "log_std_min"), ({"gamma": 1.5}, "gamma"),
                                          ({"target_entropy": float("nan")}, "target_entropy"),
                                          ({"noise_scale": -1.0}, "noise_scale"), ({"fast": "x"}, "fast")])
def test_invalid_config_rejected(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SACConfig(**kwargs).validate()


def test_every_flag_of_the_config_has_help():
    import dataclasses

    from algorithms.params import is_flag

    flags = [f for f in dataclasses.fields(SACConfig) if is_flag(f)]
    assert {f.name for f in flags} >= {"alpha", "autotune", "target_entropy"}
    assert all(f.metadata.get("help", "").startswith("SAC: ") for f in flags)


def _reach_return(policy, episodes=64, horizon=10):
    """A point on a line, x' = clip(x + 0.5 a, -2, 2), reward -x'^2, 10 steps from
    x ~ U(-1.5, 1.5): the mean return of ``policy(obs) -> actions in [-1, 1]``."""
    x = np.random.default_rng(1).uniform(-1.5, 1.5, episodes)
    total = np.zeros(episodes)
    for _ in range(horizon):
        x = np.clip(x + 0.5 * policy(x[:, None])[:, 0], -2, 2)
        total -= x ** 2
    return total.mean()


def test_learns_to_reach_a_point_over_many_steps(seed=0):
    # Pendulum-v1 takes ~30 s of updates on a loaded CPU before it beats random; this
    # needs the bootstrapped soft target as much (10-step episodes, gamma 0.9) in ~2 s.
    rng = np.random.default_rng(seed)
    algo = SAC(obs_dim=1, action_low=[-1], action_high=[1],
               config=SACConfig(hidden=(32, 32), gamma=0.9, actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3,
                                seed=seed))
    envs, columns = 16, {"obs": [], "action": [], "reward": [], "next_obs": []}
    x, t = rng.uniform(-1.5, 1.5, envs), np.zeros(envs, dtype=int)
    for step in range(150):
        a = algo.act(x[:, None])[:, 0] if step >= 10 else rng.uniform(-1, 1, envs)
        nx = np.clip(x + 0.5 * a, -2, 2)
        for key, value in zip(columns, (x, a, -nx ** 2, nx)):
            columns[key].append(np.asarray(value, dtype=np.float32))
        t += 1
        x, t = np.where(t >= 10, rng.uniform(-1.5, 1.5, envs), nx), np.where(t >= 10, 0, t)
        replay = {key: np.concatenate(value) for key, value in columns.items()}
        for _ in range(2):
            i = rng.integers(len(replay["obs"]), size=64)
            algo.update({"obs": replay["obs"][i, None], "action": replay["action"][i, None],
                         "reward": replay["reward"][i], "next_obs": replay["next_obs"][i, None],
                         "terminated": np.zeros(64)})
    noise = np.random.default_rng(2)
    random = _reach_return(lambda obs: noise.uniform(-1, 1, obs.shape))
    optimal = _reach_return(lambda obs: np.clip(-2 * obs, -1, 1))
    learned = _reach_return(lambda obs: algo.act(obs, explore=False))
    assert random < -7 and optimal > -0.3
    assert learned > -2.0, (learned, random, optimal)
