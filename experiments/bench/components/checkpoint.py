"""Checkpoint cost of a full replay buffer: save, load and restore seconds, file bytes.

Run: ``python -m experiments.bench.components.checkpoint [--quick] [--dir DIR]``. One JSON line
per case:

* ``atari-100k``: a PrioritizedReplayBuffer of 100k Atari transitions (4x84x84 uint8
  stacks, 3-step windows) with shared frames, so each slot stores 7 frames;
* ``cartpole-100k``: the same buffer type with CartPole-sized rows, no frame sharing.

``save_s`` is ``save_checkpoint`` of ``{"replay": buffer.state_dict(), "rng": ...}``
(state_dict included: it copies nothing), fsyncs included; ``load_s`` is
``load_checkpoint`` (read + weights-only unpickle); ``restore_s`` is
``load_state_dict`` into a fresh buffer (copy into its columns, trees rebuilt).
``identical`` says the restored buffer drew the same sample as the original.
The atari case needs about 11 GB of memory (the buffer, then the loaded state and
a fresh buffer) and as much free disk in ``--dir``; ``--quick`` uses 2,000 slots.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from experiments.bench.tools.emit import emit
from rlpar.buffers import PrioritizedReplayBuffer, SharedFrames
from rlpar.checkpoint import load_checkpoint, restore_rng_state, rng_state, save_checkpoint

STACK, SIDE, SHIFT = 4, 84, 3
CHUNK = 256


def fill_atari(capacity: int, rng: np.random.Generator) -> PrioritizedReplayBuffer:
    """Chunks of one frame stream: obs = frames t..t+3, next_obs 3 frames on."""
    buf = PrioritizedReplayBuffer(capacity=capacity, seed=0, shared_frames=SharedFrames(shift=SHIFT))
    frames = rng.integers(0, 256, (capacity + STACK + SHIFT, SIDE, SIDE), dtype=np.uint8)
    window = np.arange(STACK)
    for start in range(0, capacity, CHUNK):
        t = np.arange(start, min(start + CHUNK, capacity))
        buf.add(
            {
                "obs": frames[t[:, None] + window],
                "action": (t % 6).astype(np.int64),
                "reward": rng.standard_normal(t.size).astype(np.float32),
                "next_obs": frames[t[:, None] + window + SHIFT],
                "terminated": t % 500 == 499,
            },
            priorities=rng.random(t.size) + 0.01,
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
    "atari-100k": (fill_atari, 100_000, 2_000),
    "cartpole-100k": (fill_cartpole, 100_000, 2_000),
}


def measure(case: str, capacity: int, directory: Path) -> dict:
    fill = CASES[case][0]
    rng = np.random.default_rng(0)
    buf = fill(capacity, rng)
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

    t0 = time.perf_counter()
    state, _ = load_checkpoint(path, kind="bench")
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    back = PrioritizedReplayBuffer(capacity=capacity, seed=1, shared_frames=shared)
    back.load_state_dict(state["replay"])
    restore_rng_state(state["rng"])
    restore_s = time.perf_counter() - t0
    got = back.sample(32)
    identical = bool(
        np.array_equal(got.indices, expected.indices)
        and all(np.array_equal(got.batch[k], expected.batch[k]) for k in got.batch)
    )
    return {
        "bench": "checkpoint",
        "case": case,
        "capacity": capacity,
        "save_s": round(save_s, 3),
        "load_s": round(load_s, 3),
        "restore_s": round(restore_s, 3),
        "bytes": path.stat().st_size,
        "identical": identical,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000-slot buffers (smoke test)")
    parser.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    parser.add_argument("--dir", type=Path, default=None,
                        help="where to write (default: a temporary directory, removed after)")
    args = parser.parse_args(argv)
    for case in args.cases:
        directory = Path(tempfile.mkdtemp(prefix="rlpar-ckpt-bench-", dir=args.dir))
        try:
            capacity = CASES[case][2 if args.quick else 1]
            emit(measure(case, capacity, directory))
        finally:
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
