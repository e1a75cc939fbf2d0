"""Checkpoint cost and memory of a full replay buffer: resident memory after filling,
save, load and restore seconds, file bytes, peak memory while restoring.

Run: ``python -m experiments.bench.components.checkpoint [--quick] [--cases ...] [--dir DIR]``.
One JSON line per case:

* ``atari-1m`` and ``atari-100k``: a PrioritizedReplayBuffer of 1M (100k) Atari
  transitions (4x84x84 uint8 stacks, ``--n-step`` windows, 3 by default; 10 is DrQ's,
  where obs and next_obs share no frame) with shared frames, added as 16
  envs' interleaved streams of distinct frames (none repeats, unlike a real game's:
  the pool's worst case for a stream), so the pool holds about one frame per
  transition;
* ``cartpole-100k``: the same buffer type with CartPole-sized rows, no frame sharing.

``resident_mb`` is what filling the buffer added to this process's resident memory
(``VmRSS``; the frames generated for it are made chunk by chunk and dropped);
``frames`` the distinct frames the pool holds. ``save_s`` is ``save_checkpoint`` of
``{"replay": buffer.state_dict(), "rng": ...}`` (state_dict copies nothing), fsyncs
included; ``load_s`` is ``load_checkpoint`` (weights-only unpickle of a memory-mapped
file); ``restore_s`` is ``load_state_dict`` into a fresh buffer (copied into its
columns and pool, counts and trees rebuilt); ``restore_peak_mb`` is the most resident
memory of the process while loading and restoring, the original buffer freed first
(``VmHWM``, reset before: it counts the mapped file's pages read), and
``restore_peak_anon_mb`` the most of it that is not the file's (``RssAnon``, sampled). ``identical`` says the restored buffer drew the same sample
as the original. ``atari-1m`` needs about 8 GB of memory and free disk in ``--dir``;
``--quick`` uses 2,000 slots.
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from experiments.bench.tools.emit import emit
from experiments.bench.tools.memory import PeakMemory, status_mb
from rlpar.buffers import PrioritizedReplayBuffer, SharedFrames
from rlpar.checkpoint import load_checkpoint, restore_rng_state, rng_state, save_checkpoint

STACK, SIDE = 4, 84
CHUNK, ENVS = 256, 16


def fill_atari(capacity: int, rng: np.random.Generator, n_step: int = 3) -> PrioritizedReplayBuffer:
    """ENVS streams of distinct frames, one step of every env per add (as an actor's
    vector env adds them): obs = frames t..t+3 of its env, next_obs ``n_step`` frames
    on, in the layout the Ape-X job gives them."""
    buf = PrioritizedReplayBuffer(capacity=capacity, seed=0, shared_frames=SharedFrames.for_steps(n_step, stack=STACK))
    window = np.arange(STACK)
    steps = -(-capacity // ENVS)
    tail = np.zeros((ENVS, STACK + n_step - 1, SIDE, SIDE), np.uint8)  # each env's newest frames
    for start in range(0, steps, CHUNK // ENVS):
        t = np.arange(start, min(start + CHUNK // ENVS, steps))
        fresh = rng.integers(0, 256, (ENVS, t.size, SIDE, SIDE), dtype=np.uint8)
        frames = np.concatenate([tail, fresh], axis=1)  # env, step - start + STACK + n_step - 1
        at = t - start
        obs = frames[:, at[:, None] + window]  # env, step, stack
        nxt = frames[:, at[:, None] + window + n_step]
        tail = frames[:, -(STACK + n_step - 1):].copy()
        n = t.size * ENVS
        buf.add(
            {
                "obs": obs.transpose(1, 0, 2, 3, 4).reshape(n, STACK, SIDE, SIDE),
                "action": np.repeat(t % 6, ENVS).astype(np.int64),
                "reward": rng.standard_normal(n).astype(np.float32),
                "next_obs": nxt.transpose(1, 0, 2, 3, 4).reshape(n, STACK, SIDE, SIDE),
                "terminated": np.zeros(n, np.bool_),
            },
            priorities=rng.random(n) + 0.01,
        )
    return buf


def fill_cartpole(capacity: int, rng: np.random.Generator) -> PrioritizedReplayBuffer:
    buf = PrioritizedReplayBuffer(capacity=capacity, seed=0)
    for start in range(0, capacity, CHUNK):
        n = min(CHUNK, capacity - start)
        buf.add(
            {
                "obs": rng.standard_normal((n, 4)).astype(np.float32),
                "action": rng.integers(0, 2, n),
                "reward": np.ones(n, np.float32),
                "next_obs": rng.standard_normal((n, 4)).astype(np.float32),
                "terminated": rng.random(n) < 0.01,
            },
            priorities=rng.random(n) + 0.01,
        )
    return buf


CASES: dict[str, tuple[Callable, int, int]] = {
    # name: (fill, capacity, --quick capacity)
    "atari-1m": (fill_atari, 1_000_000, 2_000),
    "atari-100k": (fill_atari, 100_000, 2_000),
    "cartpole-100k": (fill_cartpole, 100_000, 2_000),
}
DEFAULT_CASES = ("atari-100k", "cartpole-100k")  # atari-1m when asked: 8 GB, minutes


def reset_peak() -> None:
    """Start VmHWM again from the current resident size (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _trim_heap() -> None:
    """Return the C heap's free pages to the system (glibc's ``malloc_trim``; a no-op elsewhere)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError, TypeError):
        pass


def measure(case: str, capacity: int, directory: Path, *, n_step: int = 3) -> dict:
    fill = CASES[case][0]
    rng = np.random.default_rng(0)
    gc.collect()
    _trim_heap()  # freed pages the allocator still holds would leave the baseline and make the delta negative
    before = status_mb("self", "VmRSS")
    atari = fill is fill_atari
    buf = fill_atari(capacity, rng, n_step) if atari else fill(capacity, rng)
    gc.collect()
    resident_mb = status_mb("self", "VmRSS") - before
    frames = None if buf.storage.frames is None else buf.storage.frames.live
    sample = buf.sample(64)  # priorities not all equal: update some
    buf.update_priorities(sample.indices, rng.random(64) * 3 + 0.01)
    shared = buf.storage.shared

    t0 = time.perf_counter()
    path = save_checkpoint(
        directory, {"replay": buf.state_dict(), "rng": rng_state()}, kind="bench",
        step=capacity, keep=1,
    )
    save_s = time.perf_counter() - t0
    expected = buf.sample(32)  # the saved RNG state draws this next
    del buf, sample  # make room: the loaded state and a fresh buffer come next
    gc.collect()
    reset_peak()

    # The resident pages that are not the checkpoint file's (which the kernel can drop
    # and read again), sampled every 20 ms.
    anon = PeakMemory(os.getpid(), interval_s=0.02, measure=lambda pid: status_mb(pid, "RssAnon")).start()
    t0 = time.perf_counter()
    state, _ = load_checkpoint(path, kind="bench")
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    back = PrioritizedReplayBuffer(capacity=capacity, seed=1, shared_frames=shared)
    back.load_state_dict(state["replay"])
    restore_rng_state(state["rng"])
    restore_s = time.perf_counter() - t0
    anon.sample()  # the end state too, whatever the sampling interval
    restore_peak_anon_mb = anon.stop()
    restore_peak_mb = status_mb("self", "VmHWM")
    got = back.sample(32)
    identical = bool(
        np.array_equal(got.indices, expected.indices)
        and all(np.array_equal(got.batch[k], expected.batch[k]) for k in got.batch)
    )
    return {
        "bench": "checkpoint",
        "case": case,
        "capacity": capacity,
        "n_step": n_step if atari else None,
        "resident_mb": round(resident_mb),
        "frames": frames,
        "save_s": round(save_s, 3),
        "load_s": round(load_s, 3),
        "restore_s": round(restore_s, 3),
        "restore_peak_mb": round(restore_peak_mb),
        "restore_peak_anon_mb": None if restore_peak_anon_mb is None else round(restore_peak_anon_mb),
        "bytes": path.stat().st_size,
        "identical": identical,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000-slot buffers (smoke test)")
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(DEFAULT_CASES))
    parser.add_argument("--n-step", type=int, default=3,
                        help="the Atari cases' transitions span this many steps (DrQ: 10)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to write (default: a temporary directory, removed after)")
    args = parser.parse_args(argv)
    if args.n_step < 1:
        parser.error(f"--n-step must be >= 1, got {args.n_step}")
    for case in args.cases:
        directory = Path(tempfile.mkdtemp(prefix="rlpar-ckpt-bench-", dir=args.dir))
        try:
            capacity = CASES[case][2 if args.quick else 1]
            emit(measure(case, capacity, directory, n_step=args.n_step))
        finally:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
