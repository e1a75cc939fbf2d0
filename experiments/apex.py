"""Ape-X DQN, the project's main job: ``python -m experiments.apex``.

With no launcher environment it spawns a local world (1 learner + actors sized to
the CPU count, at least 2) and stops when greedy evaluation over
``--eval-episodes`` episodes averages ``--target-return`` (475 on CartPole-v1) or
at the time/step budget, then prints a one-screen summary and where the
TensorBoard logs are. Under ``torchrun`` every rank joins the launcher's world and
takes a role by this rule (see :func:`experiments.roles.apex.role_of`):

    rank 0                      learner (and evaluation bookkeeping, TensorBoard)
    ranks 1 .. R                dedicated replay ranks (R = --replay-ranks, only with
                                --replay-placement replay-ranks)
    remaining ranks             actors (actor index = rank - 1 - R)

Evaluation (greedy, ``--eval-episodes`` envs, each env's first episode) runs on the
last actor, the least exploring one, after it pulls the newest parameters: it costs
that actor a fraction of a second every ``--eval-every`` env steps while the other
actors keep feeding the learner, and the learner never stalls for it.

Threads: every rank sets torch's intra-op threads to 1 (tiny per-step tensors,
where more threads only add synchronisation on a small box); the learner uses
``--learner-threads`` (default 1; raise it for big networks on many cores).

Multi-node: ``torchrun --nnodes N --nproc-per-node M --rdzv-backend c10d
--rdzv-endpoint HOST:PORT -m experiments.apex --listen-address <this node's IP>``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from typing import Any, Literal

from experiments.cli import parse_config


def _default_actors() -> int:
    # One actor per core; the learner shares, and actors throttle to the learner's pace.
    return max(2, os.cpu_count() or 1)


def _help(text: str) -> dict[str, str]:
    return {"help": text}


@dataclasses.dataclass
class ApexRunConfig:
    """Ape-X DQN (Horgan et al. 2018) on one machine or, under torchrun, a cluster."""

    env_id: str = dataclasses.field(default="CartPole-v1", metadata=_help(
        "gymnasium id; ALE ids (e.g. ALE/Pong-v5) get the standard Atari preprocessing"))
    num_actors: int = dataclasses.field(default=0, metadata=_help(
        "actor processes for a local run (0: one per CPU core, at least 2); under torchrun "
        "the world size decides"))
    # Measured like --lr (seeds 0-5, lr 2.5e-3): 8 envs per actor solved 6/6 (5K 10K 10K
    # 20K 30K 40K env steps, median 15K), 4 envs 4/6 (median 17.5K); and an actor's CPU
    # per env step halves (one batched forward for twice the envs: ~143 -> ~73 us).
    envs_per_actor: int = dataclasses.field(default=8, metadata=_help("envs stepped by each actor"))
    env_workers: int = dataclasses.field(default=0, metadata=_help(
        "subprocess env workers per actor (0: step envs in the actor process)"))
    device: str = dataclasses.field(default="auto", metadata=_help(
        "learner device: auto (cuda when available), cpu, cuda, cuda:N"))
    replay_capacity: int = dataclasses.field(default=100_000, metadata=_help("replay capacity (transitions)"))
    replay_placement: Literal["learner", "actors", "replay-ranks"] = dataclasses.field(
        default="learner", metadata=_help(
            "where the prioritized replay lives: in the learner process, as shards on the "
            "actors, or on dedicated replay ranks"))
    replay_ranks: int = dataclasses.field(default=1, metadata=_help(
        "dedicated replay ranks (with --replay-placement replay-ranks)"))
    prefetch: int = dataclasses.field(default=-1, metadata=_help(
        "replay batches the learner keeps in flight (0: sample synchronously; -1: auto, "
        "0 with the replay in the learner process, 2 with remote shards)"))
    priority_alpha: float = dataclasses.field(default=0.6, metadata=_help("prioritization exponent"))
    priority_beta: float = dataclasses.field(default=0.4, metadata=_help("importance-sampling exponent"))
    batch_size: int = dataclasses.field(default=128, metadata=_help("learner batch size"))
    # Measured: env steps to solve CartPole with these defaults in one deterministic
    # process (`python -m experiments.bench.apex_cartpole --impls ours-1proc --seeds 6
    # --max-env-steps 40000 --ours-flags="--lr 1e-3"`, greedy eval of 20 episodes every
    # 5000 env steps): lr 2.5e-3: 5K 10K 15K 20K >40K >40K (median 17.5K); lr 1e-3:
    # 10K 25K 40K >40K >40K >40K. With lr 1e-3 (3 seeds each), target updates every
    # 100 or 250 updates instead of 500 solved 1/3 and 0/3; batch 256 at 0.125
    # updates/step 1/3; a 64x64 MLP without dueling head 0/3.
    lr: float = dataclasses.field(default=2.5e-3, metadata=_help("Adam learning rate"))
    gamma: float = dataclasses.field(default=0.99, metadata=_help("discount"))
    n_step: int = dataclasses.field(default=3, metadata=_help("n-step return length"))
    share_frames: bool = dataclasses.field(default=True, metadata=_help(
        "frame-stack observations (Atari): store each transition's obs and next_obs once, "
        "as their 4 + n_step distinct frames instead of 8"))
    target_update: int = dataclasses.field(default=500, metadata=_help(
        "learner updates between target network updates"))
    tau: float = dataclasses.field(default=1.0, metadata=_help(
        "Polyak coefficient of target updates (1.0 = hard copy)"))
    double_q: bool = dataclasses.field(default=True, metadata=_help("double Q-learning"))
    dueling: bool = dataclasses.field(default=True, metadata=_help("dueling head"))
    hidden: str = dataclasses.field(default="128,128", metadata=_help(
        "MLP hidden sizes for vector observations, comma separated"))
    updates_per_step: float = dataclasses.field(default=0.25, metadata=_help(
        "learner updates per env step (replay ratio / batch size); actors throttle to hold it"))
    learning_starts: int = dataclasses.field(default=1000, metadata=_help(
        "replay size before learning starts"))
    push_every: int = dataclasses.field(default=8, metadata=_help(
        "learner updates between parameter publications"))
    pull_every: int = dataclasses.field(default=64, metadata=_help(
        "actor env steps between parameter pulls"))
    eps: float = dataclasses.field(default=0.4, metadata=_help("Ape-X base exploration rate"))
    eps_alpha: float = dataclasses.field(default=7.0, metadata=_help("Ape-X exploration exponent"))
    # Measured like --lr (lr 1e-3, seeds 0-2): per env copy 10K 25K >50K env steps to
    # solve, per actor process 35K 35K >50K.
    eps_per_env: bool = dataclasses.field(default=True, metadata=_help(
        "spread the eps_i schedule over all env copies (else one rate per actor process)"))
    eval_every: int = dataclasses.field(default=5000, metadata=_help(
        "env steps between greedy evaluations"))
    eval_episodes: int = dataclasses.field(default=20, metadata=_help("episodes per evaluation"))
    target_return: float | None = dataclasses.field(default=None, metadata=_help(
        "stop when the evaluation mean reaches this (default: the env's reward threshold)"))
    max_seconds: float = dataclasses.field(default=600.0, metadata=_help("wall-clock budget"))
    max_env_steps: int = dataclasses.field(default=1_000_000, metadata=_help("env step budget"))
    seed: int = dataclasses.field(default=0, metadata=_help("random seed"))
    log_dir: str = dataclasses.field(default="", metadata=_help(
        "TensorBoard directory (empty: runs/apex-<timestamp>; 'none': no TensorBoard)"))
    learner_threads: int = dataclasses.field(default=1, metadata=_help(
        "torch intra-op threads of the learner (CPU)"))
    status_every: float = dataclasses.field(default=5.0, metadata=_help(
        "seconds between console status lines (0: none)"))
    rpc_timeout: float = dataclasses.field(default=60.0, metadata=_help("timeout of every RPC (s)"))
    listen_address: str = dataclasses.field(default="127.0.0.1", metadata=_help(
        "address RPC listens on; beyond loopback only on a trusted network"))

    def validate(self) -> None:
        positive = ("envs_per_actor", "replay_capacity", "batch_size", "n_step", "target_update",
                    "push_every", "pull_every", "eval_every", "eval_episodes", "max_env_steps",
                    "learner_threads")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"--{_flag(name)} must be >= 1, got {getattr(self, name)}")
        for name in ("num_actors", "env_workers", "learning_starts", "replay_ranks"):
            if getattr(self, name) < 0:
                raise ValueError(f"--{_flag(name)} must be >= 0, got {getattr(self, name)}")
        if self.prefetch < -1:
            raise ValueError(f"--prefetch must be >= -1 (-1: auto), got {self.prefetch}")
        if self.num_actors == 1:
            raise ValueError("--num-actors must be 0 (auto) or >= 2 for a local world")
        for name in ("lr", "updates_per_step", "max_seconds", "rpc_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"--{_flag(name)} must be > 0, got {getattr(self, name)}")
        for name in ("gamma", "eps", "priority_beta"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"--{_flag(name)} must be in [0, 1], got {getattr(self, name)}")
        if not 0.0 < self.tau <= 1.0:
            raise ValueError(f"--tau must be in (0, 1], got {self.tau}")
        if self.priority_alpha < 0 or self.eps_alpha < 0:
            raise ValueError("--priority-alpha and --eps-alpha must be >= 0")
        if self.batch_size > self.replay_capacity:
            raise ValueError(f"--batch-size {self.batch_size} exceeds --replay-capacity {self.replay_capacity}")
        if self.replay_placement == "replay-ranks" and self.replay_ranks < 1:
            raise ValueError("--replay-ranks must be >= 1 with --replay-placement replay-ranks")
        self.hidden_sizes()  # raises on a malformed --hidden
        if self.device != "auto" and not (self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"--device must be auto, cpu, cuda or cuda:N, got {self.device!r}")
        from experiments.roles.apex_parts import check_env_id

        check_env_id(self.env_id)

    def prefetch_depth(self) -> int:
        """``--prefetch`` resolved: a replay in the learner process samples with a
        local call (tens of microseconds with the compiled sum tree), where a prefetch
        thread only adds GIL hand-offs, and under CPU contention it is starved itself
        (measured: 2.8 vs 0.7 ms per batch spent waiting, heavily loaded 2-core box);
        remote shards answer over RPC, which prefetching hides."""
        if self.prefetch >= 0:
            return self.prefetch
        return 0 if self.replay_placement == "learner" else 2

    def hidden_sizes(self) -> tuple[int, ...]:
        try:
            sizes = tuple(int(h) for h in self.hidden.split(",") if h.strip())
        except ValueError:
            raise ValueError(f"--hidden must be comma-separated ints, got {self.hidden!r}") from None
        if not sizes or any(h < 1 for h in sizes):
            raise ValueError(f"--hidden must be positive ints, got {self.hidden!r}")
        return sizes

    def apex_config(self):
        from algorithms.apex import ApexConfig

        return ApexConfig(n_step=self.n_step, batch_size=self.batch_size,
                          learning_starts=self.learning_starts, push_every=self.push_every,
                          pull_every=self.pull_every, eps=self.eps, eps_alpha=self.eps_alpha,
                          eps_per_env=self.eps_per_env)

    def dqn_config(self):
        from algorithms.dqn import DQNConfig

        return DQNConfig(gamma=self.gamma, lr=self.lr, double_q=self.double_q,
                         target_update_interval=self.target_update, tau=self.tau)

    def actors_for(self, world_size: int | None = None) -> int:
        """Actors in a world of ``world_size`` ranks (None: a local world we spawn)."""
        extra = self.replay_ranks if self.replay_placement == "replay-ranks" else 0
        if world_size is None:
            return self.num_actors or _default_actors()
        return world_size - 1 - extra

    def world_size(self) -> int:
        extra = self.replay_ranks if self.replay_placement == "replay-ranks" else 0
        return 1 + extra + self.actors_for()


def _flag(name: str) -> str:
    return name.replace("_", "-")


def default_log_dir() -> str:
    return os.path.join("runs", time.strftime("apex-%Y%m%d-%H%M%S"))


def run(config: ApexRunConfig, *, quiet: bool = False, started: float | None = None,
        dqn_class: type | None = None) -> dict[str, Any]:
    """Run the job (spawning a local world unless under torchrun); returns the learner's
    summary (``{}`` on ranks other than 0 under torchrun). Times count from ``started``
    (a ``time.time()``; default: now). ``dqn_class``: a DQN subclass (importable by
    name, e.g. defined in a module) used by the learner and the actors."""
    from experiments.roles.apex import rank_main
    from experiments.runner import run_world, under_launcher

    config.validate()
    if not config.log_dir:
        config = dataclasses.replace(config, log_dir=default_log_dir())
    elif config.log_dir.lower() == "none":
        config = dataclasses.replace(config, log_dir=None)
    started = time.time() if started is None else started
    nprocs = config.world_size()
    if under_launcher():
        world_size = int(os.environ["WORLD_SIZE"])
        if config.actors_for(world_size) < 1:
            raise ValueError(f"a world of {world_size} ranks leaves no actor for this configuration")
    results = run_world(rank_main, nprocs=nprocs, args=(config, started, quiet, dqn_class),
                        timeout=config.max_seconds + 120.0)
    summary = next((r for r in results if r), {})
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    if not summary:
        return ""
    solved = summary["solved"]
    lines = [
        "=" * 64,
        f"Ape-X DQN on {summary['env_id']}: "
        + (f"SOLVED (eval mean {summary['eval_return']:.1f} >= {summary['target_return']:g})"
           if solved else f"not solved (best eval mean {summary['best_eval_return']:.1f}, "
                          f"target {summary['target_return']:g})"),
        f"  time to solve      {summary['time_to_solve_s']:.1f} s wall-clock (from launch)"
        if solved else f"  wall-clock         {summary['wall_s']:.1f} s",
        f"  env steps          {summary['env_steps_at_solve'] if solved else summary['env_steps']:,}"
        f" (total {summary['env_steps']:,})",
        f"  env steps/s        {summary['env_steps_per_s']:.0f} (all {summary['num_actors']} actors)",
        f"  learner updates/s  {summary['updates_per_s']:.0f} ({summary['updates']:,} updates, "
        f"batch {summary['batch_size']})",
        f"  learner waiting    {100 * summary['wait_fraction']:.1f}% of its time (for data)",
        f"  learner CPU        {summary.get('learner_cpu_ms_per_update', float('nan')):.2f} ms per update"
        f" (its thread had the CPU {100 * summary.get('learner_cpu_share', float('nan')):.0f}%"
        " of the time)",
        f"  TensorBoard        {('tensorboard --logdir ' + summary['log_dir']) if summary['log_dir'] else 'off'}",
        "=" * 64,
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_config(ApexRunConfig, argv)
    summary = run(config)
    if summary:
        print(format_summary(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
