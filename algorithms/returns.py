"""Advantage and return estimators for actor-critic methods: GAE, n-step returns
and V-trace (off-policy corrected, for IMPALA).

All inputs are time-major ``(T, N)`` tensors: ``T`` steps of ``N`` parallel envs.
Each step ``t`` is a transition ``s_t -> s'_t`` and ``next_values[t] = V(s'_t)``
is the value of its *true* successor, i.e. the final observation when the
episode ended at ``t`` (not the observation a vector env auto-reset to).

Two flags end a step's look-ahead, and they mean different things:

* ``terminated``: ``s'_t`` is terminal, its value is zero: no bootstrap.
* ``truncated`` (time limit, or any other cut that is not part of the MDP):
  ``s'_t`` is not terminal, so the return bootstraps from ``V(s'_t)``; the
  recursion still stops there because step ``t + 1`` belongs to a new episode.

The last step of a rollout is cut the same way as a truncation: it bootstraps
from ``next_values[T - 1]``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch


def gae(
    *,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Generalized advantage estimates (Schulman et al. 2016, arXiv 1506.02438).

    ``A_t = delta_t + gamma * lam * A_{t+1}`` within an episode, with
    ``delta_t = r_t + gamma * (1 - terminated_t) * V(s'_t) - V(s_t)``.
    ``lam = 1`` gives the n-step advantages of A3C, ``lam = 0`` the one-step TD error.
    Returns the advantages; the value targets are ``advantages + values``.
    """
    _check(rewards=rewards, values=values, next_values=next_values,
           terminated=terminated, truncated=truncated)
    _check_discount(gamma=gamma, lam=lam)
    not_terminal = 1.0 - terminated.to(rewards.dtype)
    continues = 1.0 - (terminated | truncated).to(rewards.dtype)
    deltas = rewards + gamma * not_terminal * next_values - values
    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * lam * continues[t] * running
        advantages[t] = running
    return advantages


def q_lambda(
    *,
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    lam: float,
) -> torch.Tensor:
    """Lambda-returns over greedy bootstraps: the Q(lambda) targets of PQN (Gallici
    et al. 2025, "Simplifying Deep Temporal Difference Learning", ICLR, arXiv
    2407.04811), in Peng's form (Peng & Williams 1996, "Incremental Multi-Step
    Q-Learning"): the traces are not cut after exploratory actions.

    Here ``next_values[t] = max_a Q(s'_t, a)`` of the true successor, and within an
    episode ``G_t = r_t + gamma * [(1 - lam) * next_values[t] + lam * G_{t+1}]``.
    Where the look-ahead stops (a truncation, or the rollout's last step)
    ``G_t = r_t + gamma * next_values[t]``; a termination gives ``G_t = r_t``.
    ``lam = 0`` is the one-step Q-learning target, ``lam = 1`` the discounted
    return to the rollout's or episode's end (:func:`n_step_returns`).
    """
    _check(rewards=rewards, next_values=next_values, terminated=terminated, truncated=truncated)
    _check_discount(gamma=gamma, lam=lam)
    not_terminal = 1.0 - terminated.to(rewards.dtype)
    stop = terminated | truncated
    stop[-1] = True  # the rollout's end: nothing to mix in but the bootstrap
    mixed = (1.0 - lam) * next_values  # the one-step part of every bootstrap
    returns = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        # Past an episode's end G_{t+1} belongs to another episode: bootstrap only.
        bootstrap = torch.where(stop[t], next_values[t], mixed[t] + lam * running)
        running = rewards[t] + gamma * not_terminal[t] * bootstrap
        returns[t] = running
    return returns


def n_step_returns(
    *,
    rewards: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
) -> torch.Tensor:
    """Discounted returns to the end of the rollout or episode, bootstrapped from
    the value of the state where the look-ahead stops (A3C's "forward view",
    Mnih et al. 2016, arXiv 1602.01783, Algorithm S3)."""
    _check(rewards=rewards, next_values=next_values, terminated=terminated, truncated=truncated)
    _check_discount(gamma=gamma, lam=1.0)
    not_terminal = 1.0 - terminated.to(rewards.dtype)
    cut = terminated | truncated
    returns = torch.empty_like(rewards)
    running = next_values[-1]
    for t in range(rewards.shape[0] - 1, -1, -1):
        # Where the episode ends at t, look no further than V(s'_t).
        running = torch.where(cut[t], next_values[t], running)
        running = rewards[t] + gamma * not_terminal[t] * running
        returns[t] = running
    return returns


class VTraceReturns(NamedTuple):
    """What :func:`vtrace` returns, all ``(T, N)`` and free of gradients.

    ``vs``: the value targets; ``pg_advantages``: the policy-gradient advantages
    ``min(pg_rho_bar, rho_t) * (r_t + gamma * v_{t+1} - V(x_t))``; ``rhos``: the
    unclipped importance weights ``pi(a_t|x_t) / mu(a_t|x_t)`` (for diagnostics)."""

    vs: torch.Tensor
    pg_advantages: torch.Tensor
    rhos: torch.Tensor


@torch.no_grad()
def vtrace(
    *,
    log_rhos: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float | None = None,
    lam: float = 1.0,
) -> VTraceReturns:
    """V-trace targets (Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL
    with Importance Weighted Actor-Learner Architectures", ICML, arXiv 1802.01561,
    eq. 1 and Remark 1, with the paper's optional lambda in the trace coefficients).

    ``log_rhos = log pi(a_t|x_t) - log mu(a_t|x_t)``: target minus behaviour policy.
    With ``rho_t = min(rho_bar, e^log_rho_t)`` and ``c_t = lam * min(c_bar, e^log_rho_t)``
    the recursion (Remark 1) runs backwards within an episode:

        delta_t = rho_t * (r_t + gamma * (1 - terminated_t) * V(s'_t) - V(x_t))
        v_t - V(x_t) = delta_t + gamma * c_t * (v_{t+1} - V(x_{t+1}))

    and stops where the episode ends (terminated or truncated) or the unroll does,
    exactly as :func:`gae`: with ``rho = c = 1`` (on-policy, not clipped) ``vs`` is
    ``gae(lam) + values``. The advantage of the policy gradient uses ``v_{t+1}``
    where step ``t + 1`` continues the episode, else ``V(s'_t)`` (zero if terminal).
    ``rho_bar``, ``c_bar`` and ``pg_rho_bar`` (default ``rho_bar``) may be ``inf``
    (no clipping). Computed without gradient: targets are constants to the loss.
    """
    _check(rewards=rewards, log_rhos=log_rhos, values=values, next_values=next_values,
           terminated=terminated, truncated=truncated)
    _check_discount(gamma=gamma, lam=lam)
    pg_rho_bar = rho_bar if pg_rho_bar is None else pg_rho_bar
    for name, bar in (("rho_bar", rho_bar), ("c_bar", c_bar), ("pg_rho_bar", pg_rho_bar)):
        if math.isnan(bar) or bar <= 0:
            raise ValueError(f"{name} must be > 0 (inf: no clipping), got {bar}")
    rhos = log_rhos.exp()
    clipped_rhos = rhos.clamp(max=rho_bar)
    cs = lam * rhos.clamp(max=c_bar)
    not_terminal = 1.0 - terminated.to(rewards.dtype)
    continues = ~(terminated | truncated)
    deltas = clipped_rhos * (rewards + gamma * not_terminal * next_values - values)
    vs_minus_v = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * cs[t] * continues[t] * running
        vs_minus_v[t] = running
    vs = vs_minus_v + values
    # The successor's target: v_{t+1} inside the episode, else V(s'_t) (the bootstrap
    # at the unroll's end, or the true final observation's value at a truncation).
    next_vs = next_values.clone()
    next_vs[:-1] = torch.where(continues[:-1], vs[1:], next_values[:-1])
    pg_advantages = rhos.clamp(max=pg_rho_bar) * (rewards + gamma * not_terminal * next_vs - values)
    return VTraceReturns(vs=vs, pg_advantages=pg_advantages, rhos=rhos)


def _check(**tensors: torch.Tensor) -> None:
    shape = None
    for name, tensor in tensors.items():
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != 2:
            raise ValueError(f"{name} must be time-major (T, N), got shape {tuple(tensor.shape)}")
        if shape is None:
            shape = tensor.shape
        elif tensor.shape != shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)}, expected {tuple(shape)}")
        if name in ("terminated", "truncated") and tensor.dtype != torch.bool:
            raise TypeError(f"{name} must be a bool tensor, got {tensor.dtype}")
    if shape is not None and shape[0] == 0:
        raise ValueError("rollout has no steps (T = 0)")


def _check_discount(*, gamma: float, lam: float) -> None:
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
