"""Where this process's rank comes from: a launcher's environment. No torch import.

- torchrun (or :func:`rlpar.distributed.launch`): RANK, WORLD_SIZE, MASTER_ADDR,
  MASTER_PORT, LOCAL_RANK, LOCAL_WORLD_SIZE. They win when both are set (torchrun run
  by ``srun`` inherits Slurm's variables too).
- ``srun`` without torchrun, one task per process: SLURM_PROCID, SLURM_NTASKS,
  SLURM_LOCALID; the store on the first host of SLURM_STEP_NODELIST (else
  SLURM_JOB_NODELIST: rank 0 runs on the step's first node) unless MASTER_ADDR is set;
  its port MASTER_PORT, else :func:`rlpar.distributed.slurm.default_port` of
  SLURM_JOB_ID.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

from rlpar.distributed import slurm

TORCHRUN = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@dataclasses.dataclass(frozen=True)
class LauncherEnv:
    """This process's place in a launched world."""

    launcher: str  # "torchrun" (or rlpar's launch) or "srun"
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def from_environ(environ: Mapping[str, str] | None = None) -> LauncherEnv | None:
    """The launcher's description of this process, None when no launcher started it.
    ValueError naming the variable for a value that cannot be right; RuntimeError
    listing torchrun's variables that are missing when RANK and WORLD_SIZE are set."""
    env = os.environ if environ is None else environ
    if "RANK" in env and "WORLD_SIZE" in env:
        missing = [k for k in TORCHRUN if k not in env]
        if missing:
            raise RuntimeError(f"environment variables {missing} are not set (run under torchrun, "
                               "srun or rlpar.distributed.launch)")
        rank, size = _int(env, "RANK"), _int(env, "WORLD_SIZE")
        return _checked(LauncherEnv(
            "torchrun", rank, size, _int(env, "LOCAL_RANK", rank), _int(env, "LOCAL_WORLD_SIZE", size),
            env["MASTER_ADDR"], _int(env, "MASTER_PORT")))
    if not slurm.is_task(env):
        return None
    rank, size = _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS")
    return _checked(LauncherEnv(
        "srun", rank, size, _int(env, "SLURM_LOCALID", 0), _local_world_size(env, size),
        _slurm_master(env), _slurm_port(env)))


def _int(env: Mapping[str, str], key: str, default: int | None = None) -> int:
    raw = env.get(key)
    if raw is None:
        if default is None:
            raise RuntimeError(f"environment variable {key} is not set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {key} must be an integer, got {raw!r}") from None


def _checked(found: LauncherEnv) -> LauncherEnv:
    names = ("SLURM_NTASKS", "SLURM_PROCID") if found.launcher == "srun" else ("WORLD_SIZE", "RANK")
    if found.world_size < 1:
        raise ValueError(f"{names[0]} must be >= 1, got {found.world_size}")
    if not 0 <= found.rank < found.world_size:
        raise ValueError(f"{names[1]} must be in [0, {names[0]}={found.world_size}), got {found.rank}")
    if not 0 < found.master_port < 65536:
        raise ValueError(f"MASTER_PORT must be in 1..65535, got {found.master_port}")
    return found


def _slurm_master(env: Mapping[str, str]) -> str:
    if env.get("MASTER_ADDR"):
        return env["MASTER_ADDR"]
    for key in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        if env.get(key):
            try:
                return slurm.first_host(env[key])
            except ValueError as exc:
                raise ValueError(f"{key}: {exc} (set MASTER_ADDR to rank 0's address instead)") from None
    raise RuntimeError("srun task without SLURM_JOB_NODELIST or MASTER_ADDR: no host for the store")


def _slurm_port(env: Mapping[str, str]) -> int:
    if env.get("MASTER_PORT"):
        return _int(env, "MASTER_PORT")
    if not env.get("SLURM_JOB_ID"):
        raise RuntimeError("srun task without SLURM_JOB_ID or MASTER_PORT: no port for the store")
    return slurm.default_port(env["SLURM_JOB_ID"])


def _local_world_size(env: Mapping[str, str], size: int) -> int:
    raw = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
    node = env.get("SLURM_NODEID")
    if not raw or node is None:
        return size
    counts = slurm.tasks_per_node(raw)
    index = _int(env, "SLURM_NODEID")
    if not 0 <= index < len(counts):
        raise ValueError(f"SLURM_NODEID {index} is not a node of SLURM_STEP_TASKS_PER_NODE {raw!r}")
    return counts[index]
