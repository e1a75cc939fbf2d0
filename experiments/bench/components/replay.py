"""Replay buffer throughput: rlpar against cpprb and Tianshou, measured in one run.

Cases (issue 4): capacity 1,000,000 CartPole-sized transitions and 100,000
uint8 4x84x84 frame transitions; adds of 64 rows into a full buffer,
sample(256), update_priorities(256) and sample+update loops, alpha 0.6, beta 0.4.
Each figure is the best of a few rounds in which the libraries take turns;
"value" is throughput per second of this process's CPU time (fair on a shared
machine, where wall time includes waiting for a core), "wall_value" per second
of wall time; on a quiet machine the two agree. Peers that are not installed print a "skipped"
line. ``numpy-copy`` is a reference, not a peer: the bare row copies with no
priorities, for add and sample (``ratio_vs_numpy_copy`` on those lines); frame
adds and samples are memory-bound, so that is the floor a layout storing obs and
next_obs apart can approach.

Frames come as one env's consecutive steps (next_obs repeats obs's newest 3
frames, as with real frame stacking), and each library also runs in its
frame-sharing layout, as its own line: ``rlpar-shared-frames`` (``SharedFrames``:
each distinct frame once in a frame pool, one per transition of a stream; sampled as
5 frames a row, obs and next_obs overlapping views),
``cpprb-stack-compress`` (``next_of`` + ``stack_compress``) and
``tianshou-stack-num`` (``stack_num=4``, newest frame only, obs_next rebuilt).
Every sample hands back obs and next_obs as (256, 4, 84, 84) arrays.
``ratio_vs_best_peer`` compares a line with the best line of any other library.

Distributed figures: 2 shard processes + 1 sampler process on loopback
(TensorPipe): the sampler draws batches of 256 through a PrefetchingSampler and
sends priority updates back while both shards keep adding chunks of 64; reported
are batches/s, aggregate inserts/s and the sampler's wait fraction. ``--quick``
skips them (starting 3 torch processes alone exceeds the smoke-test budget on a
busy 2-core machine) unless ``--distributed`` is given.

    python -m experiments.bench.components.replay [--quick] [--cases cartpole,atari] [--distributed]
"""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from experiments.bench.tools.emit import emit

ALPHA, BETA, BATCH, CHUNK = 0.6, 0.4, 256, 64


@dataclass(frozen=True)
class Case:
    name: str
    capacity: int
    obs_shape: tuple[int, ...]
    obs_dtype: type
    iters: int  # timed iterations per repeat of sample/update loops


def make_chunk(case: Case, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    if case.obs_dtype is np.uint8:
        # n consecutive steps of one frame-stacked stream, as an Atari env gives
        # them: next_obs repeats obs's newest frames (what frame sharing relies on).
        k = case.obs_shape[0]
        frames = rng.integers(0, 255, size=(n + k, *case.obs_shape[1:]), dtype=np.uint8)
        steps = np.lib.stride_tricks.sliding_window_view(frames, k, axis=0)
        steps = np.moveaxis(steps, -1, 1)  # (n + 1, k, H, W) views
        obs, nxt = np.ascontiguousarray(steps[:n]), np.ascontiguousarray(steps[1 : n + 1])
    else:
        obs = rng.standard_normal((n, *case.obs_shape), dtype=np.float32)
        nxt = rng.standard_normal((n, *case.obs_shape), dtype=np.float32)
    return {
        "obs": obs,
        "action": rng.integers(0, 2, size=n).astype(np.int64),
        "reward": np.ones(n, dtype=np.float32),
        "next_obs": nxt,
        "terminated": rng.random(n) < 0.01,
    }


class Impl:
    """Adapter: the same four operations on every library."""

    name = ""
    library = ""  # lines of one library are never each other's peers
    frames_only = False  # a frame-sharing layout: run on the frames case only

    def add(self, chunk: dict[str, np.ndarray]) -> None: ...
    def sample(self):  # returns an opaque handle passed to update
        ...
    def update(self, handle, priorities: np.ndarray) -> None: ...

    def flush(self) -> None:
        """Finish deferred work so that timed adds include all of their cost."""


class Rlpar(Impl):
    name = library = "rlpar"

    def __init__(self, case: Case) -> None:
        from rlpar.buffers import PrioritizedReplayBuffer

        self.buf = PrioritizedReplayBuffer(
            capacity=case.capacity, alpha=ALPHA, beta=BETA, seed=0, **self.layout()
        )

    def layout(self) -> dict:
        return {}

    def add(self, chunk):
        self.buf.add(chunk)

    def sample(self):
        return self.buf.sample(BATCH).indices

    def update(self, handle, priorities):
        self.buf.update_priorities(handle, priorities)

    def flush(self):
        # Trees recompute parents of added ranges lazily, at the next read: count it.
        self.buf.sum_tree.flush()
        self.buf.min_tree.flush()


class RlparSharedFrames(Rlpar):
    """obs and next_obs stored once as 5 distinct frames (``SharedFrames``)."""

    name = "rlpar-shared-frames"
    frames_only = True

    def layout(self) -> dict:
        from rlpar.buffers import SharedFrames

        return {"shared_frames": SharedFrames()}


class Cpprb(Impl):
    name = library = "cpprb"

    def __init__(self, case: Case) -> None:
        import cpprb

        dt = np.uint8 if case.obs_dtype is np.uint8 else np.float32
        self.buf = cpprb.PrioritizedReplayBuffer(
            case.capacity,
            {
                "obs": {"shape": case.obs_shape, "dtype": dt},
                "act": {"shape": 1, "dtype": np.int64},
                "rew": {},
                "next_obs": {"shape": case.obs_shape, "dtype": dt},
                "done": {},
            },
            alpha=ALPHA,
            **self.layout(),
        )

    def layout(self) -> dict:
        return {}

    def add(self, chunk):
        self.buf.add(
            obs=chunk["obs"],
            act=chunk["action"],
            rew=chunk["reward"],
            next_obs=chunk["next_obs"],
            done=chunk["terminated"],
        )

    def sample(self):
        return self.buf.sample(BATCH, beta=BETA)["indexes"]

    def update(self, handle, priorities):
        self.buf.update_priorities(handle, priorities)


class CpprbStackCompress(Cpprb):
    """cpprb's frame sharing across consecutive adds: ``next_of="obs"`` stores no
    next_obs column, ``stack_compress="obs"`` one new frame per add. Both assume
    the rows arrive as one env's consecutive steps (the bench's chunks are)."""

    name = "cpprb-stack-compress"
    frames_only = True

    def layout(self) -> dict:
        return {"next_of": "obs", "stack_compress": "obs"}


class Tianshou(Impl):
    name = library = "tianshou"

    def __init__(self, case: Case) -> None:
        from tianshou.data import Batch, PrioritizedVectorReplayBuffer

        self.Batch = Batch
        self.buf = PrioritizedVectorReplayBuffer(
            case.capacity, CHUNK, alpha=ALPHA, beta=BETA, **self.layout()
        )
        self.ids = np.arange(CHUNK)

    def layout(self) -> dict:
        return {}

    def add(self, chunk):
        # One row per sub-buffer: Tianshou's vector buffer takes CHUNK env rows per add.
        n = len(chunk["obs"])
        for lo in range(0, n, CHUNK):
            sl = slice(lo, lo + CHUNK)
            self.buf.add(
                self.Batch(
                    obs=chunk["obs"][sl],
                    act=chunk["action"][sl],
                    rew=chunk["reward"][sl],
                    terminated=chunk["terminated"][sl],
                    truncated=np.zeros(CHUNK, dtype=bool),
                    obs_next=chunk["next_obs"][sl],
                ),
                buffer_ids=self.ids,
            )

    def sample(self):
        batch, indices = self.buf.sample(BATCH)
        return indices

    def update(self, handle, priorities):
        self.buf.update_weight(handle, priorities)


class TianshouStacked(Tianshou):
    """Tianshou's frame sharing: each env's sub-buffer keeps only the newest frame
    of every obs and rebuilds stacks (obs_next from the next step) on sampling."""

    name = "tianshou-stack-num"
    frames_only = True

    def layout(self) -> dict:
        return {"stack_num": 4, "ignore_obs_next": True, "save_only_last_obs": True}


class NumpyCopy(Impl):
    """Reference, not a peer: the bare copies every library must make (rows into a
    ring with numpy slice assignment; sample = ``np.take`` of uniform random rows
    into reused arrays), with no priorities. For frames, add and sample are
    memory-bound, and this line shows how close each library gets to that floor."""

    name = library = "numpy-copy"

    def __init__(self, case: Case) -> None:
        self.capacity, self.cursor = case.capacity, 0
        self.rng = np.random.default_rng(0)
        self.cols: dict[str, np.ndarray] = {}
        self.out: dict[str, np.ndarray] = {}

    def add(self, chunk):
        n = len(chunk["obs"])
        if not self.cols:
            self.cols = {k: np.empty((self.capacity, *v.shape[1:]), v.dtype) for k, v in chunk.items()}
            self.out = {k: np.empty((BATCH, *v.shape[1:]), v.dtype) for k, v in chunk.items()}
        end = self.cursor + n
        for k, col in self.cols.items():
            if end <= self.capacity:
                col[self.cursor : end] = chunk[k]
            else:
                head = self.capacity - self.cursor
                col[self.cursor :] = chunk[k][:head]
                col[: end - self.capacity] = chunk[k][head:]
        self.cursor = end % self.capacity

    def sample(self):
        slots = self.rng.integers(0, self.capacity, BATCH)
        for k, col in self.cols.items():
            col.take(slots, axis=0, out=self.out[k], mode="clip")
        return slots

    def update(self, handle, priorities):
        pass


REFERENCES = ("numpy-copy",)  # measured alongside, never counted as a peer
COPY_METRICS = ("add64_transitions_per_s", "sample256_per_s")  # what the reference measures

Ops = dict[str, tuple[Callable[[], None], int]]  # metric -> (timed function, units of work)


def prepare(impl: Impl, case: Case, rng: np.random.Generator) -> Ops:
    """Fill ``impl`` to capacity and return its timed operations."""
    pool = make_chunk(case, 1024, rng)  # fill with big chunks of a pool of random rows
    added = 0
    while added < case.capacity:
        impl.add(pool)
        added += 1024
    chunks = [make_chunk(case, CHUNK, rng) for _ in range(8)]
    n_add = max(8, case.iters)

    def adds():
        for i in range(n_add):
            impl.add(chunks[i & 7])
        impl.flush()

    prios = [rng.random(BATCH) * 2.0 for _ in range(8)]
    handles = [impl.sample() for _ in range(8)]

    def samples():
        for _ in range(case.iters):
            impl.sample()

    def updates():
        for i in range(case.iters):
            impl.update(handles[i & 7], prios[i & 7])

    def loops():
        for i in range(case.iters):
            impl.update(impl.sample(), prios[i & 7])

    return {
        "add64_transitions_per_s": (adds, n_add * CHUNK),
        "sample256_per_s": (samples, case.iters),
        "update256_per_s": (updates, case.iters),
        "sample_update_per_s": (loops, case.iters),
    }


def run_rounds(prepared: dict[str, Ops], repeats: int) -> dict[str, dict[str, tuple[float, float]]]:
    """Best (CPU-time rate, wall-clock rate) per impl and metric over ``repeats``
    rounds; within a round the impls take turns, so a burst of load from other
    processes hits them alike. CPU time is the fair figure on a shared machine
    (wall time there includes waiting for a core); on a quiet one they agree."""
    best: dict[str, dict[str, tuple[float, float]]] = {n: {} for n in prepared}
    for _ in range(repeats):
        for name, ops in prepared.items():
            for metric, (fn, count) in ops.items():
                c0, w0 = time.process_time(), time.perf_counter()
                fn()
                cpu, wall = time.process_time() - c0, time.perf_counter() - w0
                old = best[name].get(metric, (0.0, 0.0))
                best[name][metric] = (
                    max(old[0], count / max(cpu, 1e-9)),
                    max(old[1], count / wall),
                )
    return best


def merge_best(
    into: dict[str, dict[str, tuple[float, float]]], new: dict[str, dict[str, tuple[float, float]]]
) -> None:
    """Keep the best CPU-time and wall-clock rate per impl and metric."""
    for name, metrics in new.items():
        have = into.setdefault(name, {})
        for metric, (cpu, wall) in metrics.items():
            old = have.get(metric, (0.0, 0.0))
            have[metric] = (max(old[0], cpu), max(old[1], wall))


def dist_rank(case: Case, seconds: float, timeout: float, shared: bool) -> dict[str, float]:
    """One rank of the distributed benchmark: rank 0 samples, ranks 1 and 2 hold shards
    (with ``shared``, in the SharedFrames layout)."""
    from rlpar.buffers import DistributedPrioritizedReplayBuffer, PrefetchingSampler, SharedFrames
    from rlpar.distributed import World

    torch.set_num_threads(1)
    with World.from_env(rpc_timeout=timeout) as world:
        group = world.create_rpc_group("bench-replay", world.names)
        buf = DistributedPrioritizedReplayBuffer(
            group=group,
            name="bench",
            capacity=case.capacity,
            alpha=ALPHA,
            beta=BETA,
            shard_members=world.names[1:],
            timeout=timeout,
            seed=world.rank,
            shared_frames=SharedFrames() if shared else None,
        )
        rng = np.random.default_rng(world.rank)
        if world.rank > 0:
            pool = make_chunk(case, 1024, rng)
            for _ in range(-(-case.capacity // 1024)):
                buf.add(pool)
        group.barrier(timeout=timeout)
        out: dict[str, float] = {}
        if world.rank == 0:
            prios = rng.random(BATCH) + 0.1
            with PrefetchingSampler(buffer=buf, batch_size=BATCH, depth=2, timeout=timeout) as pre:
                pre.sample()  # warm up connections
                # Phase 1: shards idle. Phase 2: both shards insert meanwhile.
                for phase in ("idle", "inserting"):
                    if phase == "inserting":
                        world.store.set("bench/insert", "1")
                    waited0, n, t0 = pre.waited_s, 0, time.perf_counter()
                    while time.perf_counter() - t0 < seconds:
                        s = pre.sample()
                        buf.update_priorities(s.indices, prios)
                        n += 1
                    elapsed = time.perf_counter() - t0
                    out[f"batches_per_s_{phase}"] = n / elapsed
                    out[f"wait_fraction_{phase}"] = (pre.waited_s - waited0) / elapsed
            buf.flush_updates()
            world.store.set("bench/sampler_done", "1")
        else:
            chunks = [make_chunk(case, CHUNK, rng) for _ in range(8)]
            world.store.wait(["bench/insert"])
            n, t0 = 0, time.perf_counter()
            # Insert until the sampler is done, like an actor would.
            while not world.store.check(["bench/sampler_done"]):
                for i in range(16):
                    buf.add(chunks[i & 7])
                n += 16 * CHUNK
            out = {"inserts_per_s": n / (time.perf_counter() - t0)}
        group.barrier(timeout=timeout)
        return out


def run_distributed(case: Case, seconds: float, shared: bool = False) -> dict[str, float]:
    from experiments.bench.components import replay as this  # importable by name in the ranks
    from rlpar.distributed import launch

    results = launch(
        this.dist_rank,
        nprocs=3,
        args=(case, seconds, 60.0, shared),
        timeout=seconds + 240,
        env={"OMP_NUM_THREADS": "1"},
    )
    return {
        **{f"sample256_update_{k}": v for k, v in results[0].items()},
        "inserts_per_s_aggregate_while_sampling": results[1]["inserts_per_s"]
        + results[2]["inserts_per_s"],
    }


def rng0() -> np.random.Generator:
    return np.random.default_rng(0)


def peers_available() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name, module in (("cpprb", "cpprb"), ("tianshou", "tianshou.data")):
        try:
            __import__(module)
            out[name] = None
        except Exception as exc:  # any import failure means "skip this peer"
            out[name] = f"{module} not importable: {type(exc).__name__}: {exc}"
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (< 20 s)")
    parser.add_argument("--cases", default="cartpole,atari")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="also run the distributed figures in --quick mode",
    )
    parser.add_argument("--no-local", action="store_true", help="only the distributed figures")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    if args.quick:
        cases = {
            "cartpole": Case("cartpole", 2048, (4,), np.float32, 30),
            "atari": Case("atari", 512, (4, 84, 84), np.uint8, 5),
        }
        repeats = 1
    else:
        cases = {
            "cartpole": Case("cartpole", 1_000_000, (4,), np.float32, 2000),
            "atari": Case("atari", 100_000, (4, 84, 84), np.uint8, 100),
        }
        repeats = args.repeats
    skipped = peers_available()
    if args.quick and not skipped["tianshou"]:
        # Its segment tree JIT-compiles with numba on construction (~15 s of CPU).
        skipped["tianshou"] = "--quick: numba JIT compile alone exceeds the smoke budget"
    impls: list[type[Impl]] = [
        Rlpar,
        RlparSharedFrames,
        Cpprb,
        CpprbStackCompress,
        Tianshou,
        TianshouStacked,
        NumpyCopy,
    ]
    library = {cls.name: cls.library for cls in impls}
    for case_name in args.cases.split(","):
        case = cases[case_name]
        if args.no_local:
            continue
        live = []
        for cls in impls:
            if cls.frames_only and case.obs_dtype is not np.uint8:
                continue
            if skipped.get(cls.library):
                skip = {
                    "bench": "replay",
                    "impl": cls.name,
                    "case": case.name,
                    "skipped": skipped[cls.library],
                }
                emit(skip)
            else:
                live.append(cls)
        results: dict[str, dict[str, tuple[float, float]]] = {}
        if case.obs_dtype is np.uint8:
            # Frames: one buffer in memory at a time (100,000 x 2 x 28 KB each), so
            # every round rebuilds each library's buffer in turn: copying frames is
            # memory-bound, and a burst of memory traffic from other processes then
            # hits every library alike instead of whichever ran during it.
            for _ in range(repeats):
                for cls in live:
                    impl = cls(case)
                    merge_best(results, run_rounds({cls.name: prepare(impl, case, rng0())}, 1))
                    del impl
                    gc.collect()
        else:
            made = {cls.name: cls(case) for cls in live}
            prepared = {name: prepare(impl, case, rng0()) for name, impl in made.items()}
            results = run_rounds(prepared, repeats)
            del made, prepared
            gc.collect()
        for name, metrics in results.items():
            for metric, (cpu_rate, wall_rate) in metrics.items():
                copies = metric in COPY_METRICS and "numpy-copy" in results
                if name in REFERENCES and not copies:
                    continue  # the reference has no priorities to update
                peers = [
                    m[metric][0]
                    for n, m in results.items()
                    if library[n] != library[name] and n not in REFERENCES
                ]
                line = {
                    "bench": "replay",
                    "impl": name,
                    "case": case.name,
                    "capacity": case.capacity,
                    "metric": metric,
                    "value": round(cpu_rate, 1),
                    "timing": "cpu",
                    "wall_value": round(wall_rate, 1),
                    "ratio_vs_best_peer": round(cpu_rate / max(peers), 3) if peers else None,
                    "ratio_vs_numpy_copy": round(cpu_rate / results["numpy-copy"][metric][0], 3)
                    if copies
                    else None,
                    "torch_threads": args.threads,
                }
                emit(line)
    dist_cases = {  # per-shard capacity; frames kept small so 2 shards fit in memory
        "cartpole": Case("cartpole", 500_000, (4,), np.float32, 0),
        "atari": Case("atari", 10_000, (4, 84, 84), np.uint8, 0),
    }
    for case_name in args.cases.split(","):
        layouts = {"rlpar-distributed": False}
        if case_name == "atari":
            layouts["rlpar-distributed-shared-frames"] = True
        for impl, shared in layouts.items():
            print_distributed(impl, dist_cases[case_name], shared=shared, quick=args.quick,
                              run=args.distributed or not args.quick)


def print_distributed(impl: str, case: Case, *, shared: bool, quick: bool, run: bool) -> None:
    """The distributed figures of one layout as JSON lines (a "skipped" line if not ``run``)."""
    base = {"bench": "replay", "impl": impl, "case": case.name, "shards": 2, "samplers": 1}
    if not run:
        emit({**base, "skipped": "--quick (pass --distributed to run it)"})
        return
    if quick:
        small = 2048 if case.name == "cartpole" else 512
        case = Case(case.name, small, case.obs_shape, case.obs_dtype, 0)
    figures = run_distributed(case, 1.0 if quick else 10.0, shared)
    for metric, value in figures.items():
        line = {
            **base,
            "capacity_per_shard": case.capacity,
            "metric": metric,
            "value": round(value, 3),
            "ratio_vs_best_peer": None,
            "torch_threads": 1,
        }
        emit(line)

if __name__ == "__main__":
    main()
