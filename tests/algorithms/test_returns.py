import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from algorithms.returns import gae, n_step_returns, q_lambda

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


def test_q_lambda_by_hand():
    returns = q_lambda(rewards=REWARDS, next_values=NEXT_VALUES, gamma=0.5, lam=0.5, **FLAGS)
    # env 0: G3 = 4 + .5*10 = 9, G2 = 3 + .5*(.5*2 + .5*9), G1 = 2 + .5*(.5*1.5 + .5*5.75), ...
    # env 1: G3 = 9, G2 = 3 + .5*8 (truncated), G1 = 2 (terminated), G0 = 1 + .5*(.5*5 + .5*2)
    expected = torch.tensor([[2.203125, 2.75], [3.8125, 2.0], [5.75, 7.0], [9.0, 9.0]])
    torch.testing.assert_close(returns, expected)


def lambda_return_by_mixture(rewards, next_values, terminated, truncated, gamma, lam):
    """The forward view, one return at a time: the lambda-weighted mixture of the
    n-step returns ``G^(n)_t`` (bootstrapped from ``next_values[t + n - 1]``) up to the
    step ``t + k - 1`` where the look-ahead stops, which gets the remaining weight."""
    steps, envs = rewards.shape
    out = torch.zeros(steps, envs, dtype=torch.float64)
    for i in range(envs):
        for t in range(steps):
            k = 1  # look-ahead length: to the episode's end or the rollout's
            while t + k - 1 < steps - 1 and not (terminated[t + k - 1, i] or truncated[t + k - 1, i]):
                k += 1
            total, discounted = 0.0, 0.0
            for n in range(1, k + 1):
                discounted += gamma ** (n - 1) * float(rewards[t + n - 1, i])
                last = t + n - 1
                boot = 0.0 if terminated[last, i] else gamma ** n * float(next_values[last, i])
                weight = lam ** (n - 1) * (1.0 - lam) if n < k else lam ** (k - 1)
                total += weight * (discounted + boot)
            out[t, i] = total
    return out


@settings(max_examples=40, deadline=None)
@given(
    steps=st.integers(1, 7),
    envs=st.integers(1, 3),
    gamma=st.floats(0.0, 1.0),
    lam=st.one_of(st.just(0.0), st.just(1.0), st.floats(0.0, 1.0)),
    seed=st.integers(0, 2**16),
)
def test_q_lambda_matches_the_mixture_of_n_step_returns(steps, envs, gamma, lam, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (steps, envs)
    # Episode ends of both kinds inside the rollout, now and then on the same step.
    terminated = torch.rand(shape, generator=g) < 0.25
    truncated = torch.rand(shape, generator=g) < 0.25
    kwargs = {"rewards": torch.randn(shape, generator=g, dtype=torch.float64),
              "next_values": torch.randn(shape, generator=g, dtype=torch.float64),
              "terminated": terminated, "truncated": truncated, "gamma": gamma}
    expected = lambda_return_by_mixture(lam=lam, **kwargs)
    torch.testing.assert_close(q_lambda(lam=lam, **kwargs), expected)
    if lam == 0.0:  # one-step Q-learning targets
        one_step = kwargs["rewards"] + gamma * (~terminated) * kwargs["next_values"]
        torch.testing.assert_close(q_lambda(lam=0.0, **kwargs), one_step)
    if lam == 1.0:  # Monte-Carlo to the rollout's or episode's end, then bootstrap
        torch.testing.assert_close(q_lambda(lam=1.0, **kwargs), n_step_returns(**kwargs))


def test_q_lambda_leaves_its_inputs_alone_and_names_bad_ones():
    terminated = TERMINATED.clone()
    q_lambda(rewards=REWARDS, next_values=NEXT_VALUES, terminated=terminated, truncated=TRUNCATED,
             gamma=0.5, lam=0.5)
    assert torch.equal(terminated, TERMINATED)
    with pytest.raises(ValueError, match="lam must be in"):
        q_lambda(rewards=REWARDS, next_values=NEXT_VALUES, gamma=0.5, lam=1.5, **FLAGS)
    with pytest.raises(ValueError, match="next_values has shape"):
        q_lambda(rewards=REWARDS, next_values=NEXT_VALUES[:3], gamma=0.5, lam=0.5, **FLAGS)


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
