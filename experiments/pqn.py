"""PQN, synchronous data-parallel: ``python -m experiments.pqn``.

Gallici et al. 2025, "Simplifying Deep Temporal Difference Learning" (ICLR,
arXiv:2407.04811): online Q(lambda) from many parallel envs, with no replay buffer and
no target network, held stable by LayerNorm. Every member (a rank) steps its own
``--num-envs`` envs epsilon-greedily for ``--n-steps`` steps and runs ``--epochs`` of
``--minibatches`` minibatches on that rollout, each minibatch's gradient averaged over
the members (the learner group), so their parameters are identical after every step.
Epsilon (``--epsilon-start`` to ``--epsilon-end`` over ``--epsilon-decay-steps``) and
the learning rate's decay count the env steps of all members together. DD-PPO's
preemption (``--preempt-fraction``) applies here too. Members, evaluation, stop,
checkpoints: as ``experiments.ppo``.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from experiments.roles.sync_member import SyncProgram
from experiments.runtime import FamilyEnvConfig, Parts, RunConfig, field, flag, layer_sizes, section
from experiments.runtime.envs import check_env, env_factory, fill_by_family
from experiments.runtime.group import GroupConfig
from experiments.runtime.job import main_for, run_job

# By observation family, for the fields left unset: the authors' settings (purejaxql),
# measured in one process (experiments/bench/learning/pqn_single.py, 2 shared cores):
# - vector (pqn_cartpole): 32 envs x 64 steps, 4 epochs x 16 minibatches, RAdam 1e-4
#   decaying over 500K env steps, epsilon 1 -> 0.2 over 100K, rewards x 0.1, lambda
#   0.95, 256-256 MLP: CartPole-v1 solved at 61-82K env steps in 6.5-9 s (seeds 0-3);
# - small_image (pqn_minatar): 128 envs x 32 steps, 2 epochs x 32 minibatches, RAdam
#   5e-4, lambda 0.65, epsilon 1 -> 0.05 over 1M: Breakout training return 8.8 at 1.0M
#   env steps, 20 at 1.5M, about 30 from 3M, 11.2K env steps/s;
# - frames: the MinAtar settings at lr 2.5e-4 (not measured here).
DEFAULTS_BY_FAMILY: dict[str, dict[str, Any]] = {
    "vector": {"n_steps": 64, "lr": 1e-4, "lr_decay_steps": 500_000, "epochs": 4, "minibatches": 16,
               "lam": 0.95, "reward_scale": 0.1, "epsilon_end": 0.2, "epsilon_decay_steps": 100_000,
               "hidden": "256,256"},
    "small_image": {"n_steps": 32, "lr": 5e-4, "lr_decay_steps": 0, "epochs": 2, "minibatches": 32,
                    "lam": 0.65, "reward_scale": 1.0, "epsilon_end": 0.05, "epsilon_decay_steps": 1_000_000,
                    "hidden": "128,128"},
    "frames": {"n_steps": 32, "lr": 2.5e-4, "lr_decay_steps": 0, "epochs": 2, "minibatches": 32,
               "lam": 0.65, "reward_scale": 1.0, "epsilon_end": 0.05, "epsilon_decay_steps": 1_000_000,
               "hidden": "128,128"},
}
DEFAULTS_BY_FAMILY["other"] = DEFAULTS_BY_FAMILY["vector"]
ENV_DEFAULTS_BY_FAMILY = {"vector": {"num_envs": 32}, "small_image": {"num_envs": 128},
                          "frames": {"num_envs": 128}, "other": {"num_envs": 32}}


def _by_family(what: str) -> str:
    return f"none: by observation family, {what}"


@dataclasses.dataclass
class PQNEnvConfig(FamilyEnvConfig):
    """The env each member steps; ``--num-envs`` by observation family when not given."""

    num_envs: int | None = field(None, help=f"env copies per member ({_by_family('32 for vectors, 128 for images')})")


@dataclasses.dataclass
class LearnConfig:
    """PQN's hyperparameters (those left unset: ``DEFAULTS_BY_FAMILY``)."""

    n_steps: int | None = field(None, help=f"steps per env in a member's rollout ({_by_family('64; 32 for images')})")
    lr: float | None = field(None, help=f"learning rate ({_by_family('1e-4; 5e-4 for MinAtar')})")
    lr_decay_steps: int | None = field(None, help=(
        f"decay the lr linearly to 0 over this many env steps of all members (0: constant; {_by_family('500K; 0')})"))
    optimizer: Literal["radam", "adam"] = field("radam", help="optimizer")
    epochs: int | None = field(None, help=f"passes over each rollout ({_by_family('4; 2 for images')})")
    minibatches: int | None = field(None, help=f"minibatches per pass ({_by_family('16; 32 for images')})")
    gamma: float = field(0.99, help="discount")
    lam: float | None = field(None, help=f"Q(lambda)'s lambda ({_by_family('0.95; 0.65 for images')})")
    reward_scale: float | None = field(None, help=f"multiply rewards by this ({_by_family('0.1; 1 for images')})")
    max_grad_norm: float | None = field(10.0, help="clip the averaged gradient to this norm ('none': no clipping)")
    epsilon_start: float = field(1.0, help="exploration rate at the start")
    epsilon_end: float | None = field(None, help=f"exploration rate after the decay ({_by_family('0.2; 0.05')})")
    epsilon_decay_steps: int | None = field(None, help=(
        f"env steps of all members over which epsilon decays linearly ({_by_family('100K; 1M for images')})"))
    layer_norm: bool = field(True, help="LayerNorm in the default network (what keeps PQN stable)")
    hidden: str | None = field(None, help=f"MLP hidden sizes for vector observations ({_by_family('256,256')})")

    def validate(self) -> None:
        if self.hidden is not None:
            layer_sizes(self.hidden, name="hidden")
        for name in ("n_steps", "epochs", "minibatches"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{flag(name)} must be >= 1, got {getattr(self, name)}")
        probe = dataclasses.replace(self, **{k: v for k, v in DEFAULTS_BY_FAMILY["vector"].items()
                                             if getattr(self, k) is None})
        try:  # the algorithm's own checks, named by flag
            probe.pqn_config()
        except ValueError as exc:
            raise ValueError(f"{flag(str(exc).split()[0])}: {exc}") from None

    def pqn_config(self):
        from algorithms.pqn import PQNConfig

        unset = [flag(k) for k in DEFAULTS_BY_FAMILY["vector"] if getattr(self, k) is None]
        if unset:
            raise ValueError(f"{', '.join(unset)} unset: the job fills them by the env's observations (env_defaults)")
        config = PQNConfig(gamma=self.gamma, lam=self.lam, lr=self.lr, lr_decay_steps=self.lr_decay_steps,
                           optimizer=self.optimizer, max_grad_norm=self.max_grad_norm, epochs=self.epochs,
                           minibatches=self.minibatches, reward_scale=self.reward_scale,
                           epsilon_start=self.epsilon_start, epsilon_end=self.epsilon_end,
                           epsilon_decay_steps=self.epsilon_decay_steps, layer_norm=self.layer_norm,
                           hidden=layer_sizes(self.hidden, name="hidden"))
        config.validate()
        return config


@dataclasses.dataclass
class PQNJobConfig:
    """PQN (Gallici et al. 2025) on one machine or, under torchrun, a cluster."""

    fixed_on_resume: ClassVar[tuple[str, ...]] = ("env_id", "hidden", "layer_norm", "optimizer")

    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=10_000))
    env: PQNEnvConfig = section(PQNEnvConfig)
    group: GroupConfig = section(GroupConfig)
    learn: LearnConfig = section(LearnConfig)


# ------------------------------------------------------------ the job's hooks


def builder(config: PQNJobConfig, parts: Parts, spec: Any):
    from algorithms.pqn import PQNBuilder

    return PQNBuilder(learn=config.learn, spec=spec, network=parts.network, algorithm=parts.algorithm)


def job_env_fn(config: PQNJobConfig, parts: Parts):
    return env_factory(config.env.env_id, parts.env)


def check(config: PQNJobConfig, parts: Parts) -> None:
    from gymnasium import spaces

    from algorithms.pqn import PQN

    parts.check(algorithm=PQN)
    check_env(lambda: job_env_fn(config, parts), env_id=config.env.env_id, user_env=parts.env,
              actions=(spaces.Discrete,), job="PQN")


def env_defaults(config: PQNJobConfig, parts: Parts) -> None:
    factory = job_env_fn(config, parts)
    fill_by_family(config.learn, DEFAULTS_BY_FAMILY, factory)
    fill_by_family(config.env, ENV_DEFAULTS_BY_FAMILY, factory)


def describe(summary: dict[str, Any]) -> list[str]:
    from experiments.roles.sync_lead import describe_members

    return describe_members(summary)


PROGRAM = SyncProgram(name="pqn", builder=builder)


@functools.cache
def job():
    """The runtime's Job (built on first use: the roles import torch)."""
    from experiments.roles.sync import make_job

    return make_job(PROGRAM, check=check, describe=describe, env_fn=job_env_fn, env_defaults=env_defaults)


def run(config: PQNJobConfig, *, parts: Parts | None = None, quiet: bool = False,
        started: float | None = None) -> dict[str, Any]:
    """Run the job; returns the lead's summary (``{}`` on other ranks under torchrun)."""
    return run_job(job(), config, parts=parts, quiet=quiet, started=started)


def format_summary(summary: dict[str, Any]) -> str:
    from experiments.runtime.summary import format_summary as box

    return box(summary, describe(summary), title="PQN")


def main(argv: Sequence[str] | None = None) -> int:
    return main_for(job, PQNJobConfig, format_summary, list(argv) if argv is not None else None)


if __name__ == "__main__":
    sys.exit(main())
