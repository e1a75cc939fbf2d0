"""V-trace (algorithms.returns.vtrace) against the paper's definition, written as
plain Python loops over time (Espeholt et al. 2018, eq. 1: the sum form, not the
recursion the implementation runs)."""

import math

import pytest
import torch

from algorithms.returns import gae, vtrace

TOL = {"rtol": 1e-9, "atol": 1e-9}  # float64 data: only summation order differs
SHAPES = [(1, 1), (2, 3), (5, 1), (7, 4), (16, 2)]


def random_unroll(steps, envs, seed, *, end_p=0.2, spread=1.0):
    """Float64 data shaped like a real unroll: within an episode V(s'_t) = V(x_{t+1})."""
    g = torch.Generator().manual_seed(seed)
    shape = (steps, envs)
    terminated = torch.rand(shape, generator=g, dtype=torch.float64) < end_p
    truncated = torch.rand(shape, generator=g, dtype=torch.float64) < end_p
    values = torch.randn(shape, generator=g, dtype=torch.float64)
    next_values = torch.randn(shape, generator=g, dtype=torch.float64)
    continues = ~(terminated | truncated)
    next_values[:-1] = torch.where(continues[:-1], values[1:], next_values[:-1])
    return {"log_rhos": spread * torch.randn(shape, generator=g, dtype=torch.float64),
            "rewards": torch.randn(shape, generator=g, dtype=torch.float64),
            "values": values, "next_values": next_values,
            "terminated": terminated, "truncated": truncated}


def episode_end(data, s, n):
    """The last step of the look-ahead from step s in env n (inclusive)."""
    steps = data["rewards"].shape[0]
    t = s
    while t < steps - 1 and not (data["terminated"][t, n] or data["truncated"][t, n]):
        t += 1
    return t


def reference_vtrace(data, *, gamma, rho_bar, c_bar, pg_rho_bar, lam=1.0):
    steps, envs = data["rewards"].shape
    rho = data["log_rhos"].exp().tolist()
    r, v, nv = data["rewards"].tolist(), data["values"].tolist(), data["next_values"].tolist()
    term = data["terminated"].tolist()
    vs = [[0.0] * envs for _ in range(steps)]
    adv = [[0.0] * envs for _ in range(steps)]
    for n in range(envs):
        for s in range(steps):
            end = episode_end(data, s, n)
            total, weight = v[s][n], 1.0  # weight = gamma^(t-s) * prod_{i<t} c_i
            for t in range(s, end + 1):
                bootstrap = 0.0 if term[t][n] else nv[t][n]
                delta = min(rho_bar, rho[t][n]) * (r[t][n] + gamma * bootstrap - v[t][n])
                total += weight * delta
                weight *= gamma * lam * min(c_bar, rho[t][n])
            vs[s][n] = total
    for n in range(envs):
        for s in range(steps):
            continues = s < steps - 1 and not (term[s][n] or data["truncated"][s, n])
            successor = vs[s + 1][n] if continues else (0.0 if term[s][n] else nv[s][n])
            adv[s][n] = min(pg_rho_bar, rho[s][n]) * (r[s][n] + gamma * successor - v[s][n])
    return torch.tensor(vs, dtype=torch.float64), torch.tensor(adv, dtype=torch.float64)


def reference_n_step(data, *, gamma):
    """Bootstrapped returns to the episode's or the unroll's end."""
    steps, envs = data["rewards"].shape
    out = torch.zeros(steps, envs, dtype=torch.float64)
    for n in range(envs):
        for s in range(steps):
            end = episode_end(data, s, n)
            ret = sum(gamma ** (t - s) * data["rewards"][t, n].item() for t in range(s, end + 1))
            if not data["terminated"][end, n]:
                ret += gamma ** (end - s + 1) * data["next_values"][end, n].item()
            out[s, n] = ret
    return out


@pytest.mark.parametrize("steps, envs", SHAPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("rho_bar, c_bar, pg_rho_bar, lam", [
    (1.0, 1.0, 1.0, 1.0),  # the paper's defaults
    (2.0, 0.5, 1.5, 1.0),  # clipped differently for each use
    (1.0, 1.0, 1.0, 0.7),  # lambda < 1
])
def test_vtrace_matches_the_papers_definition(steps, envs, seed, rho_bar, c_bar, pg_rho_bar, lam):
    data = random_unroll(steps, envs, seed)
    out = vtrace(**data, gamma=0.9, rho_bar=rho_bar, c_bar=c_bar, pg_rho_bar=pg_rho_bar, lam=lam)
    vs, adv = reference_vtrace(data, gamma=0.9, rho_bar=rho_bar, c_bar=c_bar,
                               pg_rho_bar=pg_rho_bar, lam=lam)
    torch.testing.assert_close(out.vs, vs, **TOL)
    torch.testing.assert_close(out.pg_advantages, adv, **TOL)
    torch.testing.assert_close(out.rhos, data["log_rhos"].exp(), **TOL)


@pytest.mark.parametrize("steps, envs", SHAPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_on_policy_vtrace_is_the_n_step_return(steps, envs, seed):
    data = random_unroll(steps, envs, seed)
    data["log_rhos"] = torch.zeros_like(data["log_rhos"])  # behaviour == target: rho = c = 1
    out = vtrace(**data, gamma=0.95)
    returns = reference_n_step(data, gamma=0.95)
    torch.testing.assert_close(out.vs, returns, **TOL)
    flags = {k: data[k] for k in ("rewards", "values", "next_values", "terminated", "truncated")}
    torch.testing.assert_close(out.vs, gae(**flags, gamma=0.95, lam=1.0) + data["values"], **TOL)
    # On-policy with lambda: GAE(lambda)'s targets.
    lam_out = vtrace(**data, gamma=0.95, lam=0.6)
    torch.testing.assert_close(lam_out.vs, gae(**flags, gamma=0.95, lam=0.6) + data["values"], **TOL)
    # The policy-gradient advantage is the one-step TD error towards the successor's target.
    torch.testing.assert_close(out.pg_advantages, returns - data["values"], **TOL)


@pytest.mark.parametrize("seed", [0, 1])
def test_no_clipping_gives_the_importance_weighted_sum(seed):
    data = random_unroll(6, 3, seed, spread=0.5)
    out = vtrace(**data, gamma=0.9, rho_bar=math.inf, c_bar=math.inf)
    vs, adv = reference_vtrace(data, gamma=0.9, rho_bar=math.inf, c_bar=math.inf, pg_rho_bar=math.inf)
    torch.testing.assert_close(out.vs, vs, **TOL)
    torch.testing.assert_close(out.pg_advantages, adv, **TOL)
    big = vtrace(**data, gamma=0.9, rho_bar=1e9, c_bar=1e9)  # a large bar is no bar
    torch.testing.assert_close(big.vs, vs, **TOL)


def test_clipping_is_active_and_changes_the_targets():
    data = random_unroll(8, 4, 3, spread=2.0)
    rhos = data["log_rhos"].exp()
    assert (rhos > 1).float().mean() > 0.2  # many weights above the bar
    clipped = vtrace(**data, gamma=0.9)
    free = vtrace(**data, gamma=0.9, rho_bar=math.inf, c_bar=math.inf)
    assert not torch.allclose(clipped.vs, free.vs)
    # With rho capped at 1, the advantage never exceeds the TD error's size.
    vs, adv = reference_vtrace(data, gamma=0.9, rho_bar=1.0, c_bar=1.0, pg_rho_bar=1.0)
    torch.testing.assert_close(clipped.vs, vs, **TOL)
    torch.testing.assert_close(clipped.pg_advantages, adv, **TOL)


def test_episode_ends_cut_the_traces_by_hand():
    # One env, three steps, gamma 0.5, rho = 2 everywhere (clipped to 1 by default).
    # Step 0 is truncated (bootstraps from V(final) = 8), step 1 terminates.
    data = {"log_rhos": torch.full((3, 1), math.log(2.0)), "rewards": torch.ones(3, 1),
            "values": torch.tensor([[1.0], [2.0], [3.0]]),
            "next_values": torch.tensor([[8.0], [5.0], [4.0]]),
            "terminated": torch.tensor([[False], [True], [False]]),
            "truncated": torch.tensor([[True], [False], [False]])}
    out = vtrace(**data, gamma=0.5)
    torch.testing.assert_close(out.vs, torch.tensor([[5.0], [1.0], [3.0]]))
    torch.testing.assert_close(out.pg_advantages, torch.tensor([[4.0], [-1.0], [0.0]]))
    wide = vtrace(**data, gamma=0.5, pg_rho_bar=2.0)
    torch.testing.assert_close(wide.pg_advantages, torch.tensor([[8.0], [-2.0], [0.0]]))


def test_targets_carry_no_gradient():
    data = random_unroll(4, 2, 0)
    data["values"].requires_grad_(True)
    out = vtrace(**data, gamma=0.9)
    assert not out.vs.requires_grad and not out.pg_advantages.requires_grad


@pytest.mark.parametrize("change, message", [
    ({"rho_bar": 0.0}, "rho_bar must be > 0"),
    ({"c_bar": -1.0}, "c_bar must be > 0"),
    ({"pg_rho_bar": math.nan}, "pg_rho_bar must be > 0"),
    ({"lam": 1.5}, "lam must be in"),
    ({"gamma": -0.1}, "gamma must be in"),
    ({"log_rhos": torch.zeros(4, 3)}, "log_rhos has shape"),
    ({"terminated": torch.zeros(4, 2)}, "terminated must be a bool"),
])
def test_bad_inputs_are_named(change, message):
    kwargs = {**random_unroll(4, 2, 0), "gamma": 0.9, **change}
    with pytest.raises((ValueError, TypeError), match=message):
        vtrace(**kwargs)
