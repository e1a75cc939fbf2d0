"""Value rescaling and R2D2's n-step double-Q targets against hand loops."""

import math

import numpy as np
import pytest
import torch

from algorithms.r2d2 import inverse_value_rescale, n_step_targets, value_rescale

EPS = 1e-3


def h(x):
    return math.copysign(math.sqrt(abs(x) + 1) - 1, x) + EPS * x


def h_inv(x):
    return math.copysign(((math.sqrt(1 + 4 * EPS * (abs(x) + 1 + EPS)) - 1) / (2 * EPS)) ** 2 - 1, x)


def test_the_rescaling_and_its_inverse_undo_each_other():
    x = torch.cat([torch.linspace(-1e4, 1e4, 2001, dtype=torch.float64), torch.tensor([0.0, 1e-6, -1e-6])])
    np.testing.assert_allclose(value_rescale(inverse_value_rescale(x, EPS), EPS).numpy(), x.numpy(), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(inverse_value_rescale(value_rescale(x, EPS), EPS).numpy(), x.numpy(), rtol=1e-10, atol=1e-9)
    for v in (-300.0, -1.0, 0.0, 0.5, 3.0, 1e3):
        assert value_rescale(torch.tensor(v, dtype=torch.float64), EPS).item() == pytest.approx(h(v), rel=1e-12)
    assert value_rescale(torch.tensor(3.0, dtype=torch.float64), EPS).item() == pytest.approx(1 + 3 * EPS)


@pytest.mark.parametrize("n", [1, 3])
def test_n_step_targets_match_a_hand_loop(n):
    rng = np.random.default_rng(n)
    batch, steps = 6, 5
    length = steps + n
    reward = rng.normal(size=(batch, length)) * 3
    terminated = rng.random((batch, length)) < 0.15
    valid = rng.integers(0, length + 1, size=batch)
    valid[0], valid[1] = length, 0  # one sequence without an end, one all padding
    mask = np.arange(length)[None, :] < valid[:, None]
    boot = rng.normal(size=(batch, length))
    gamma = 0.9
    y, trained = n_step_targets(reward=torch.tensor(reward), terminated=torch.tensor(terminated),
                                mask=torch.tensor(mask), bootstrap=torch.tensor(boot), n=n, gamma=gamma,
                                steps=steps, eps=EPS)
    for i in range(batch):
        last = valid[i] - 1
        for t in range(steps):
            assert bool(trained[i, t]) == (t < last)
            if t >= last:
                continue
            total, discount = 0.0, 1.0
            for k in range(min(n, last - t)):
                total += discount * reward[i, t + k]
                discount *= gamma * (0.0 if terminated[i, t + k] else 1.0)
            bootstrap_at = t + min(n, last - t)
            expected = h(total + discount * h_inv(boot[i, bootstrap_at]))
            assert y[i, t].item() == pytest.approx(expected, rel=1e-9, abs=1e-12), (i, t)
    assert trained[0].all() and not trained[1].any()


def test_a_sequence_of_the_wrong_length_is_refused():
    x = torch.zeros(2, 6)
    with pytest.raises(ValueError, match="expected sequences of steps \\+ n = 7 steps"):
        n_step_targets(reward=x, terminated=x.bool(), mask=x.bool(), bootstrap=x, n=2, gamma=0.9, steps=5, eps=EPS)
