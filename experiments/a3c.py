"""A3C over the push-pull gradient server: ``python -m experiments.a3c``.

Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (ICML,
arXiv:1602.01783). With no launcher environment it runs ``--num-workers`` workers
(default: one per CPU core; on fewer than 4 cores a single worker in this process,
against a local gradient server: see :func:`experiments.roles.a3c_parts.resolve`) and stops when greedy
evaluation over ``--eval-episodes`` episodes averages ``--target-return`` (the
env's reward threshold: 475 on CartPole-v1), or at the time/step budget.
``--serial`` steps every worker in turn in this one process. ``--sync`` is
synchronous A2C: one optimizer step per round of one gradient from every worker
(the server in reduce mode; see :mod:`experiments.roles.a3c` and
:mod:`rlpar.servers.rounds`).

Roles, by rank (:func:`experiments.roles.a3c.role_of`), also under torchrun:

    rank 0      hosts the gradient server (owns the optimizer) and the coordinator
                (progress, evaluation, stop, TensorBoard); it is also worker 0
                unless --no-server-acts
    ranks 1..   workers: own vector env, local parameters, push gradients, pull

Continuous control (Gaussian head): the defaults are CartPole's, and on Pendulum-v1
they do not learn. These flags do (the command in docs/jobs.md)::

    python -m experiments.a3c --env-id Pendulum-v1 --num-workers 1 --gamma 0.9 \\
        --gae-lambda 0.9 --n-steps 8 --num-envs 16 --reward-scale 0.1 \\
        --log-std-init -0.5 --lr 1e-3 --max-seconds 120

Measured for 120 s each, one seed, on a 2-core machine shared with other jobs (load
average about 5; greedy evaluation of 20 episodes every 10K env steps, their median
from 60 s on, and the best): the defaults -1263 (best -882; the training mean stayed
at -1088), these flags at the default lr 2e-3 -321 (best -134, but the last
evaluation fell to -1009), at lr 1e-3 -189 (best -131, last -171). With
``experiments.evaluate`` playing ``policy-best.pt`` by default, the best is what it replays.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import ClassVar

from algorithms.a2c.config import BY_FAMILY, A2CConfig
from experiments.roles.a3c_parts import ServerConfig, describe, fill_defaults  # noqa: F401  (fill_defaults: public)
from experiments.runtime import FamilyEnvConfig, RunConfig, field, flag, section
from experiments.runtime.entry import JobEntry, unset_by_family


@dataclasses.dataclass
class A3CEnvConfig(FamilyEnvConfig):
    """The env each worker steps; ``--num-envs`` by observation family when not
    given (``experiments.roles.a3c_parts.ENV_DEFAULTS_BY_FAMILY``)."""

    num_envs: int | None = field(None, help=(
        "env copies stepped by each worker (none: by observation family, 8 for vectors, 16 for images)"))


LearnConfig = unset_by_family(A2CConfig, BY_FAMILY)  # the job's learn section


@dataclasses.dataclass
class A3CJobConfig:
    """A3C (Mnih et al. 2016) on one machine or, under torchrun, a cluster."""

    # What the checkpoint's state (the server's network and optimizer) is shaped by:
    # --resume may not change these (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = (
        "env_id", "hidden", "shared_network", "state_dependent_std", "optimizer")

    # Learning on CPU unless --device says otherwise: the workers are one process per
    # core, and all of them on one GPU computed 2.7x fewer updates/s than on the cores
    # (an H100 machine, 16 workers, MinAtar Breakout: 130 against 353; docs/gpu.md).
    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=10_000, device="cpu"))
    env: A3CEnvConfig = section(A3CEnvConfig)
    learn: A2CConfig = section(LearnConfig)
    server: ServerConfig = section(ServerConfig)
    num_workers: int = field(0, help=(
        "workers of a local run (0: one per CPU core; 1, in-process, below 4 cores); under torchrun "
        "the world size decides"))
    server_acts: bool = field(True, help="rank 0 is a worker too, besides hosting the gradient server")
    sync: bool = field(False, help=(
        "synchronous A2C: runs python -m experiments.a2c (the synchronous data-parallel program) with "
        "the other flags"))

    def validate(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"{flag('num_workers')} must be >= 0, got {self.num_workers}")
        if self.sync:
            raise ValueError(SYNC_MOVED)


SYNC_MOVED = ("synchronous A2C is the job experiments.a2c (python -m experiments.a2c, config "
              "experiments.a2c.A2CJobConfig): its members all-reduce their gradients, no gradient server; "
              "python -m experiments.a3c --sync runs it with the other flags")

ENTRY = JobEntry(title="A3C", config_cls=A3CJobConfig, roles="experiments.roles.a3c", describe=describe)
job, run, format_summary = ENTRY.job, ENTRY.run, ENTRY.format_summary


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m experiments.a3c``; with ``--sync``, ``python -m experiments.a2c`` with
    the other flags (synchronous A2C is a job of the synchronous program)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--sync" in args:
        from experiments import a2c

        print("--sync: running python -m experiments.a2c (synchronous A2C, the synchronous data-parallel "
              "program)", file=sys.stderr)
        return a2c.main([a for a in args if a != "--sync"])
    return ENTRY.main(args)

if __name__ == "__main__":
    sys.exit(main())
