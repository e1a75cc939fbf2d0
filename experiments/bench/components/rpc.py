"""RpcGroup overhead over raw ``torch.distributed.rpc``, measured side by side.

Two local ranks; rank 1 hosts the services, rank 0 measures. Cases:

* ``call_latency``: round trip of a small ``group.call`` (p50/p99) vs ``rpc.rpc_sync``;
* ``pipelined_calls``: calls/s with ``depth`` ``call_async`` calls in flight vs
  ``rpc.rpc_async``;
* ``tensor_1MB`` / ``tensor_64MB``: MB/s sending a float32 tensor to a sink that
  returns its size, vs ``rpc.rpc_sync`` to the same sink.

Each metric is measured in alternating rounds (rlpar, raw, rlpar, raw, ...) so machine
noise hits both alike. ``overhead_ratio`` is rlpar's cost per operation over raw's
(p50 latency, 1/rate): 1.10 means the group layer adds 10 %.

Run: ``python -m experiments.bench.components.rpc [--quick]``; one JSON line per result.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass

import torch
import torch.distributed.rpc as rpc

from experiments.bench.tools.emit import emit
from rlpar.distributed import World, launch


@dataclass(frozen=True)
class Plan:
    latency_calls: int
    pipelined_calls: int
    depth: int
    tensor_repeats: dict[str, int]
    rounds: int


FULL = Plan(latency_calls=2000, pipelined_calls=4000, depth=32,
            tensor_repeats={"1MB": 50, "64MB": 4}, rounds=3)
QUICK = Plan(latency_calls=100, pipelined_calls=200, depth=16,
             tensor_repeats={"1MB": 5, "64MB": 1}, rounds=1)
SIZES = {"1MB": 1 << 20, "64MB": 64 << 20}


def echo(x):
    return x


def sink(t: torch.Tensor) -> int:
    return t.numel()


def _latencies(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def _pipelined(start_call, n: int, depth: int) -> float:
    """Calls/s keeping ``depth`` calls in flight."""
    begin = time.perf_counter()
    inflight = []
    for _ in range(n):
        inflight.append(start_call())
        if len(inflight) >= depth:
            inflight.pop(0).wait()
    for fut in inflight:
        fut.wait()
    return n / (time.perf_counter() - begin)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _measure(plan: Plan, group, host: str) -> list[dict]:
    small = torch.zeros(4)
    impls = {
        "rlpar": dict(
            call=lambda: group.call("echo", small),
            start=lambda: group.call_async("echo", small),
            send=lambda t: group.call("sink", t),
        ),
        "torch_rpc_raw": dict(
            call=lambda: rpc.rpc_sync(host, echo, args=(small,)),
            start=lambda: rpc.rpc_async(host, echo, args=(small,)),
            send=lambda t: rpc.rpc_sync(host, sink, args=(t,)),
        ),
    }
    for ops in impls.values():  # warm up connections, caches, allocator
        for _ in range(20):
            ops["call"]()
    lat = {k: [] for k in impls}
    rate = {k: [] for k in impls}
    mbs = {(k, s): [] for k in impls for s in SIZES}
    tensors = {s: torch.ones(n // 4) for s, n in SIZES.items()}
    for _ in range(plan.rounds):
        for name, ops in impls.items():
            lat[name] += _latencies(ops["call"], plan.latency_calls // plan.rounds)
            rate[name].append(_pipelined(ops["start"], plan.pipelined_calls // plan.rounds,
                                         plan.depth))
            for size, t in tensors.items():
                reps = plan.tensor_repeats[size]
                begin = time.perf_counter()
                for _ in range(reps):
                    assert ops["send"](t) == t.numel()
                mbs[(name, size)].append(reps * SIZES[size] / 2**20 / (time.perf_counter() - begin))
    rows = []
    raw_p50 = _quantile(lat["torch_rpc_raw"], 0.5)
    for name in impls:
        p50 = _quantile(lat[name], 0.5)
        rows.append(dict(case="call_latency", impl=name, p50_us=round(p50 * 1e6, 1),
                         p99_us=round(_quantile(lat[name], 0.99) * 1e6, 1),
                         calls=len(lat[name]), overhead_ratio=round(p50 / raw_p50, 3)))
    best = {name: max(v) for name, v in rate.items()}
    for name in impls:
        rows.append(dict(case="pipelined_calls", impl=name, depth=plan.depth,
                         calls_per_s=round(best[name], 1),
                         overhead_ratio=round(best["torch_rpc_raw"] / best[name], 3)))
    for size in SIZES:
        best = {name: max(mbs[(name, size)]) for name in impls}
        for name in impls:
            rows.append(dict(case=f"tensor_{size}", impl=name, mb_per_s=round(best[name], 1),
                             overhead_ratio=round(best["torch_rpc_raw"] / best[name], 3)))
    return rows


def bench_entry(plan: dict) -> list[dict] | None:
    torch.set_num_threads(1)
    plan = Plan(**plan)
    with World.from_env(rpc_timeout=120) as world:
        group = world.create_rpc_group("bench", world.names)
        if world.rank == 1:
            group.register("echo", echo)
            group.register("sink", sink)
        group.barrier(timeout=120)
        rows = _measure(plan, group, world.names[1]) if world.rank == 0 else None
        group.barrier(timeout=600)
        return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    args = parser.parse_args(argv)
    plan = QUICK if args.quick else FULL
    # By module name, not __main__: ranks must resolve echo/sink by reference.
    from experiments.bench.components.rpc import bench_entry as entry

    rows = launch(entry, nprocs=2, args=(asdict(plan),), timeout=900)[0]
    for row in rows:
        emit({"bench": "rpc", "quick": args.quick, **row})


if __name__ == "__main__":
    main()
