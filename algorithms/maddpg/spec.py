"""What MADDPG needs to know about each agent, its config, and the batch layout.

Batch layout accepted by ``MADDPG.update`` (``split_agents`` turns both forms into
per-agent lists):

- *stacked* (homogeneous agents): ``obs``/``next_obs`` ``(B, n_agents, obs_dim)``;
  ``action`` ``(B, n_agents)`` integer indices for discrete agents or
  ``(B, n_agents, action_dim)`` in the environment's Box for continuous ones;
  ``reward`` ``(B, n_agents)``; ``terminated`` ``(B, n_agents)`` or ``(B,)``.
- *per agent* (any agents): the same fields suffixed ``_<i>`` (``obs_0``,
  ``action_0``, ..., ``terminated_2``) with the agent axis removed, or each field
  given as a list of ``n_agents`` arrays.

Optional: ``policy_index`` ``(B, n_agents)`` (which ensemble sub-policy each agent
was running; required when ``ensemble_size > 1``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np

from algorithms.agent_parallel import MODES, BatchedImpl, EvalMode
from algorithms.params import internal, param

FIELDS = ("obs", "action", "reward", "next_obs", "terminated")


@dataclasses.dataclass(frozen=True)
class AgentSpec:
    """One agent: observation size, and either ``n`` discrete actions or a Box."""

    obs_dim: int
    action_dim: int
    discrete: bool
    low: tuple[float, ...] | None = None
    high: tuple[float, ...] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if self.obs_dim <= 0 or self.action_dim <= 0:
            raise ValueError(f"agent {self.name!r}: obs_dim and action_dim must be positive, "
                             f"got {self.obs_dim}, {self.action_dim}")
        if self.discrete:
            if self.low is not None or self.high is not None:
                raise ValueError(f"agent {self.name!r}: discrete actions take no low/high bounds")
            if self.action_dim < 2:
                raise ValueError(f"agent {self.name!r}: a discrete agent needs >= 2 actions")
            return
        low = (-1.0,) * self.action_dim if self.low is None else tuple(float(x) for x in self.low)
        high = (1.0,) * self.action_dim if self.high is None else tuple(float(x) for x in self.high)
        if len(low) != self.action_dim or len(high) != self.action_dim:
            raise ValueError(f"agent {self.name!r}: low/high must have {self.action_dim} entries")
        if not all(np.isfinite(a) and np.isfinite(b) and a < b for a, b in zip(low, high)):
            raise ValueError(f"agent {self.name!r}: bounds must be finite with low < high, "
                             f"got low={low} high={high}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    @classmethod
    def from_spaces(cls, obs_space: Any, action_space: Any, *, name: str = "") -> AgentSpec:
        """From gymnasium spaces: a flat Box observation, a Discrete or Box action."""
        obs_shape = getattr(obs_space, "shape", None)
        if not obs_shape or len(obs_shape) != 1:
            raise TypeError(f"agent {name!r}: MADDPG needs a flat Box observation, got {obs_space}")
        if hasattr(action_space, "n"):
            return cls(obs_dim=int(obs_shape[0]), action_dim=int(action_space.n), discrete=True, name=name)
        shape = getattr(action_space, "shape", None)
        if not shape or len(shape) != 1:
            raise TypeError(f"agent {name!r}: actions must be Discrete or a flat Box, got {action_space}")
        return cls(obs_dim=int(obs_shape[0]), action_dim=int(shape[0]), discrete=False,
                   low=tuple(np.asarray(action_space.low, float)),
                   high=tuple(np.asarray(action_space.high, float)), name=name)

    def same_shape(self, other: AgentSpec) -> bool:
        return dataclasses.replace(self, name="") == dataclasses.replace(other, name="")


@dataclasses.dataclass
class MADDPGConfig:
    """Hyperparameters; defaults are the paper's (Lowe et al. 2017, appendix).

    The per-field notes are one-seed results on MPE simple_spread (continuous, 30k
    env steps, one update per 8 env steps; greedy team return, these defaults -59.3
    on seed 0). Runs are chaotic (a 1e-7 rounding change moves a seed by +-2), so
    they rank nothing; the 3-seed comparisons, where ``actor_objective="team"`` with
    ``grad_clip_scope="role"`` wins, are in ``experiments/bench/multiagent/maddpg_spread.py``.
    """

    # The MADDPG job's flags (its ``learn`` section), in its --help order.
    lr: float = param(1e-2, help="Adam learning rate of actors and critics")
    # both 3e-3 with 2 updates per 8 steps: -69.2; both 2e-2: -62.5
    actor_lr: float | None = param(None, help="actor learning rate (none: --lr)")
    critic_lr: float | None = param(None, help="critic learning rate (none: --lr)")
    gamma: float = param(0.95, help="discount")
    tau: float = param(0.01, help="Polyak coefficient of the target networks")  # 0.05: -59.9
    batch_size: int = param(1024, help="batch size of each update")
    learning_starts: int = param(25_600, help="env steps before learning starts")
    # The paper's 1 per 100 env steps for its 1.5M-step runs. In a 30k-step budget on
    # simple_spread one update per 8 env steps scored -59.3 (seed 0) and one per 4
    # -63.2, also with lower actor lr (-60.0 at 1e-3, -63.5 at 3e-3): more updates did
    # not help (experiments/bench/multiagent/maddpg_spread.py docstring has the commands).
    updates_per_step: float = param(0.01, help=(
        "updates per env step (all copies together); above 1/--num-envs several per vector step"))
    hidden: tuple[int, ...] = param((64, 64), help="MLP hidden sizes of actors and critics, comma separated")
    # None: -57.9 on seed 0 but -64.6 on seed 1. "network": each agent's actor and critic
    # clipped alone; "role": one norm over all agents' actors (critics), as
    # clip_grad_norm_ over their joint parameters does.
    grad_clip: float | None = param(0.5, help="gradient-norm clip (none: no clipping)")
    grad_clip_scope: Literal["network", "role"] = param("network", help=(
        "network: clip each agent's network alone; role: one norm over all actors (critics)"))
    noise: Literal["gaussian", "ou"] = param("gaussian", help="exploration noise of continuous actions")
    noise_scale: float = param(0.1, help="exploration noise scale (continuous actions)")  # 0.2: -60.7
    # 0 (no penalty on raw outputs): -62.8
    actor_reg: float = param(1e-3, help="penalty on the actors' raw outputs")
    gumbel_temperature: float = param(1.0, help="Gumbel-softmax temperature (discrete actions)")
    ensemble_size: int = param(1, help="sub-policies per agent (policy ensembles, paper section 4.3)")
    # "own" (the paper): actor i ascends Q_i with the other agents' actions from the
    # replay buffer. "team" (cooperative tasks): every critic sees every agent's
    # current action and each actor ascends the sum of all critics, as TorchRL's
    # multi-agent DDPG loss does.
    actor_objective: Literal["own", "team"] = param("own", help=(
        "own: the paper's (actor i ascends Q_i, others' actions from replay); "
        "team: every actor ascends the sum of all critics on current actions"))
    critic_observes: Literal["all", "team"] = param("all", help=(
        "all: every critic sees every agent's observation and action (the paper); team: a critic "
        "sees only its own team's agents (teams: agent names up to the last _<digits>)"))
    mode: EvalMode = param("auto", help=(
        "how the agents' networks run: auto, jit_fork, threads, batched (stacked), loop"))
    # The library's only (the job sets ensemble_buffers from its replay section, seed
    # from its run's).
    ensemble_buffers: Literal["shared", "separate"] = internal("shared")
    batched_impl: BatchedImpl = internal("bmm")
    seed: int | None = internal(None)

    def lrs(self) -> tuple[float, float]:
        """The actors' and the critics' learning rates (``lr`` where unset)."""
        return (self.lr if self.actor_lr is None else self.actor_lr,
                self.lr if self.critic_lr is None else self.critic_lr)

    def validate(self) -> None:
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {self.tau}")
        for name in ("lr", "actor_lr", "critic_lr", "gumbel_temperature", "updates_per_step"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.learning_starts < 0:
            raise ValueError(f"learning_starts must be >= 0, got {self.learning_starts}")
        if self.critic_observes not in ("all", "team"):
            raise ValueError(f"critic_observes must be 'all' or 'team', got {self.critic_observes!r}")
        if not self.hidden or any(h <= 0 for h in self.hidden):
            raise ValueError(f"hidden sizes must be positive, got {self.hidden}")
        if self.grad_clip is not None and self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be > 0 or None, got {self.grad_clip}")
        for name in ("actor_reg", "noise_scale"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.noise not in ("gaussian", "ou"):
            raise ValueError(f"noise must be 'gaussian' or 'ou', got {self.noise!r}")
        if self.ensemble_size < 1:
            raise ValueError(f"ensemble_size must be >= 1, got {self.ensemble_size}")
        if self.ensemble_buffers not in ("shared", "separate"):
            raise ValueError(f"ensemble_buffers must be 'shared' or 'separate', got {self.ensemble_buffers!r}")
        if self.grad_clip_scope not in ("network", "role"):
            raise ValueError(f"grad_clip_scope must be 'network' or 'role', got {self.grad_clip_scope!r}")
        if self.actor_objective not in ("own", "team"):
            raise ValueError(f"actor_objective must be 'own' or 'team', got {self.actor_objective!r}")
        if self.actor_objective == "team" and self.ensemble_size > 1:
            raise ValueError("actor_objective team needs ensemble_size 1 (a team objective over "
                             "sub-policies drawn per episode is not defined)")
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.batched_impl not in ("bmm", "vmap"):
            raise ValueError(f"batched_impl must be 'bmm' or 'vmap', got {self.batched_impl!r}")


def check_critic_sees(critic_sees: Sequence[Sequence[int]] | None, n_agents: int) -> list[tuple[int, ...]]:
    """Validated ``critic_sees`` (default: every critic sees every agent, in order)."""
    if critic_sees is None:
        return [tuple(range(n_agents))] * n_agents
    if len(critic_sees) != n_agents:
        raise ValueError(f"critic_sees needs one entry per agent ({n_agents}), got {len(critic_sees)}")
    out = []
    for i, seen in enumerate(critic_sees):
        seen = tuple(int(j) for j in seen)
        if i not in seen:
            raise ValueError(f"critic_sees[{i}]={seen} must include agent {i} itself "
                             "(its actor learns through its own action's slot)")
        if len(set(seen)) != len(seen) or not all(0 <= j < n_agents for j in seen):
            raise ValueError(f"critic_sees[{i}]={seen} must list distinct agents in [0, {n_agents})")
        out.append(seen)
    return out


def split_agents(batch: Mapping[str, Any], n_agents: int, field: str) -> list[Any]:
    """Per-agent values of ``field`` from either batch layout (see module docstring)."""
    if field in batch:
        value = batch[field]
        if isinstance(value, list | tuple):
            if len(value) != n_agents:
                raise ValueError(f"batch[{field!r}] lists {len(value)} agents, expected {n_agents}")
            return list(value)
        if field == "terminated" and np.ndim(value) == 1:  # one flag for all agents
            return [value] * n_agents
        if np.ndim(value) < 2 or np.shape(value)[1] != n_agents:
            raise ValueError(f"batch[{field!r}] has shape {np.shape(value)}; stacked fields need "
                             f"axis 1 = n_agents = {n_agents}")
        unbind = getattr(value, "unbind", None)  # tensors split without copies
        return list(unbind(1)) if unbind is not None else [value[:, i] for i in range(n_agents)]
    keys = [f"{field}_{i}" for i in range(n_agents)]
    missing = [k for k in keys if k not in batch]
    if missing:
        raise KeyError(f"batch lacks {field!r} (stacked) and per-agent keys {missing}")
    return [batch[k] for k in keys]
