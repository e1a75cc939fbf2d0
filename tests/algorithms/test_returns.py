import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.returns import gae, n_step_returns

# Two envs, four steps, gamma = lam = 0.5.
# env 0: no episode end, bootstraps from V(s'_3) = 10 at the rollout's end.
# env 1: terminates at t=1 (no bootstrap), a one-step episode is truncated at
#        t=2 (bootstraps from the true final observation's value 8).
REWARDS = torch.tensor([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0], [4.0, 4.0]])
VALUES = torch.tensor([[0.5, 0.5], [1.0, 1.0], [1.5, 1.5], [2.0, 2.0]])
NEXT_VALUES = torch.tensor([[1.0, 5.0], [1.5, 6.0], [2.0, 8.0], [10.0, 10.0]])
TERMINATED = torch.tensor([[False, False], [False, True], [False, False], [False, False]])
TRUNCATED = torch.tensor([[False, False], [False, False], [False, True], [False, False]])
FLAGS = {"terminated": TERMINATED, "truncated": TRUNCATED}


def test_n_step_returns_by_hand():
    returns = n_step_returns(rewards=REWARDS, next_values=NEXT_VALUES, gamma=0.5, **FLAGS)
    # env 0: R3 = 4 + .5*10 = 9, R2 = 3 + .5*9, R1 = 2 + .5*7.5, R0 = 1 + .5*5.75
    # env 1: R3 = 9, R2 = 3 + .5*8 (truncated: bootstrap), R1 = 2 (terminated), R0 = 1 + .5*2
    expected = torch.tensor([[3.875, 2.0], [5.75, 2.0], [7.5, 7.0], [9.0, 9.0]])
    torch.testing.assert_close(returns, expected)


def test_gae_by_hand():
    adv = gae(rewards=REWARDS, values=VALUES, next_values=NEXT_VALUES, gamma=0.5, lam=0.5, **FLAGS)
    # deltas env 0: 1, 1.75, 2.5, 7; env 1: 3, 1 (terminal), 5.5 (bootstrap 8), 7
    # A_t = delta_t + .25 * A_{t+1}, cut after t=1 and t=2 in env 1.
    expected = torch.tensor([[1.703125, 3.25], [2.8125, 1.0], [4.25, 5.5], [7.0, 7.0]])
    torch.testing.assert_close(adv, expected)


def test_truncation_bootstraps_but_termination_does_not():
    one = torch.ones(1, 1)
    kwargs = {"rewards": one, "next_values": 10 * one, "gamma": 0.9}
    term = n_step_returns(terminated=one.bool(), truncated=~one.bool(), **kwargs)
    trunc = n_step_returns(terminated=~one.bool(), truncated=one.bool(), **kwargs)
    assert term.item() == pytest.approx(1.0)
    assert trunc.item() == pytest.approx(10.0)


def test_lambda_zero_is_the_td_error():
    adv = gae(rewards=REWARDS, values=VALUES, next_values=NEXT_VALUES, gamma=0.5, lam=0.0, **FLAGS)
    not_term = (~TERMINATED).float()
    torch.testing.assert_close(adv, REWARDS + 0.5 * not_term * NEXT_VALUES - VALUES)


@settings(max_examples=30, deadline=None)
@given(
    steps=st.integers(1, 6),
    envs=st.integers(1, 3),
    gamma=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
def test_gae_with_lambda_one_equals_n_step_advantages(steps, envs, gamma, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (steps, envs)
    terminated = torch.rand(shape, generator=g) < 0.2
    truncated = torch.rand(shape, generator=g) < 0.2
    values = torch.randn(shape, generator=g)
    # As in a real rollout: within an episode, s'_t is s_{t+1}.
    next_values = torch.randn(shape, generator=g)
    same_episode = ~(terminated | truncated)[:-1]
    next_values[:-1] = torch.where(same_episode, values[1:], next_values[:-1])
    kwargs = {"rewards": torch.randn(shape, generator=g), "next_values": next_values,
              "terminated": terminated, "truncated": truncated, "gamma": gamma}
    returns = n_step_returns(**kwargs)
    adv = gae(values=values, lam=1.0, **kwargs)
    torch.testing.assert_close(adv + values, returns, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"rewards": torch.ones(4)}, "time-major"),
        ({"next_values": torch.ones(3, 2)}, "next_values has shape"),
        ({"terminated": torch.zeros(4, 2)}, "terminated must be a bool"),
        ({"gamma": 1.5}, "gamma must be in"),
        ({"rewards": [1.0]}, "rewards must be a torch.Tensor"),
    ],
)
def test_bad_inputs_are_named(change, message):
    kwargs = {"rewards": REWARDS, "next_values": NEXT_VALUES, "gamma": 0.5, **FLAGS}
    kwargs.update(change)
    with pytest.raises((ValueError, TypeError), match=message):
        n_step_returns(**kwargs)
    with pytest.raises(ValueError, match="lam must be in"):
        gae(rewards=REWARDS, values=VALUES, next_values=NEXT_VALUES, gamma=0.5, lam=-0.1, **FLAGS)
