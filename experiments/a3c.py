"""A3C over the push-pull gradient server: ``python -m experiments.a3c``.

With no launcher environment it spawns a local world of ``--num-workers`` ranks
(default: one per CPU core; on fewer than 4 cores a single worker that runs in
this process against a local gradient server, without spawning or RPC: see
:func:`default_workers`) and stops when greedy evaluation over
``--eval-episodes`` episodes averages ``--target-return`` (the env's reward
threshold: 475 on CartPole-v1), or at the time/step budget, then prints a
one-screen summary and where the TensorBoard logs are.

Roles, by rank (see :func:`experiments.a3c_roles.role_of`), also under torchrun:

    rank 0      hosts the gradient server (owns the optimizer) and the coordinator
                (progress, evaluation, stop flag, TensorBoard); it is also worker 0
                unless --no-server-acts
    ranks 1..   workers: own vector env, local parameters, push gradients, pull

Rank 0 acts by default because on a small machine a process that only applies
optimizer steps would sit idle most of the time while costing a core's worth of
scheduling. Multi-node: ``torchrun --nnodes N --nproc-per-node M --rdzv-backend
c10d --rdzv-endpoint HOST:PORT -m experiments.a3c --listen-address <this node's IP>``.

Continuous control (Gaussian head), e.g.::

    python -m experiments.a3c --env-id Pendulum-v1 --num-workers 1 --gamma 0.9 \\
        --gae-lambda 0.9 --n-steps 8 --envs-per-worker 16 --reward-scale 0.1 \\
        --log-std-init -0.5 --max-seconds 150

(shared RMSProp 2e-3, the defaults otherwise), which on a busy 2-core machine moved
the 100-episode training mean from about -1250 to -320 in 760k env steps (150 s);
greedy evaluations reached -137 at best but swing between -140 and -1100 from one
evaluation to the next. (The previous setting, Adam 1e-3 and 8 envs, reached only
about -1000 in 300k steps.)
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, Literal

from experiments.cli import parse_config


def _help(text: str) -> dict[str, str]:
    return {"help": text}


# Below this many cores a local run uses one worker in this process (see default_workers).
MIN_CORES_FOR_RANKS = 4


def default_workers() -> int:
    """Workers of a local run when ``--num-workers 0``: one per CPU core, except on
    machines with fewer than 4 cores, where it is 1 (run in-process, no spawn).

    Measured on a 2-core machine (CartPole-v1, bench a3c_cartpole, 3 seeds): two
    ranks paid 2-3 s of spawning, RPC start-up and gradient staleness (mean 0.6-0.75
    versions, more env steps to solve: 16-100k against 13-23k) and solved in
    8-33 s; one in-process worker solved in 6-9 s under the same load."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return 1 if cores < MIN_CORES_FOR_RANKS else cores


@dataclasses.dataclass
class A3CRunConfig:
    """A3C (Mnih et al. 2016) on one machine or, under torchrun, a cluster.

    The defaults are tuned for CartPole-v1 on a small machine: 8 envs x 16 steps
    per gradient, the paper's RMSProp (its statistics shared on the server) at
    lr 2e-3, n-step returns, per-rollout advantage normalization. Chosen by env
    steps to a greedy 475 in an in-process simulation (one worker, seeds 0-7, eval
    every 2,560 steps): RMSProp 2e-3 median 7.7k steps (max 25.6k); RMSProp 1e-3
    10.2k; RMSProp 3e-3 7.7k (max 30.7k); Adam 3e-3 (the previous default) 15.4k
    (6 seeds; max 30.7k); Adam 5e-3 10.2k; 8 steps/rollout 25.6k; 32 steps 16.6k;
    4 envs 11.5k (max 46k); 16 envs 19.2k; GAE 0.95 14.1k; hidden 32 19.2k,
    128 21.8k; relu 16.6k; max_grad_norm 1.0 24.3k (one seed unsolved). With two
    workers RMSProp 2e-3 kept the median of Adam 3e-3 (12.8k) and cut the worst
    seed from 23k to 17.9k steps. Two real ranks are staler (0.6-0.9 versions) and
    then a policy near 475 sometimes collapses: ``--lr 1.4e-3`` (2e-3 / sqrt 2)
    solved in 6.3-11.1k env steps against 4.1-57.7k at 2e-3 (bench, 3 seeds each)."""

    env_id: str = dataclasses.field(default="CartPole-v1", metadata=_help("gymnasium id"))
    num_workers: int = dataclasses.field(default=0, metadata=_help(
        "workers of a local run (0: one per CPU core; 1, in-process, below 4 cores); "
        "under torchrun the world size decides"))
    server_acts: bool = dataclasses.field(default=True, metadata=_help(
        "rank 0 is a worker too, besides hosting the gradient server"))
    envs_per_worker: int = dataclasses.field(default=8, metadata=_help("envs stepped by each worker"))
    env_workers: int = dataclasses.field(default=0, metadata=_help(
        "subprocess env workers per worker (0: step envs in the worker process)"))
    n_steps: int = dataclasses.field(default=16, metadata=_help("rollout length per gradient"))
    device: str = dataclasses.field(default="auto", metadata=_help(
        "worker/server device: auto (cuda when available), cpu, cuda, cuda:N"))
    optimizer: Literal["rmsprop", "adam"] = dataclasses.field(default="rmsprop", metadata=_help(
        "optimizer of the gradient server (its statistics are shared by all workers)"))
    lr: float = dataclasses.field(default=2e-3, metadata=_help("learning rate"))
    gamma: float = dataclasses.field(default=0.99, metadata=_help("discount"))
    gae_lambda: float = dataclasses.field(default=1.0, metadata=_help(
        "GAE lambda (1.0: n-step returns)"))
    entropy_coef: float = dataclasses.field(default=0.0, metadata=_help("entropy bonus weight"))
    value_coef: float = dataclasses.field(default=0.5, metadata=_help("value loss weight"))
    max_grad_norm: float | None = dataclasses.field(default=0.5, metadata=_help(
        "clip each pushed gradient to this norm ('none': no clipping)"))
    normalize_advantages: bool = dataclasses.field(default=True, metadata=_help(
        "normalize advantages per rollout"))
    reward_scale: float = dataclasses.field(default=1.0, metadata=_help("multiply rewards by this"))
    hidden: str = dataclasses.field(default="64,64", metadata=_help(
        "MLP hidden sizes, comma separated"))
    activation: Literal["tanh", "relu"] = dataclasses.field(default="tanh", metadata=_help(
        "hidden activation"))
    shared_network: bool = dataclasses.field(default=False, metadata=_help(
        "one body for actor and critic"))
    log_std_init: float = dataclasses.field(default=0.0, metadata=_help(
        "initial log-std of Gaussian policies"))
    state_dependent_std: bool = dataclasses.field(default=False, metadata=_help(
        "Gaussian log-std from the network instead of a free parameter"))
    action_transform: Literal["clip", "tanh"] = dataclasses.field(default="clip", metadata=_help(
        "map Gaussian samples into the action box by clipping or tanh squashing"))
    max_staleness: int | None = dataclasses.field(default=None, metadata=_help(
        "server drops/down-weights gradients older than this many versions ('none': accept all)"))
    staleness_policy: Literal["drop", "downweight"] = dataclasses.field(default="drop", metadata=_help(
        "what the server does with a gradient beyond --max-staleness"))
    eval_every: int = dataclasses.field(default=10_000, metadata=_help(
        "env steps (all workers) between greedy evaluations"))
    eval_episodes: int = dataclasses.field(default=20, metadata=_help("episodes per evaluation"))
    target_return: float | None = dataclasses.field(default=None, metadata=_help(
        "stop when the evaluation mean reaches this (default: the env's reward threshold)"))
    max_seconds: float = dataclasses.field(default=600.0, metadata=_help("wall-clock budget"))
    max_env_steps: int = dataclasses.field(default=5_000_000, metadata=_help("env step budget"))
    seed: int = dataclasses.field(default=0, metadata=_help("random seed"))
    log_dir: str | None = dataclasses.field(default="auto", metadata=_help(
        "TensorBoard directory ('auto': runs/a3c-<timestamp>; 'none' disables)"))
    status_every: float = dataclasses.field(default=5.0, metadata=_help(
        "seconds between console status lines (0: none)"))
    # Evaluations start when the reported env steps pass --eval-every: at 0.5 s a
    # remote worker's steps arrived up to ~1,000 steps late. One small RPC per 0.1 s.
    report_every: float = dataclasses.field(default=0.1, metadata=_help(
        "seconds between a remote worker's progress reports to rank 0"))
    rpc_timeout: float = dataclasses.field(default=60.0, metadata=_help("timeout of every RPC (s)"))
    listen_address: str = dataclasses.field(default="127.0.0.1", metadata=_help(
        "address RPC listens on; beyond loopback only on a trusted network"))

    def validate(self) -> None:
        for name in ("envs_per_worker", "n_steps", "eval_every", "eval_episodes", "max_env_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{_flag(name)} must be >= 1, got {getattr(self, name)}")
        for name in ("num_workers", "env_workers"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{_flag(name)} must be >= 0, got {getattr(self, name)}")
        for name in ("max_seconds", "rpc_timeout", "report_every"):
            if not getattr(self, name) > 0:
                raise ValueError(f"--{_flag(name)} must be > 0, got {getattr(self, name)}")
        if self.status_every < 0:
            raise ValueError(f"--status-every must be >= 0, got {self.status_every}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ValueError(f"--max-staleness must be >= 0 or none, got {self.max_staleness}")
        if self.device != "auto" and not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        self.hidden_sizes()  # raises naming --hidden
        try:
            self.a2c_config()
        except ValueError as exc:  # name the flag, not the dataclass field
            raise ValueError(f"--{_flag(str(exc).split()[0])}: {exc}") from None
        from experiments.a3c_roles import check_env_id

        check_env_id(self.env_id)

    def hidden_sizes(self) -> tuple[int, ...]:
        try:
            sizes = tuple(int(h) for h in self.hidden.split(",") if h.strip())
        except ValueError:
            raise ValueError(f"--hidden must be comma-separated ints, got {self.hidden!r}") from None
        if not sizes or any(h < 1 for h in sizes):
            raise ValueError(f"--hidden must be positive ints, got {self.hidden!r}")
        return sizes

    def a2c_config(self):
        from algorithms.a2c import A2CConfig

        return A2CConfig(
            gamma=self.gamma, gae_lambda=self.gae_lambda, value_coef=self.value_coef,
            entropy_coef=self.entropy_coef, max_grad_norm=self.max_grad_norm,
            normalize_advantages=self.normalize_advantages, reward_scale=self.reward_scale,
            optimizer=self.optimizer, lr=self.lr, hidden=self.hidden_sizes(),
            activation=self.activation, shared_network=self.shared_network,
            log_std_init=self.log_std_init, state_dependent_std=self.state_dependent_std,
            action_transform=self.action_transform,
        )

    def workers_for(self, world_size: int) -> int:
        return world_size if self.server_acts else world_size - 1

    def world_size(self) -> int:
        workers = self.num_workers or default_workers()
        return workers if self.server_acts else workers + 1


def _flag(name: str) -> str:
    return name.replace("_", "-")


def default_log_dir() -> str:
    return os.path.join("runs", time.strftime("a3c-%Y%m%d-%H%M%S"))


def run(config: A3CRunConfig, *, quiet: bool = False, started: float | None = None) -> dict[str, Any]:
    """Run the job (a local world unless under torchrun); returns rank 0's summary
    (``{}`` on other ranks under torchrun). Its times count from ``started`` (a
    ``time.time()``; default: now), e.g. a benchmark's process launch."""
    from experiments.a3c_roles import rank_main, run_serial
    from experiments.runner import run_world, under_launcher

    config.validate()
    if config.log_dir == "auto":
        config = dataclasses.replace(config, log_dir=default_log_dir())
    elif config.log_dir is not None and config.log_dir.lower() == "none":
        config = dataclasses.replace(config, log_dir=None)
    started = time.time() if started is None else float(started)
    if under_launcher() and config.workers_for(int(os.environ["WORLD_SIZE"])) < 1:
        raise ValueError("a world of 1 rank with --no-server-acts has no worker")
    if not under_launcher() and config.world_size() == 1:
        return run_serial(config, started, quiet)
    results = run_world(rank_main, nprocs=config.world_size(), args=(config, started, quiet),
                        timeout=config.max_seconds + 120.0)
    return next((r for r in results if r), {})


def format_summary(summary: dict[str, Any]) -> str:
    if not summary:
        return ""
    solved = summary["solved"]
    target = summary["target_return"]
    if solved:
        head = f"SOLVED (eval mean {summary['eval_return']:.1f} >= {target:g})"
    else:
        best = summary["best_eval_return"]
        head = (f"not solved ({summary['stop_reason']}; best eval mean "
                f"{'n/a' if best is None else f'{best:.1f}'}"
                f"{'' if target is None else f', target {target:g}'})")
    steps = summary["env_steps_at_solve"] if solved else summary["env_steps"]
    lines = [
        "=" * 64,
        f"A3C on {summary['env_id']}: {head}",
        f"  {'time to solve' if solved else 'wall-clock':<18} "
        f"{summary['time_to_solve_s'] if solved else summary['wall_s']:.1f} s (from launch)",
        f"  env steps          {steps:,} (total {summary['env_steps']:,})",
        f"  env steps/s        {summary['env_steps_per_s']:.0f} "
        f"({summary['num_workers']} workers x {summary['envs_per_worker']} envs)",
        f"  server updates/s   {summary['updates_per_s']:.1f} ({summary['updates']:,} applied, "
        f"{summary['dropped']:,} dropped, mean staleness {summary['mean_staleness']:.2f})",
        f"  last 100 episodes  mean return {summary['train_return']:.1f} "
        f"({summary['episodes']:,} episodes)",
        f"  evaluations        {summary['evaluations']} (last mean {summary['last_eval_return']})",
        f"  TensorBoard        "
        f"{('tensorboard --logdir ' + summary['log_dir']) if summary['log_dir'] else 'off'}",
        "=" * 64,
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(A3CRunConfig, argv)
    summary = run(config)
    if summary:
        print(format_summary(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
