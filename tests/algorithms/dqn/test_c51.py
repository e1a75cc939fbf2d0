"""C51: the projection against the paper's Algorithm 1 written out, the double-Q
target distribution, cross-entropy loss and KL priorities by hand, the distributional
dueling head, config checks, and a short CartPole run with noisy layers."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from algorithms.dqn import DQN, CategoricalDQN, DQNConfig, categorical_projection
from algorithms.nets import DuelingHead, q_network


def _algorithm_1(atoms, probs, v_min, v_max, n_atoms):
    """Bellemare et al. 2017, Algorithm 1's projection, a loop per transition and atom
    (float64). Where b_j lands on an atom (l = u) the paper's two updates both add 0;
    this reference gives that mass to the atom, as every implementation does."""
    dz = (v_max - v_min) / (n_atoms - 1)
    out = np.zeros((len(atoms), n_atoms))
    for row in range(len(atoms)):
        for j in range(atoms.shape[1]):
            tz = min(max(atoms[row, j], v_min), v_max)
            b = (tz - v_min) / dz
            lower, upper = int(np.floor(b)), int(np.ceil(b))
            if lower == upper:
                out[row, lower] += probs[row, j]
            else:
                out[row, lower] += probs[row, j] * (upper - b)
                out[row, upper] += probs[row, j] * (b - lower)
    return out


def test_projection_matches_algorithm_1_on_random_data():
    rng = np.random.default_rng(0)
    n, n_atoms, v_min, v_max = 64, 51, -10.0, 10.0
    support = np.linspace(v_min, v_max, n_atoms)
    reward = rng.uniform(-15, 15, n)  # some targets fall outside the support
    discount = rng.choice([0.0, 0.5, 0.99, 1.0], n)  # terminal rows put all mass at the reward
    reward[:4] = [-10.0, 10.0, 0.4, 3.2]  # exactly on atoms, and at both ends
    discount[:4] = 0.0
    atoms = reward[:, None] + discount[:, None] * support
    probs = rng.dirichlet(np.ones(n_atoms), n)
    expected = _algorithm_1(atoms, probs, v_min, v_max, n_atoms)
    projected = categorical_projection(torch.from_numpy(atoms), torch.from_numpy(probs), v_min, v_max, n_atoms)
    np.testing.assert_allclose(projected.numpy(), expected, atol=1e-12)  # float64 throughout
    np.testing.assert_allclose(projected.sum(-1).numpy(), 1.0, atol=1e-12)
    single = categorical_projection(torch.from_numpy(atoms).float(), torch.from_numpy(probs).float(),
                                    v_min, v_max, n_atoms)
    np.testing.assert_allclose(single.numpy(), expected, atol=1e-5)  # float32, as learning runs it


def _c51(double_q=True, noisy=False, seed=0, **config):
    torch.manual_seed(seed)
    net = q_network((4,), 3, hidden=(16,), n_atoms=11, noisy=noisy)
    return CategoricalDQN(network=net, num_actions=3, seed=seed, config=DQNConfig(
        distributional=True, n_atoms=11, v_min=-5.0, v_max=5.0, double_q=double_q, noisy=noisy, **config))


def _batch(n=8, seed=0, **extra):
    rng = np.random.default_rng(seed)
    return {"obs": rng.standard_normal((n, 4)).astype(np.float32), "action": rng.integers(3, size=n),
            "reward": rng.uniform(-2, 2, n), "next_obs": rng.standard_normal((n, 4)).astype(np.float32),
            "terminated": (rng.random(n) < 0.25).astype(np.float32), "discount": np.full(n, 0.9 ** 3), **extra}


@pytest.mark.parametrize("double_q", [True, False])
def test_target_is_the_projected_distribution_of_the_chosen_next_action(double_q):
    algo = _c51(double_q=double_q)
    with torch.no_grad():  # a target network apart from the online one
        for p in algo.target_network.parameters():
            p.add_(0.3 * torch.randn_like(p))
    batch = _batch()
    tensors = algo.preprocess(batch)
    with torch.no_grad():
        target = algo.target(tensors).numpy()
        online = algo.network(tensors["next_obs"])
        target_logits = algo.target_network(tensors["next_obs"])
    support = np.linspace(-5, 5, 11)
    chooser = online if double_q else target_logits
    chosen = (F.softmax(chooser, -1).numpy() * support).sum(-1).argmax(-1)
    probs = F.softmax(target_logits, -1).numpy()[np.arange(8), chosen]
    scale = batch["discount"] * (1 - batch["terminated"])
    expected = _algorithm_1(batch["reward"][:, None] + scale[:, None] * support, probs, -5.0, 5.0, 11)
    np.testing.assert_allclose(target, expected, atol=1e-5)


def test_cross_entropy_loss_weights_and_kl_priorities_by_hand():
    algo = _c51()
    batch = _batch(weights=np.linspace(0.5, 1.5, 8))
    tensors = algo.preprocess(batch)
    with torch.no_grad():
        target = algo.target(tensors)
        loss, kl, q_taken = algo.compute_loss(tensors, target)
        log_p = F.log_softmax(algo.network(tensors["obs"]), -1).numpy()[np.arange(8), batch["action"]]
    t = target.numpy().astype(np.float64)
    cross_entropy = -(t * log_p).sum(-1)
    entropy = -np.where(t > 0, t * np.log(np.where(t > 0, t, 1.0)), 0.0).sum(-1)
    assert float(loss) == pytest.approx(np.mean(batch["weights"] * cross_entropy), rel=1e-5)
    np.testing.assert_allclose(kl.numpy(), cross_entropy - entropy, rtol=1e-4, atol=1e-5)
    assert np.all(kl.numpy() > -1e-5)
    np.testing.assert_allclose(q_taken.numpy(), (np.exp(log_p) * np.linspace(-5, 5, 11)).sum(-1), rtol=1e-5)
    learned = algo.learn(batch)
    np.testing.assert_allclose(learned.priorities, np.abs(kl.numpy()) + 1e-6, rtol=1e-4, atol=1e-6)
    algo.tie_target()
    assert algo.initial_priorities(batch).shape == (8,)


def test_q_values_are_the_expected_returns_and_act_on_them():
    algo = _c51()
    obs = _batch()["obs"]
    with torch.no_grad():
        expected = (F.softmax(algo.network(torch.as_tensor(obs)), -1) * torch.linspace(-5, 5, 11)).sum(-1)
    torch.testing.assert_close(algo.q_values(obs), expected)
    np.testing.assert_array_equal(algo.act(obs, explore=False), expected.argmax(-1).numpy())


def test_distributional_dueling_head_centres_the_advantage_per_atom():
    head = DuelingHead(6, 3, n_atoms=5)
    features = torch.randn(2, 6)
    logits = head(features)
    assert logits.shape == (2, 3, 5)
    advantage = head.advantage(features).reshape(2, 3, 5)
    torch.testing.assert_close(logits, head.value(features)[:, None, :] + advantage
                               - advantage.mean(1, keepdim=True))
    assert q_network((4,), 3, hidden=(8,), n_atoms=5, dueling=False)(torch.randn(2, 4)).shape == (2, 3, 5)


def test_config_and_class_must_agree():
    with pytest.raises(ValueError, match="CategoricalDQN"):
        DQN(network=q_network((4,), 2, hidden=(8,)), num_actions=2, config=DQNConfig(distributional=True))
    with pytest.raises(ValueError, match="use DQN"):
        CategoricalDQN(network=q_network((4,), 2, hidden=(8,), n_atoms=51), num_actions=2, config=DQNConfig())
    algo = CategoricalDQN(network=q_network((4,), 2, hidden=(8,)), num_actions=2)
    with pytest.raises(ValueError, match="n_atoms=51"):
        algo.q_values(np.zeros((1, 4), dtype=np.float32))
    for kwargs, match in (({"n_atoms": 1}, "n_atoms"), ({"v_min": 1.0, "v_max": 1.0}, "v_min")):
        with pytest.raises(ValueError, match=match):
            DQNConfig(distributional=True, **kwargs).validate()


def test_state_dict_round_trip():
    a, b = _c51(noisy=True, seed=0), _c51(noisy=True, seed=1)
    a.learn(_batch())
    b.load_state_dict(a.state_dict())
    for x, y in zip(a.network.parameters(), b.network.parameters()):
        torch.testing.assert_close(x, y)


def _greedy_return(algo, episodes=5):
    import gymnasium as gym

    env, returns = gym.make("CartPole-v1"), []
    for episode in range(episodes):
        obs, _ = env.reset(seed=100 + episode)
        done, total = False, 0.0
        while not done:
            obs, reward, terminated, truncated, _ = env.step(int(algo.act(obs[None], explore=False)[0]))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def test_distributional_noisy_dqn_learns_cartpole_without_epsilon():
    import gymnasium as gym

    torch.manual_seed(1)
    config = DQNConfig(distributional=True, noisy=True, v_min=0.0, v_max=100.0, target_update_interval=100)
    algo = CategoricalDQN(network=q_network((4,), 2, hidden=(64, 64), n_atoms=51, noisy=True), num_actions=2,
                          config=config, seed=1)
    assert algo.epsilon == 0.0  # the noisy layers are all the exploration
    before = _greedy_return(algo)
    env, rng, steps = gym.make("CartPole-v1"), np.random.default_rng(1), 2000
    replay = {"obs": np.zeros((steps, 4), np.float32), "action": np.zeros(steps, np.int64),
              "reward": np.zeros(steps, np.float32), "next_obs": np.zeros((steps, 4), np.float32),
              "terminated": np.zeros(steps, np.float32)}
    obs, _ = env.reset(seed=1)
    for t in range(steps):
        action = int(algo.act(obs[None])[0])
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(replay, (obs, action, reward, next_obs, terminated)):
            replay[key][t] = value
        obs = env.reset()[0] if terminated or truncated else next_obs
        if t >= 200 and t % 2 == 0:
            i = rng.integers(t + 1, size=64)
            algo.update({key: value[i] for key, value in replay.items()})
    after = _greedy_return(algo)
    assert before < 20 and after > 50, (before, after)
