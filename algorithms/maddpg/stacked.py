"""MADDPG's stacked fast path: homogeneous agents as one ``(n_agents, B, ...)`` tensor.

The per-agent path in ``maddpg.py`` builds lists of tensors, so its op count grows
with the number of agents. When every agent has the same spaces, there is no
ensemble, every critic sees every agent (the paper's default) and the batch is
one stacked joint batch, the same update is written with a fixed number of
tensor ops: actors run through ``ParallelModules.call_stacked`` (one batched
matmul per layer in ``batched`` mode); critics, whose input is the same joint
observation-action vector for all of them, run through ``call_shared``: their
first layers are one ``(B, D) @ (D, n*h)`` product with no ``(n, B, D)`` copy,
and the actor loss's "my action replaced, the others from the buffer" inputs are
a rank-``A`` correction to that product, so the backward pass reaches each
agent's action through an ``A``-wide product instead of the whole input. The math is that of the per-agent path (tests compare both).

``MADDPG`` takes this path only when no learning hook is overridden, so a
subclass that replaces a hook always gets the per-agent path it can see.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from algorithms.base import as_tensor, no_grad_for
from algorithms.maddpg.gumbel import gumbel_softmax, sample_gumbel

# ``algo`` below is an algorithms.maddpg.MADDPG; not imported, since it imports this
# module (annotations stay strings under ``from __future__ import annotations``).
MADDPG = Any

_HOOKS = ("preprocess", "target_actions", "critic_target", "critic_loss", "actor_loss", "to_action",
          "critic_input", "critic_inputs")


def can_stack(algo: MADDPG, base: type) -> bool:
    """Whether the stacked path computes exactly what the per-agent hooks would:
    ``algo``'s class (a subclass of ``base``, the MADDPG class whose hooks this path
    reimplements) overrides none of them."""
    full = tuple(range(algo.n_agents))
    return (algo.homogeneous and algo.ensemble_size == 1
            and all(seen == full for seen in algo.critic_sees)
            and all(getattr(type(algo), hook) is getattr(base, hook) for hook in _HOOKS))


def is_stacked_batch(batch: Any, n_agents: int) -> bool:
    if not isinstance(batch, Mapping):
        return False
    for field in ("obs", "next_obs", "action", "reward"):
        value = batch.get(field)
        if value is None or isinstance(value, list | tuple) or np.ndim(value) < 2 \
                or np.shape(value)[1] != n_agents:
            return False
    return "terminated" in batch and not isinstance(batch["terminated"], list | tuple)


def _tensors(algo: MADDPG, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    spec, n, dev = algo.agents[0], algo.n_agents, algo.device
    obs = as_tensor(batch["obs"], dev).float()
    b = obs.shape[0]
    action = as_tensor(batch["action"], dev)
    if spec.discrete:
        if not (action.is_floating_point() and action.dim() == 3):  # indices, not one-hot already
            action = F.one_hot(action.long().reshape(b, n), spec.action_dim).float()
    else:
        action = (action.float().reshape(b, n, spec.action_dim) - algo._centers[0]) / algo._halves[0]
    terminated = as_tensor(batch["terminated"], dev).float()
    if terminated.dim() == 1:
        terminated = terminated.unsqueeze(1).expand(b, n)
    return {"obs": obs, "next_obs": as_tensor(batch["next_obs"], dev).float(), "action": action,
            "reward": as_tensor(batch["reward"], dev).float().reshape(b, n),
            "terminated": terminated.reshape(b, n)}


def _to_action(algo: MADDPG, raw: torch.Tensor) -> torch.Tensor:
    if algo.agents[0].discrete:
        return gumbel_softmax(raw, temperature=algo.config.gumbel_temperature, hard=True, noise=True,
                              generator=algo.generator)
    return torch.tanh(raw)


def stacked_update(algo: MADDPG, batch: Mapping[str, Any]) -> dict[str, float]:
    """One MADDPG step for all agents with a fixed number of tensor ops."""
    d = _tensors(algo, batch)
    b = d["obs"].shape[0]
    obs_flat = d["obs"].reshape(b, -1)
    with torch.no_grad():
        next_raw = algo.target_actor_eval.call_stacked(d["next_obs"].transpose(0, 1))  # (n, B, A)
        next_act = _to_action(algo, next_raw).transpose(0, 1).reshape(b, -1)
        x_next = torch.cat([d["next_obs"].reshape(b, -1), next_act], -1)
        next_q = algo.target_critic_eval.call_shared(x_next)
        y = d["reward"].T + algo.config.gamma * (1.0 - d["terminated"].T) * next_q.squeeze(-1)  # (n, B)
    x = torch.cat([obs_flat, d["action"].reshape(b, -1)], -1)
    q = algo.critic_eval.call_shared(x).squeeze(-1)
    critic_losses = (q - y).pow(2).mean(1)
    algo.optimize(algo.critic_opt, critic_losses.sum(), algo.critic_params)

    raw = algo.actor_eval.call_stacked(d["obs"].transpose(0, 1))  # (n, B, A)
    mine = _to_action(algo, raw)  # (n, B, A): critic i sees agent i's action replaced by mu_i(o_i)
    with no_grad_for(algo.critic_trainables):
        if algo.config.actor_objective == "team":  # every critic sees every current action
            x_now = torch.cat([obs_flat, mine.transpose(0, 1).reshape(b, -1)], -1)
            q_actor = algo.critic_eval.call_shared(x_now).squeeze(-1)
        else:
            q_actor = algo.critic_eval.call_shared(x, replace=(obs_flat.shape[1], mine)).squeeze(-1)
    actor_losses = -q_actor.mean(1) + algo.config.actor_reg * raw.pow(2).mean((1, 2))
    algo.optimize(algo.actor_opt, actor_losses.sum(), algo.actor_params)
    algo.soft_update()
    algo.updates += 1
    c, a = critic_losses.detach().cpu().tolist(), actor_losses.detach().cpu().tolist()
    metrics = {"critic_loss": float(np.mean(c)), "actor_loss": float(np.mean(a)),
               "q_target_mean": float(y.mean())}
    metrics |= {f"critic_loss/{i}": v for i, v in enumerate(c)}
    metrics |= {f"actor_loss/{i}": v for i, v in enumerate(a)}
    return metrics


@torch.no_grad()
def stacked_act(algo: MADDPG, obs: torch.Tensor, *, explore: bool) -> np.ndarray:
    """Joint action for stacked obs ``(E, n, obs_dim)``; same outputs as the per-agent path."""
    raw = algo.actor_eval.call_stacked(obs.transpose(0, 1))  # (n, E, A)
    if algo.agents[0].discrete:
        # Batched outputs at large E are transposed views (feature-major compute), and
        # argmax over a strided last axis was ~10x slower than over a contiguous one
        # (2.7 vs 0.24 ms at 8 agents, E=1024): reduce over a contiguous copy.
        raw = raw.contiguous()
        if explore:
            raw += sample_gumbel(raw.shape, device=raw.device, generator=algo.generator)
        return raw.argmax(-1).T.cpu().numpy()
    return np.stack([algo._env_action(i, r, explore) for i, r in enumerate(raw.unbind(0))], axis=1)
