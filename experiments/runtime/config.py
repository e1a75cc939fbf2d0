"""The config sections every job shares: the run (budgets, evaluation, output,
transport) and the env. Each job's config holds these plus its own sections, with
job-specific defaults (``section(lambda: RunConfig(eval_every=...))``)."""

from __future__ import annotations

import dataclasses
import math
import os
import socket

from experiments.runtime.cli import field, flag

LISTEN_ENV = "RLPAR_LISTEN_ADDRESS"


# Evaluations of 84x84 frames (Atari): every 100K env steps (400K frames), as the Atari
# bench snapshots, over 10 episodes, its protocol's. A Pong episode is 800-4,000 agent
# steps: 20 of them every 5-10K env steps (the jobs' values for smaller inputs) left a
# Pong run evaluating most of the time.
FRAMES_EVALUATION: dict[str, int] = {"eval_every": 100_000, "eval_episodes": 10}


def evaluation_by_family(*, every: int, episodes: int = 20) -> dict[str, dict[str, int]]:
    """A job's ``--eval-every`` and ``--eval-episodes`` by observation family (its run
    section leaves them None; ``experiments.runtime.entry.family_defaults`` fills them):
    ``every`` and ``episodes`` for every family but frames (:data:`FRAMES_EVALUATION`)."""
    own = {"eval_every": every, "eval_episodes": episodes}
    return {"vector": own, "small_image": own, "frames": FRAMES_EVALUATION, "other": own}


@dataclasses.dataclass
class RunConfig:
    """Budgets, evaluation, output and transport of one run."""

    seed: int = field(0, help="random seed (every rank derives its own from it)")
    max_seconds: float = field(600.0, allow_inf=True, help="wall-clock budget in seconds")
    max_env_steps: int = field(1_000_000, help="env step budget (all actors together)")
    eval_every: int | None = field(5000, help=(
        "env steps between greedy evaluations (none: by observation family, 100K for 84x84 frames; else "
        "5K for Ape-X and PPO, 10K for IMPALA, PQN, A2C and A3C)"))
    eval_episodes: int | None = field(20, help=(
        "episodes per evaluation (none: by observation family, 10 for 84x84 frames, else 20)"))
    target_return: float | None = field(None, help=(
        "stop when the evaluation mean reaches this (none: the env's reward threshold)"))
    log_dir: str = field("runs", help=(
        "where run directories are created (runs/<job>-<date>-<time>-<id>/); 'none': write nothing"))
    status_every: float = field(5.0, help="seconds between console status lines (0: none)")
    device: str = field("auto", help="learning device: auto (cuda when available), cpu, cuda, cuda:N")
    serial: bool = field(False, help=(
        "run every role in this one process (deterministic for a seed with a step budget)"))
    torch_threads: int = field(1, help="torch intra-op threads of the learning process")
    rpc_timeout: float = field(60.0, help="timeout of every RPC in seconds")
    checkpoint_every: float = field(300.0, help=(
        "seconds between checkpoints of the run (0: only at the end and on Ctrl-C/SIGTERM)"))
    keep_checkpoints: int = field(3, help="checkpoints kept in <run>/checkpoints (the newest)")
    max_restarts: int = field(3, help=(
        "times a local run is restarted from its newest checkpoint after a rank dies (killed, "
        "aborted), and times each expendable actor is restarted alone (it rejoins the running "
        "job); an exception in a rank is a bug that would repeat and ends the run at once"))
    resume: str = field("", per_launch=True, help=(
        "continue the run in this run directory from its newest checkpoint, with its own config.json "
        "(flags given here override it; what shapes the checkpoint, e.g. the networks, may not "
        "change); never saved in a config.json, so --config of a run always starts a new one"))
    listen_address: str = field("", help=(
        f"address RPC and the store listen on (empty: ${LISTEN_ENV}, else 127.0.0.1; auto: the one "
        "this machine reaches the launcher's MASTER_ADDR from); anything but loopback only on a "
        "trusted network"))

    def validate(self) -> None:
        _at_least(self, "max_env_steps", 1)
        for name in ("eval_every", "eval_episodes"):  # None: the job fills it from the env
            if getattr(self, name) is not None:
                _at_least(self, name, 1)
        _at_least(self, "torch_threads", 1)
        _at_least(self, "keep_checkpoints", 1)
        _at_least(self, "max_restarts", 0)
        if self.checkpoint_every < 0:
            raise ValueError(f"{flag('checkpoint_every')} must be >= 0, got {self.checkpoint_every}")
        if self.resume:
            from experiments.runtime.rundir import RunDir

            if not os.path.isdir(self.resume):
                raise ValueError(f"{flag('resume')} {self.resume!r}: no such directory")
            if not os.path.isfile(os.path.join(self.resume, "config.json")):
                raise ValueError(f"{flag('resume')} {self.resume!r} is not a run directory "
                                 "(it has no config.json)")
            if not RunDir(self.resume).has_checkpoint():
                raise ValueError(f"{flag('resume')} {self.resume!r} holds no checkpoint "
                                 f"(expected {os.path.join(self.resume, 'checkpoints')}/ckpt-*.pt)")
            if not self.files():
                raise ValueError(f"{flag('resume')} writes on in the run directory it continues: "
                                 f"{flag('log_dir')} none cannot go with it")
        for name in ("max_seconds", "rpc_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{flag(name)} must be > 0, got {getattr(self, name)}")
        if self.status_every < 0:
            raise ValueError(f"{flag('status_every')} must be >= 0, got {self.status_every}")
        check_device(self.device)
        try:
            check_listen_address(self.resolved_listen_address())
        except ValueError as exc:
            if self.listen_address or not os.environ.get(LISTEN_ENV):
                raise
            raise ValueError(f"{exc} (taken from ${LISTEN_ENV})") from None

    def resolved_listen_address(self) -> str:
        """The address to listen on; "auto": the one this machine reaches the world's
        store from (``rlpar.distributed.netif.address_toward``), loopback without a
        launcher."""
        address = self.listen_address or os.environ.get(LISTEN_ENV, "") or "127.0.0.1"
        if address != "auto":
            return address
        from experiments.runtime.job import launcher
        from rlpar.distributed.netif import address_toward

        found = launcher()
        return "127.0.0.1" if found is None else address_toward(found.master_addr)

    def files(self) -> bool:
        return self.log_dir.lower() != "none"


# Seconds an env step or reset in an env worker may take by default: sane envs take
# micro- to milliseconds (an Atari reset ~0.1 s), so a minute is far beyond any of
# them yet still names a hang within a minute, with the run's summary.
DEFAULT_ENV_STEP_TIMEOUT = 60.0

ENV_WORKERS_HELP = (
    "subprocesses stepping an actor's (worker's) env copies, each a share of them (at most one per "
    "copy); 0: in the actor's own process. A worker killed by a signal (e.g. the OOM killer) is "
    "replaced, its cut episodes dropped, and counted (env_worker_restarts), at most --max-restarts "
    "times per worker; an env that raises, returns NaN/inf or hangs ends the run naming it")


@dataclasses.dataclass
class EnvConfig:
    """The env each actor (worker) steps, as a vector of copies."""

    env_id: str = field("CartPole-v1", help=(
        "gymnasium id, 'module:EnvId' (the module is imported in every rank first), "
        "ALE/<Game>-v5 or MinAtar/<Game>-v0"))
    num_envs: int = field(8, help="env copies stepped by each actor (worker)")
    env_workers: int = field(0, help=ENV_WORKERS_HELP)
    env_step_timeout: float | None = field(None, allow_inf=True, help=(
        "seconds an env step or reset may take in an env worker before the run stops with an error "
        f"naming the env and its worker; none: {DEFAULT_ENV_STEP_TIMEOUT:g} with --env-workers >= 1; "
        "inf: no limit. An env in the actor's own process (--env-workers 0) cannot be interrupted: "
        "in a local run the launcher names a rank still stuck when the run ends (--max-seconds); "
        "--serial waits for it"))
    reward_clip: float | None = field(None, allow_inf=True, help=(
        "clip the rewards learned from to +-this; episode returns and evaluations count the game's "
        "(none: by observation family, 1 for 84x84 frames as the DQN papers' Atari preprocessing, "
        "else inf; inf: no clip)"))

    def validate(self) -> None:
        _at_least(self, "num_envs", 1)
        _at_least(self, "env_workers", 0)
        check_step_timeout(self.env_step_timeout, self.env_workers)
        if self.reward_clip is not None and not self.reward_clip > 0:  # NaN too
            raise ValueError(f"{flag('reward_clip')} must be > 0 (inf: no clip), got {self.reward_clip}")
        if not self.env_id.strip():
            raise ValueError(f"{flag('env_id')} may not be empty")


@dataclasses.dataclass
class FamilyEnvConfig(EnvConfig):
    """:class:`EnvConfig` whose ``--num-envs``, when not given, the job fills by the env's
    observation family (``fill_by_family`` in its ``env_defaults``); a job subclasses it
    to say its own defaults in the flag's help."""

    num_envs: int | None = field(None, help="env copies per member (none: by observation family)")

    def validate(self) -> None:  # unset until the job fills it from the env: checked with 1
        EnvConfig.validate(self if self.num_envs is not None else dataclasses.replace(self, num_envs=1))


def usable_cores() -> int:
    """The cores this process may run on: its affinity mask (``taskset``, a cgroup's
    cpuset), not the machine's count, which overcounts a pinned job's share."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def check_step_timeout(timeout: float | None, workers: int) -> None:
    """ValueError naming --env-step-timeout unless it is > 0 and, when finite, has env
    workers to apply to."""
    if timeout is None:
        return
    if not timeout > 0:
        raise ValueError(f"{flag('env_step_timeout')} must be > 0, got {timeout}")
    if workers < 1 and math.isfinite(timeout):
        raise ValueError(f"{flag('env_step_timeout')} needs {flag('env_workers')} >= 1 "
                         "(an env stepped in the actor's own process cannot be interrupted)")


def effective_step_timeout(timeout: float | None, workers: int) -> float | None:
    """What ``--env-step-timeout`` means with ``--env-workers``: seconds, or None (no limit)."""
    if workers < 1:
        return None
    if timeout is None:
        return DEFAULT_ENV_STEP_TIMEOUT
    return timeout if math.isfinite(timeout) else None


def _at_least(config, name: str, low: int) -> None:
    if getattr(config, name) < low:
        raise ValueError(f"{flag(name)} must be >= {low}, got {getattr(config, name)}")


def check_device(device: str) -> None:
    """ValueError naming --device unless it exists on this machine."""
    if device in ("auto", "cpu"):
        return
    if not (device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit())):
        raise ValueError(f"{flag('device')} must be auto, cpu, cuda or cuda:N, got {device!r}")
    import torch

    if not torch.cuda.is_available():
        raise ValueError(f"{flag('device')} {device}: this machine has no CUDA device "
                         "(use --device cpu or auto)")
    index = int(device[5:]) if ":" in device else 0
    if index >= torch.cuda.device_count():
        raise ValueError(f"{flag('device')} {device}: only {torch.cuda.device_count()} CUDA device(s)")


def check_listen_address(address: str) -> None:
    """ValueError naming --listen-address unless it is an IP address of this machine
    (one a socket can bind to)."""
    try:
        socket.inet_aton(address)
    except OSError:
        raise ValueError(f"{flag('listen_address')} {address!r} is not an IPv4 address") from None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, 0))
        except OSError:
            raise ValueError(f"{flag('listen_address')} {address!r} is not an address of this "
                             "machine") from None


def resolve_device(device: str):
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)
