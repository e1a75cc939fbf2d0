"""Noisy nets: factorized noise's structure and statistics, deterministic eval, and
DQN's use of them (fresh noise per act and update, means when greedy)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from algorithms.dqn import DQN, DQNConfig
from algorithms.nets import q_network
from algorithms.noisy import NoisyLinear, noise_off, noisy_layers


def test_initialization_follows_the_paper():
    layer = NoisyLinear(16, 4)
    assert torch.all(layer.weight_mu.abs() <= 1 / 4) and torch.all(layer.bias_mu.abs() <= 1 / 4)
    torch.testing.assert_close(layer.weight_sigma, torch.full((4, 16), 0.5 / 4))
    torch.testing.assert_close(layer.bias_sigma, torch.full((4,), 0.5 / 4))
    assert set(layer.state_dict()) == {"weight_mu", "weight_sigma", "bias_mu", "bias_sigma"}  # no noise


def test_factorized_noise_is_an_outer_product_of_signed_square_roots():
    layer = NoisyLinear(5, 3)
    generator = torch.Generator().manual_seed(0)
    layer.reset_noise(generator)
    raw = torch.randn(8, generator=torch.Generator().manual_seed(0))
    f = raw.sign() * raw.abs().sqrt()
    torch.testing.assert_close(layer.eps_in, f[:5])
    torch.testing.assert_close(layer.eps_out, f[5:])
    torch.testing.assert_close(layer.weight_noise(), torch.outer(f[5:], f[:5]))
    x = torch.randn(2, 5)
    expected = F.linear(x, layer.weight_mu + layer.weight_sigma * torch.outer(f[5:], f[:5]),
                        layer.bias_mu + layer.bias_sigma * f[5:])
    torch.testing.assert_close(layer(x), expected)


def test_noise_statistics():
    # f(eps) = sign(eps) sqrt|eps|: mean 0, variance E|eps| = sqrt(2 / pi); a weight's
    # noise f(a) f(b) has mean 0 and variance E|a| E|b| = 2 / pi.
    layer, generator = NoisyLinear(50, 40), torch.Generator().manual_seed(1)
    ins, weights = [], []
    for _ in range(200):
        layer.reset_noise(generator)
        ins.append(layer.eps_in.clone())
        weights.append(layer.weight_noise().reshape(-1).clone())
    ins, weights = torch.cat(ins), torch.cat(weights)
    assert abs(float(ins.mean())) < 4 * math.sqrt(math.sqrt(2 / math.pi) / len(ins))
    assert float(ins.var()) == pytest.approx(math.sqrt(2 / math.pi), rel=0.05)
    assert abs(float(weights.mean())) < 0.02
    assert float(weights.var()) == pytest.approx(2 / math.pi, rel=0.05)


def test_eval_mode_and_noise_off_use_the_means():
    layer = NoisyLinear(3, 2)
    layer.reset_noise()
    x = torch.randn(4, 3)
    noisy = layer(x)
    torch.testing.assert_close(layer(x), noisy)  # same noise until reset
    mean = F.linear(x, layer.weight_mu, layer.bias_mu)
    assert not torch.allclose(noisy, mean)
    with noise_off([layer]):
        torch.testing.assert_close(layer(x), mean)
    assert layer.noisy
    layer.eval()
    torch.testing.assert_close(layer(x), mean)
    layer.reset_noise()
    torch.testing.assert_close(layer(x), mean)


def _noisy_dqn(**config):
    torch.manual_seed(0)
    net = q_network((4,), 3, hidden=(16,), noisy=True)
    return DQN(network=net, num_actions=3, config=DQNConfig(noisy=True, **config), seed=0)


def test_dqn_draws_fresh_noise_each_act_and_update_and_acts_on_means_when_greedy():
    algo = _noisy_dqn()
    obs = torch.randn(8, 4).numpy()
    assert len(algo.noisy_layers) == 2  # the dueling head's value and advantage layers
    q1, q2 = algo.q_values(obs), algo.q_values(obs)
    assert not torch.allclose(q1, q2)
    greedy = [algo.act(obs, explore=False) for _ in range(3)]
    with noise_off(algo.noisy_layers):
        expected = algo.online(torch.as_tensor(obs)).argmax(-1).numpy()
    for actions in greedy:
        np.testing.assert_array_equal(actions, expected)
    noise = algo.noisy_layers[0].eps_in.clone()
    target_noise = noisy_layers(algo.target_network)[0].eps_in.clone()
    rng = np.random.default_rng(0)
    algo.update({"obs": rng.standard_normal((8, 4)), "action": rng.integers(3, size=8),
                 "reward": rng.standard_normal(8), "next_obs": rng.standard_normal((8, 4)),
                 "terminated": np.zeros(8)})
    assert not torch.equal(algo.noisy_layers[0].eps_in, noise)
    assert not torch.equal(noisy_layers(algo.target_network)[0].eps_in, target_noise)


def test_noisy_flag_and_network_must_agree():
    with pytest.raises(ValueError, match="NoisyLinear"):
        DQN(network=q_network((4,), 2, hidden=(8,)), num_actions=2, config=DQNConfig(noisy=True))
    with pytest.raises(ValueError, match="noisy=False"):
        DQN(network=q_network((4,), 2, hidden=(8,), noisy=True), num_actions=2, config=DQNConfig())
    with pytest.raises(ValueError, match="noisy_sigma0"):
        DQNConfig(noisy_sigma0=0.0).validate()
