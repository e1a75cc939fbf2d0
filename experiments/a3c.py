"""A3C over the push-pull gradient server: ``python -m experiments.a3c``.

Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement Learning" (ICML,
arXiv:1602.01783). With no launcher environment it runs ``--num-workers`` workers
(default: one per CPU core; on fewer than 4 cores a single worker in this process,
against a local gradient server: see :func:`default_workers`) and stops when greedy
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
from typing import Any, ClassVar, Literal

from experiments.roles.a3c_parts import fill_defaults  # noqa: F401  (public: the defaults a run fills, for scripts)
from experiments.runtime import EnvConfig, Parts, RunConfig, field, flag, layer_sizes, section
from experiments.runtime.config import usable_cores
from experiments.runtime.job import main_for, run_job

# Below this many cores a local run uses one worker in this process (see default_workers).
MIN_CORES_FOR_RANKS = 4


def default_workers() -> int:
    """Workers of a local run when ``--num-workers 0``: one per CPU core, except on
    machines with fewer than 4 cores, where it is 1 (run in-process, no spawn).

    Measured on a 2-core machine (CartPole-v1, bench a3c_cartpole, 3 seeds): two
    ranks paid 2-3 s of spawning, RPC start-up and gradient staleness (mean 0.6-0.75
    versions, more env steps to solve: 16-100k against 13-23k) and solved in
    8-33 s; one in-process worker solved in 6-9 s under the same load."""
    cores = usable_cores()
    return 1 if cores < MIN_CORES_FOR_RANKS else cores


# Defaults by observation family (``algorithms.nets.observation_family``, the rule
# that picks the default network), for the fields left unset (``None``):
# - vector (CartPole-v1): measured, see A3CLearnConfig below.
# - small_image (MinAtar's 10x10xC, the MinAtar conv): measured on Breakout-v0 (one
#   in-process worker, 8 envs, one seed, bench minatar: epsilon-0.1 / greedy return of
#   30 episodes, 2-core machine, nothing else running): the vector defaults (16 steps,
#   no entropy bonus, RMSProp 2e-3) 4.7 / 5.7 at 2.0M env steps (150 s) and 6.5 / 8.5
#   at 4.0M (300 s), 13.5K env steps/s; lr 7e-4 with entropy 0.01: 5.8 / 6.5 at 4.0M;
#   5 steps, entropy 0.01, 2e-3: 7.0 / 8.8 at 1.0M (134 s), best 7.7 / 9.4 at 1.4M
#   (185 s), 7.7K env steps/s (3x the gradients per env step); 5 steps without the
#   entropy bonus at 1e-3: 5.1 / 5.4 at 1.4M. Short runs: the choice is of the faster
#   start, not of the final score.
#   value_coef 0.25 without per-rollout advantage normalization (SB3's A2C settings
#   for Atari in rl-baselines3-zoo), against 0.5 with it, measured with the rest of
#   these defaults for 5M env steps (bench minatar, one seed, 2-core machine, nothing
#   else running; epsilon-0.1 / greedy evaluation of 30 episodes every 50K env steps,
#   window means over 0-100 / 100-200 / 200-300 / 300-400 s, then the last 10):
#   SpaceInvaders-v0 29.1 / 45.6 / 53.5 / 61.9, last 10 67.2 (160.0), against 28.4 /
#   44.7 / 46.4 / 43.9, last 10 43.8 (101.7) (lr 7e-4 with 0.5 and normalization:
#   24.4 / 31.1 / 41.7 / 49.0, 48.3 (120.3)); SB3 A2C itself 19.7 / 31.6 / 34.6 /
#   50.4, 56.6 (116.2). Breakout-v0 (0-100 / 100-200 / 200-300 s; 5M env steps take
#   290 s): 7.3 / 11.2 / 14.5, last 10 17.1 (32.7), the DQN paper's 10 at 63 s, against
#   5.8 / 6.4 / 6.7, 6.2 (8.3); SB3 A2C 3.9 / 4.6 / 4.6, 4.6 (5.1). Normalizing 80
#   advantages per rollout rescales every gradient to the same size whatever the
#   returns, which on these games (rewards of 1, values of 1-10) seems to cost more
#   than it steadies; not isolated from the value weight (one run each).
# - frames (Atari 84x84 stacks, the Nature CNN): A3C's Atari settings (Mnih et al.
#   2016: t_max 5, entropy 0.01) at the A2C rate of OpenAI Baselines and SB3 (7e-4),
#   with the zoo's value_coef 0.25 and no advantage normalization, not measured here
#   (an Atari run takes hours on 2 cores).
# - other (a user's network on other observations): the vector defaults.
DEFAULTS_BY_FAMILY: dict[str, dict[str, float | bool]] = {
    "vector": {"n_steps": 16, "lr": 2e-3, "entropy_coef": 0.0, "value_coef": 0.5, "normalize_advantages": True},
    "small_image": {"n_steps": 5, "lr": 2e-3, "entropy_coef": 0.01, "value_coef": 0.25,
                    "normalize_advantages": False},
    "frames": {"n_steps": 5, "lr": 7e-4, "entropy_coef": 0.01, "value_coef": 0.25, "normalize_advantages": False},
    "other": {"n_steps": 16, "lr": 2e-3, "entropy_coef": 0.0, "value_coef": 0.5, "normalize_advantages": True},
}


# Env copies per worker, by the same families (``--num-envs`` when not given):
# - vector: 8, the CartPole measurement in A3CLearnConfig below (16 envs: 19.2k env
#   steps to solve against 7.7k).
# - small_image: 16, measured on SpaceInvaders-v0 (bench minatar, one in-process
#   worker, 5 steps, 360 s each, one seed, 2-core machine, nothing else running):
#   8 envs ran 8.8K env steps/s at 219 updates/s and ended at 18.6 / 39.4
#   (epsilon-0.1 / greedy, best 45.7); 16 envs ran 13.3K env steps/s at 166
#   updates/s, reached the DQN paper's 45 at 121 s and ended at 71.6 / 120.6 (its
#   best). Each acting forward and each gradient pays a fixed cost that 16 envs
#   spread over twice the samples; SB3's A2C also steps 16 envs on Atari.
# - frames: 16, as OpenAI Baselines' and SB3's A2C on Atari (not measured here).
ENV_DEFAULTS_BY_FAMILY: dict[str, dict[str, int]] = {
    "vector": {"num_envs": 8},
    "small_image": {"num_envs": 16},
    "frames": {"num_envs": 16},
    "other": {"num_envs": 8},
}


@dataclasses.dataclass
class A3CEnvConfig(EnvConfig):
    """The env each worker steps; ``--num-envs`` by observation family when not
    given (``ENV_DEFAULTS_BY_FAMILY``)."""

    num_envs: int | None = field(None, help=(
        "env copies stepped by each worker (none: by observation family, 8 for vectors, 16 for images)"))

    def validate(self) -> None:
        # Unset until the job fills it from the env: checked with the vector value.
        probe = self if self.num_envs is not None else dataclasses.replace(
            self, num_envs=ENV_DEFAULTS_BY_FAMILY["vector"]["num_envs"])
        EnvConfig.validate(probe)


@dataclasses.dataclass
class A3CLearnConfig:
    """A2C loss, networks and the server's optimizer (``--n-steps``, ``--lr`` and
    ``--entropy-coef`` by observation family when not given: ``DEFAULTS_BY_FAMILY``).

    The defaults are tuned for CartPole-v1 on a small machine: 8 envs x 16 steps per
    gradient, the paper's RMSProp (its statistics shared on the server) at lr 2e-3,
    n-step returns, per-rollout advantage normalization. Chosen by env steps to a
    greedy 475 in an in-process simulation (one worker, seeds 0-7, eval every 2,560
    steps): RMSProp 2e-3 median 7.7k steps (max 25.6k); RMSProp 1e-3 10.2k; RMSProp
    3e-3 7.7k (max 30.7k); Adam 3e-3 15.4k (6 seeds; max 30.7k); Adam 5e-3 10.2k; 8
    steps/rollout 25.6k; 32 steps 16.6k; 4 envs 11.5k (max 46k); 16 envs 19.2k; GAE
    0.95 14.1k; hidden 32 19.2k, 128 21.8k; relu 16.6k; max_grad_norm 1.0 24.3k.
    Two real ranks are staler (0.6-0.9 versions) and then a policy near 475
    sometimes collapses: ``--lr 1.4e-3`` (2e-3 / sqrt 2) solved in 6.3-11.1k env
    steps against 4.1-57.7k at 2e-3 (bench, 3 seeds each)."""

    n_steps: int | None = field(None, help=(
        "rollout length per gradient (none: by observation family, 16 for vectors, 5 for images)"))
    optimizer: Literal["rmsprop", "adam"] = field("rmsprop", help=(
        "optimizer of the gradient server (its statistics are shared by all workers)"))
    lr: float | None = field(None, help=(
        "learning rate (none: by observation family, 2e-3 for vectors and MinAtar-size images, "
        "7e-4 for 84x84 frames)"))
    gamma: float = field(0.99, help="discount")
    gae_lambda: float = field(1.0, help="GAE lambda (1.0: n-step returns)")
    entropy_coef: float | None = field(None, help=(
        "entropy bonus weight (none: by observation family, 0 for vectors, 0.01 for images)"))
    value_coef: float | None = field(None, help=(
        "value loss weight (none: by observation family, 0.5 for vectors, 0.25 for images)"))
    max_grad_norm: float | None = field(0.5, help="clip each pushed gradient to this norm ('none': no clipping)")
    normalize_advantages: bool | None = field(None, help=(
        "normalize advantages per rollout (none: by observation family, on for vectors, off for images)"))
    reward_scale: float = field(1.0, help="multiply rewards by this")
    hidden: str = field("64,64", help="MLP hidden sizes, comma separated")
    activation: Literal["tanh", "relu"] = field("tanh", help="hidden activation")
    shared_network: bool = field(False, help="one body for actor and critic")
    log_std_init: float = field(0.0, help="initial log-std of Gaussian policies")
    state_dependent_std: bool = field(False, help="Gaussian log-std from the network instead of a free parameter")
    action_transform: Literal["clip", "tanh"] = field("clip", help=(
        "map Gaussian samples into the action box by clipping or tanh squashing"))

    def validate(self) -> None:
        if self.n_steps is not None and self.n_steps < 1:
            raise ValueError(f"{flag('n_steps')} must be >= 1, got {self.n_steps}")
        # Fields still unset (the job fills them from the env) are checked with the
        # vector family's values here, so everything else is checked before any env.
        probe = dataclasses.replace(self, **{name: value for name, value in DEFAULTS_BY_FAMILY["vector"].items()
                                             if getattr(self, name) is None})
        try:
            probe.a2c_config()
        except ValueError as exc:  # name the flag, not the dataclass field
            raise ValueError(f"{flag(str(exc).split()[0])}: {exc}") from None

    def hidden_sizes(self) -> tuple[int, ...]:
        return layer_sizes(self.hidden, name="hidden")

    def a2c_config(self):
        from algorithms.a2c import A2CConfig

        unset = [flag(name) for name in DEFAULTS_BY_FAMILY["vector"] if getattr(self, name) is None]
        if unset:
            raise ValueError(f"{', '.join(unset)} unset: the job fills them from the env's observations "
                             "(experiments.roles.a3c_parts.env_defaults); set them to build an A2C directly")

        return A2CConfig(
            gamma=self.gamma, gae_lambda=self.gae_lambda, value_coef=self.value_coef,
            entropy_coef=self.entropy_coef, max_grad_norm=self.max_grad_norm,
            normalize_advantages=self.normalize_advantages, reward_scale=self.reward_scale,
            optimizer=self.optimizer, lr=self.lr, hidden=self.hidden_sizes(),
            activation=self.activation, shared_network=self.shared_network,
            log_std_init=self.log_std_init, state_dependent_std=self.state_dependent_std,
            action_transform=self.action_transform)


@dataclasses.dataclass
class ServerConfig:
    """The gradient server and the workers' reports."""

    max_staleness: int | None = field(None, help=(
        "server drops/down-weights gradients older than this many versions ('none': accept all)"))
    staleness_policy: Literal["drop", "downweight"] = field("drop", help=(
        "what the server does with a gradient beyond --max-staleness"))
    # Evaluations start when the reported env steps pass --eval-every: at 0.5 s a
    # remote worker's steps arrived up to ~1,000 steps late. One small RPC per 0.1 s.
    report_every: float = field(0.1, help="seconds between a remote worker's progress reports to rank 0")
    # A dead worker's restart takes seconds; a round that waited this long for it
    # closes without it, and later rounds do not wait for it until it pushes again
    # (rlpar.servers.rounds). Rank 0's own evaluation delays its gradient too: past
    # this bound the round goes on without rank 0 instead of idling every worker.
    round_timeout: float = field(5.0, help=(
        "--sync: seconds a round waits for a missing worker's gradient before stepping without it"))

    def validate(self) -> None:
        if not self.round_timeout > 0:
            raise ValueError(f"{flag('round_timeout')} must be > 0, got {self.round_timeout}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"{flag('max_staleness')} must be >= 0 or none, got {self.max_staleness}")
        if not self.report_every > 0:
            raise ValueError(f"{flag('report_every')} must be > 0, got {self.report_every}")


@dataclasses.dataclass
class A3CJobConfig:
    """A3C (Mnih et al. 2016) on one machine or, under torchrun, a cluster."""

    # What the checkpoint's state (the server's network and optimizer) is shaped by:
    # --resume may not change these (experiments.runtime.resume).
    fixed_on_resume: ClassVar[tuple[str, ...]] = (
        "env_id", "hidden", "shared_network", "state_dependent_std", "optimizer")
    # The defaults the roles fill by observation family, and the local worker count:
    # read off the config's class, so the roles never import this entry point.
    defaults_by_family: ClassVar[dict[str, dict[str, float | bool]]] = DEFAULTS_BY_FAMILY
    env_defaults_by_family: ClassVar[dict[str, dict[str, int]]] = ENV_DEFAULTS_BY_FAMILY
    default_workers: ClassVar[Any] = staticmethod(default_workers)

    # Learning on CPU unless --device says otherwise: the workers are one process per
    # core, and all of them on one GPU computed 2.7x fewer updates/s than on the cores
    # (an H100 machine, 16 workers, MinAtar Breakout: 130 against 353; docs/gpu.md).
    run: RunConfig = section(lambda: RunConfig(max_env_steps=5_000_000, eval_every=10_000, device="cpu"))
    env: A3CEnvConfig = section(A3CEnvConfig)
    learn: A3CLearnConfig = section(A3CLearnConfig)
    server: ServerConfig = section(ServerConfig)
    num_workers: int = field(0, help=(
        "workers of a local run (0: one per CPU core; 1, in-process, below 4 cores); under torchrun "
        "the world size decides"))
    server_acts: bool = field(True, help="rank 0 is a worker too, besides hosting the gradient server")
    sync: bool = field(False, help=(
        "synchronous A2C: the server averages one gradient of every worker per step (reduce mode), "
        "and each worker waits for that step before its next rollout"))

    def validate(self) -> None:
        if self.num_workers < 0:
            raise ValueError(f"{flag('num_workers')} must be >= 0, got {self.num_workers}")
        if self.sync and self.server.max_staleness is not None:
            raise ValueError(f"{flag('max_staleness')} does not apply to {flag('sync')}: a round only "
                             "averages gradients of its own version (staleness 0)")
        if self.sync and not self.server.round_timeout < self.run.rpc_timeout:
            raise ValueError(f"{flag('round_timeout')} ({self.server.round_timeout}) must be below "
                             f"{flag('rpc_timeout')} ({self.run.rpc_timeout}): a worker's push waits for its round")


def job():
    from experiments.roles import a3c as roles

    return roles.JOB


def run(config: A3CJobConfig, *, parts: Parts | None = None, quiet: bool = False,
        started: float | None = None) -> dict[str, Any]:
    """Run the job (serial, a local world, or this rank under torchrun); returns rank
    0's summary (``{}`` on other ranks under torchrun). With ``config.run.resume = DIR``
    the run in DIR goes on with its saved config; each field of ``config`` that differs
    from ``A3CJobConfig()`` overrides it (``experiments.runtime.resume``)."""
    return run_job(job(), config, parts=parts, quiet=quiet, started=started)


def format_summary(summary: dict[str, Any]) -> str:
    from experiments.roles import a3c as roles
    from experiments.runtime.summary import format_summary as box

    return box(summary, roles.describe(summary), title="A3C")


def main(argv: Sequence[str] | None = None) -> int:
    # The job itself, not job(): its roles import torch, and a Ctrl-C then is a stop too.
    return main_for(job, A3CJobConfig, format_summary, list(argv) if argv is not None else None)


if __name__ == "__main__":
    sys.exit(main())
