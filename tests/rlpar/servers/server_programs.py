"""Entry points run in separate ranks by the server tests (importable by children)."""

from __future__ import annotations

import json
import os
import pickle
import sys
import time

import torch
from torch import nn

from rlpar.distributed import World
from rlpar.errors import PeerUnavailable
from rlpar.servers import (
    KeyValueServer,
    PushPullGradServer,
    PushPullModelServer,
    ShardedGradServer,
    VersionConflict,
)

TIMEOUT = 30.0


class Vec(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(3))


class Parts(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros(4))
        self.b = nn.Parameter(torch.zeros(3))
        self.c = nn.Parameter(torch.zeros(2))
        self.register_buffer("count", torch.tensor(5))


SHARD_GRADS = {"a": torch.ones(4), "b": torch.full((3,), 2.0), "c": torch.full((2,), 3.0)}


def sgd(params):
    return torch.optim.SGD(params, lr=1.0)


def _caught(fn, *args):
    try:
        fn(*args)
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return None


def pull_version(accessor):
    """A service run on another rank with an unpickled accessor."""
    return accessor.pull(-1)[1]


def servers_everywhere(cas_rounds: int, pushes: int):
    """Three ranks: rank 0 hosts every server, all ranks use them concurrently."""
    torch.set_num_threads(1)
    with World.from_env(rpc_timeout=TIMEOUT) as world:
        g = world.create_rpc_group("servers", world.names)
        rank, out = world.rank, {}
        if rank == 0:
            KeyValueServer.host(g, "kv", history=cas_rounds + 5)
            params = PushPullModelServer.host(g, "params")
            params.push({"w": torch.arange(1000.0)})
            PushPullGradServer.host(g, "async", model=Vec(), optimizer_factory=sgd)
            PushPullGradServer.host(
                g, "reduce", model=Vec(), optimizer_factory=sgd, mode="reduce", reduce_batch_size=2
            )
            PushPullGradServer.host(
                g,
                "stale",
                model=Vec(),
                optimizer_factory=sgd,
                max_staleness=0,
                staleness_policy="drop",
            )
            PushPullGradServer.host(g, "nan", model=Vec(), optimizer_factory=sgd, max_non_finite=2)
        if rank in (0, 1):
            ShardedGradServer.host(
                g, "big", shard=rank, num_shards=2, model=Parts(), optimizer_factory=sgd
            )
            ShardedGradServer.host(
                g, "bignan", shard=rank, num_shards=2, model=Parts(), optimizer_factory=sgd,
                max_non_finite=2,
            )
        if rank == 1:
            g.register("pull_version", pull_version)
        g.barrier(timeout=TIMEOUT)

        # Compare-and-set contest: every rank races to push each next version.
        kv = KeyValueServer.connect(g, "kv", timeout=TIMEOUT)
        wins = []
        while True:
            current = kv.version("k")
            if current >= cas_rounds - 1:
                break
            try:
                wins.append(kv.push("k", rank, current))
            except VersionConflict:
                pass
        out["wins"] = wins

        # Gradient workers (ranks 1, 2) push known gradients tagged with the
        # version they read.
        if rank in (1, 2):
            for name in ("async", "reduce"):
                grads = PushPullGradServer.connect(g, name, timeout=TIMEOUT)
                for _ in range(pushes):
                    grads.push_gradients(
                        {"w": torch.tensor([float(rank), 1.0, 0.0])}, grads.version
                    )
            big = ShardedGradServer.connect(g, "big", num_shards=2, timeout=TIMEOUT)
            version = -1
            for _ in range(pushes):
                pulled = big.pull(newer_than=version)
                if pulled is not None:
                    version = pulled[1]
                out.setdefault("big_accepted", []).append(big.push_gradients(SHARD_GRADS, version))
            if rank == 2:
                out["big_bad_key"] = _caught(big.push_gradients, {"zz": torch.ones(1)}, 0)
        g.barrier(timeout=TIMEOUT)

        if rank == 0:
            out["kv_values"] = [kv.pull("k", version=v) for v in range(cas_rounds)]
            for name in ("async", "reduce"):
                grads = PushPullGradServer.connect(g, name)
                state, version = grads.pull()
                out[name] = (state["w"].tolist(), version, grads.metrics())
            big = ShardedGradServer.connect(g, "big", num_shards=2)
            state, version = big.pull()
            out["big"] = ({k: v.tolist() for k, v in state.items()}, version, big.metrics())
            out["big_empty"] = big.pull(newer_than=version)
        if rank == 1:
            params = PushPullModelServer.connect(g, "params", timeout=TIMEOUT)
            state, version = params.pull(newer_than=-1)
            out["first_pull"] = (state["w"].sum().item(), version)
            out["empty_pulls"] = [params.pull(newer_than=0) for _ in range(20)]
            newest = kv.version("k")
            out["kv_pulls"] = (kv.pull("k", newer_than=newest), kv.pull("k", newer_than=newest - 1))
            out["stats"] = params.stats()
            out["bad_newer_than"] = _caught(params.pull, "0")
            out["old_version"] = _caught(params.push, {"w": torch.zeros(2)}, 0)
            out["pushed"] = params.push({"w": torch.ones(2)}, 7)
            kv.push("other", "x", None)
            out["conflict"] = _caught(kv.push, "other", "y", -1)
            stale = PushPullGradServer.connect(g, "stale", timeout=TIMEOUT)
            out["stale"] = [stale.push_gradients({"w": torch.ones(3)}, 0) for _ in range(3)]
            out["stale_metrics"] = stale.metrics()
            out["bad_grad"] = _caught(stale.push_gradients, {"nope": torch.ones(3)}, 0)
        if rank == 2:
            # NaN/inf never reach the parameters; the second in a row raises here.
            nan = {"w": torch.tensor([0.0, float("nan"), 1.0])}
            grads = PushPullGradServer.connect(g, "nan", timeout=TIMEOUT)
            out["nan_push"] = grads.push_gradients(nan, 0)
            out["nan_raised"] = _caught(grads.push_gradients, nan, 0)
            out["nan_then_good"] = grads.push_gradients({"w": torch.ones(3)}, 0)
            out["nan_metrics"] = grads.metrics()
            out["nan_state"] = grads.pull()[0]["w"].tolist()
            big = ShardedGradServer.connect(g, "bignan", num_shards=2, timeout=TIMEOUT)
            bad = {**SHARD_GRADS, "c": torch.tensor([1.0, float("inf")])}  # only shard 1's part
            out["bignan_push"] = big.push_gradients(bad, 0)
            out["bignan_raised"] = _caught(big.push_gradients, bad, 0)
            out["bignan_then_good"] = big.push_gradients(SHARD_GRADS, 0)
            metrics = big.metrics()
            out["bignan_metrics"] = (metrics["rejected_non_finite"],
                                     [m["version"] for m in metrics["shards"]])
        g.barrier(timeout=TIMEOUT)
        if rank == 0:
            params = PushPullModelServer.connect(g, "params")
            state, version = params.pull(newer_than=0)
            out["host_pull"] = (state["w"].tolist(), version)
            out["pickled"] = g.call("pull_version", params, timeout=TIMEOUT)
        g.barrier(timeout=TIMEOUT)
        return out


def _world_from_args(rank: int, port: int, timeout: float) -> World:
    os.environ.update(
        RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    return World.from_env(rpc_timeout=timeout)


def dead_host(role: str, port: int, workdir: str, timeout: float) -> None:
    """Run by the host-death test as ``python -c``: the host serves until killed;
    the client pulls, then reports what a pull raised while the host was stopped
    (SIGSTOP: silent, so the timeout must fire) and after it was SIGKILLed."""
    torch.set_num_threads(1)
    world = _world_from_args(0 if role == "host" else 1, port, TIMEOUT)
    g = world.create_rpc_group("g", world.names)
    if role == "host":
        PushPullModelServer.host(g, "params").push({"w": torch.zeros(10)})
    g.barrier(timeout=TIMEOUT)
    if role == "host":
        open(os.path.join(workdir, "host_ready"), "w").close()
        time.sleep(600)  # until SIGKILLed
        return
    params = PushPullModelServer.connect(g, "params", timeout=timeout)
    first = params.pull()[1]
    open(os.path.join(workdir, "client_ready"), "w").close()
    result = {"first": first}
    for phase in ("stopped", "killed"):
        while not os.path.exists(os.path.join(workdir, f"host_{phase}")):
            time.sleep(0.01)
        start = time.monotonic()
        try:
            params.pull(newer_than=0)
            outcome = "no error"
        except PeerUnavailable as exc:
            outcome = f"PeerUnavailable: {exc}"
        except Exception as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        result[phase] = {"outcome": outcome, "elapsed": time.monotonic() - start}
        open(os.path.join(workdir, f"client_{phase}"), "w").close()
    with open(os.path.join(workdir, "result.json"), "w") as f:
        json.dump(result, f)
    sys.stdout.flush()
    world.shutdown(graceful=False)
    os._exit(0)  # torch's RPC threads can make interpreter teardown slow


def dump(path, value):
    with open(path, "wb") as f:
        pickle.dump(value, f)
