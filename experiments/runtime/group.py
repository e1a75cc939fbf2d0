"""The learner group of a synchronous data-parallel job (PPO/DD-PPO, PQN), as a config
section: how many members, and DD-PPO's preemption of stragglers."""

from __future__ import annotations

import dataclasses
import math

from experiments.runtime.cli import field, flag

# Below this many cores a local run has one member, in this process (see default_members).
MIN_CORES_FOR_RANKS = 4


def default_members(device: str = "cpu") -> int:
    """Members of a local run when ``--num-workers 0``.

    Learning on CUDA (``--device`` resolving to a GPU): one member per GPU (``cuda``,
    or ``auto`` on a machine with GPUs) or one (``cuda:N``), each its own GPU under
    NCCL, as DistributedDataParallel lays members out. More members than GPUs share one
    through gloo, which copies every minibatch's gradient to the host and back: PQN on
    MinAtar Breakout with 16 members sharing one H200 made 0.41 updates/s, against 0.74
    for 16 members on its 16 CPU cores and 4.0 for one member on the GPU (docs/gpu.md, "What
    the GPU buys").

    On CPU: one per CPU core, except below 4 cores, where it is 1, in this process.
    Every member steps its own envs and runs its own forward and backward passes, so
    two members on 2 shared cores halve each other's CPU and add an all-reduce per
    minibatch, spawning and RPC start-up. Measured on CartPole-v1 (PPO, 10 seeds, 2
    shared cores; docs/benchmarks.md, "Learner groups and data-parallel jobs"): one member solved in a
    median 14.3K env steps and 8.3 s, two in 33.8K and 16.3 s (5.3 s of it starting
    the world): about as many updates either way, so twice the env steps, and no
    faster updates."""
    from experiments.runtime.config import resolve_device, usable_cores

    resolved = resolve_device(device)
    if resolved.type == "cuda":
        import torch

        return 1 if resolved.index is not None else max(1, torch.cuda.device_count())
    cores = usable_cores()
    return 1 if cores < MIN_CORES_FOR_RANKS else cores


@dataclasses.dataclass
class GroupConfig:
    """Members of the learner group and DD-PPO's preemption (Wijmans et al. 2020): once
    ``--preempt-fraction`` of the members have finished their rollout, the others stop
    theirs early, never before ``--preempt-min`` of it, and every member learns from
    what it has."""

    num_workers: int = field(0, help=(
        "members of a local run, each stepping its own envs (0: one per GPU when learning on CUDA; "
        "else one per CPU core, 1 in this process below 4 cores); under torchrun the world size decides"))
    preempt_fraction: float = field(0.0, help=(
        "DD-PPO: once this fraction of the members finished their rollout, the others cut "
        "theirs short (0: off; the paper: 0.6)"))
    preempt_min: float = field(0.25, help=(
        "DD-PPO: a preempted rollout keeps at least this fraction of its steps (the paper's 0.25)"))

    def validate(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"{flag('num_workers')} must be >= 0, got {self.num_workers}")
        if not 0.0 <= self.preempt_fraction < 1.0:
            raise ValueError(f"{flag('preempt_fraction')} must be in [0, 1) (0: off), "
                             f"got {self.preempt_fraction}")
        if not 0.0 < self.preempt_min <= 1.0:
            raise ValueError(f"{flag('preempt_min')} must be in (0, 1], got {self.preempt_min}")

    def min_steps(self, n_steps: int) -> int:
        """Steps a preempted rollout of ``n_steps`` keeps at least."""
        return max(1, min(n_steps, math.ceil(self.preempt_min * n_steps)))

    def threshold(self, members: int) -> int | None:
        """Finished members that end the others' rollouts (None: no preemption; also
        when it would take every member, e.g. 0.9 of 2). At least one member."""
        if self.preempt_fraction <= 0 or members < 2:
            return None
        needed = max(1, math.ceil(self.preempt_fraction * members - 1e-9))
        return needed if needed < members else None
