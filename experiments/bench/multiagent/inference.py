"""Time per joint action and per MADDPG update in every agent-parallel mode.

``python -m experiments.bench.multiagent.inference [--quick] [--torch-threads N] [--ops update]``

Cases: 3, 8 and 16 agents; hidden 64 and 256; batch 1 and 1024 (env copies for
acting, sample size for updating); modes loop, threads, jit_fork, batched (bmm)
and batched_vmap, all in one run, on CPU and on CUDA when available. Agents look
like simple_spread's (obs 6n, 5 discrete actions, critics see everyone). Each
result is one JSON line; each case ends with a line comparing the default mode
(``auto``) with ``threads`` and ``loop``.

Every mode runs under the same intra-op thread budget (``--torch-threads``,
default: all cores), so ``threads`` (a pool fanning agents out over the cores)
and the single-call modes get the same hardware. Update lines carry the matmul
FLOPs one MADDPG update needs (``gflop``, counted for the batched algorithm,
which skips the input gradients nobody uses) and ``gflops`` = that / time: when
two modes both run near the box's matmul peak, neither can be 2x the other.

By default every mode is timed in its own process (``--one-mode``), as a user
runs one mode: in one shared process the threads a mode leaves behind (the
``threads`` pool, each pool thread's OpenMP team) slowed the others, e.g. ``auto``
acting at 8 agents, hidden 64, batch 1024 took 2.7 ms alone and 6.5 ms after
``threads`` had run. ``--shared-process`` times them in one process, taking turns
(load bursts then hit all modes alike; ``--quick`` uses it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from algorithms.maddpg import MADDPG, AgentSpec, MADDPGConfig
from experiments.bench.tools.emit import emit

MODES = ("loop", "threads", "jit_fork", "batched", "batched_vmap")
_ROOT = Path(__file__).resolve().parents[2]


def _calls_per_round(fn, *, min_time: float, sync) -> int:
    fn()
    sync()
    calls = 1
    while True:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        if time.perf_counter() - start >= min_time / 4 or calls >= 1 << 14:
            break
        calls *= 2
    return max(1, int(calls * min_time / max(time.perf_counter() - start, 1e-9)))


def _round(fn, calls: int, sync) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - start) / calls


def _timed_interleaved(fns: dict, *, min_time: float, repeats: int, sync) -> dict:
    """Best seconds per call for each function over ``repeats`` rounds, the modes
    taking turns within each round so that load from other processes hits all of
    them alike; the minimum is the least disturbed round. The order rotates every
    round: a mode leaves threads behind (``threads``' pool, each pool thread's own
    OpenMP team, still spinning for a while) that slow whichever mode runs next, so
    a fixed order would always charge that cost to the same mode (``auto``, last,
    measured 2.8 ms per act at 8 agents, hidden 64, batch 1024, against 2.1 ms alone)."""
    calls = {k: _calls_per_round(fn, min_time=min_time, sync=sync) for k, fn in fns.items()}
    best = {k: float("inf") for k in fns}
    keys = list(fns)
    for r in range(repeats):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            best[k] = min(best[k], _round(fns[k], calls[k], sync))
    return best


def _build(mode: str, n: int, hidden: int, device: str) -> MADDPG:
    impl = "vmap" if mode == "batched_vmap" else "bmm"
    agents = [AgentSpec(obs_dim=6 * n, action_dim=5, discrete=True) for _ in range(n)]
    config = MADDPGConfig(mode="batched" if mode == "batched_vmap" else mode, batched_impl=impl,
                          hidden=(hidden, hidden), seed=0)
    return MADDPG(agents=agents, config=config, device=device)


def _mlp_flops(sizes: list[int]) -> tuple[int, int]:
    """(all layers, first layer) multiply-add FLOPs of one forward pass per sample."""
    layers = [2 * a * b for a, b in zip(sizes[:-1], sizes[1:])]
    return sum(layers), layers[0]


def update_gflop(n: int, hidden: int, batch: int, obs: int, act: int) -> float:
    """Matmul GFLOP of one MADDPG update (n actors, n centralized critics).

    Forward F; backward with weight gradients costs F again, input gradients F
    minus the first layer (nobody needs d/d(observations)). Target actors and
    critics: F. Critic step: 3F - first. Actor step: actors 3F - first; the
    critics on the actors' actions: F (forward) + F - first (input gradients,
    no weight gradients) + the A-wide slot product."""
    actor, actor_first = _mlp_flops([obs, hidden, hidden, act])
    critic, critic_first = _mlp_flops([n * (obs + act), hidden, hidden, 1])
    per_agent = (actor + critic  # targets
                 + 3 * critic - critic_first  # critic step
                 + 3 * actor - actor_first  # actor step: actors
                 + 2 * critic - critic_first + 2 * 2 * act * hidden)  # actor step: critics
    return n * batch * per_agent / 1e9


def matmul_peak_gflops(device: str, *, size: int = 1024, min_time: float = 0.2) -> float:
    """Best GFLOP/s of one ``size``-cubed float32 matrix product over ``min_time``
    seconds of tries: the ceiling an update's matmuls can approach under the
    current thread budget (and load)."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    torch.mm(a, b)
    best, spent = float("inf"), 0.0
    while spent < min_time:
        sync()
        start = time.perf_counter()
        torch.mm(a, b)
        sync()
        took = time.perf_counter() - start
        best, spent = min(best, took), spent + took
    return 2 * size**3 / best / 1e9


def time_modes(*, device: str, n: int, hidden: int, batch: int, min_time: float, repeats: int,
               modes: tuple[str, ...], ops: tuple[str, ...]) -> list[dict]:
    """One line per (op, mode) with the best ms per call; ``modes`` may include "auto",
    whose lines also name the modes it chose."""
    rng = np.random.default_rng(0)
    obs = rng.standard_normal((batch, n, 6 * n)).astype(np.float32)
    sample = {"obs": obs, "next_obs": rng.standard_normal((batch, n, 6 * n)).astype(np.float32),
              "action": rng.integers(0, 5, (batch, n)), "reward": rng.standard_normal((batch, n)).astype(np.float32),
              "terminated": np.zeros((batch, n), np.float32)}
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    lines = []
    algos = {mode: _build(mode, n, hidden, device) for mode in modes}
    gflop = update_gflop(n, hidden, batch, 6 * n, 5)
    for op in ops:
        fns = {mode: (lambda a=a: a.act(obs)) if op == "act" else (lambda a=a: a.update(sample))
               for mode, a in algos.items()}
        best = _timed_interleaved(fns, min_time=min_time, repeats=repeats, sync=sync)
        for mode, seconds in best.items():
            line = {"bench": "multiagent_inference", "impl": "rlpar", "device": device, "op": op,
                    "agents": n, "hidden": hidden, "batch": batch, "mode": mode, "ms": round(seconds * 1e3, 4)}
            if op == "update":
                line |= {"gflop": float(f"{gflop:.4g}"), "gflops": float(f"{gflop / seconds:.4g}")}
            if mode == "auto":
                line["auto_mode"] = f"actors={algos[mode].mode},critics={algos[mode].critic_mode}"
            lines.append(line)
    for algo in algos.values():
        algo.close()
    return lines


def _time_in_own_process(mode: str, *, device: str, n: int, hidden: int, batch: int, min_time: float,
                         repeats: int, ops: tuple[str, ...]) -> list[dict]:
    """``time_modes`` for one mode in a fresh interpreter, where no other mode's threads exist."""
    argv = [sys.executable, "-m", "experiments.bench.multiagent.inference", "--one-mode", mode,
            "--devices", device, "--agents", str(n), "--hidden", str(hidden), "--batch", str(batch),
            "--min-time", str(min_time), "--repeats", str(repeats), "--torch-threads", str(torch.get_num_threads()),
            "--ops", *ops]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=_ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"timing mode {mode!r} in its own process failed:\n{proc.stderr[-3000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def run_case(*, device: str, n: int, hidden: int, batch: int, min_time: float, repeats: int,
             modes: tuple[str, ...], ops: tuple[str, ...] = ("act", "update"), isolate: bool = False) -> list[dict]:
    """Every mode's lines, then one summary line per op comparing ``auto`` with
    ``threads`` and ``loop``. ``isolate``: each mode in its own process."""
    every = (*modes, "auto")
    case = dict(device=device, n=n, hidden=hidden, batch=batch, min_time=min_time, repeats=repeats, ops=ops)
    if isolate:
        lines = [line for mode in every for line in _time_in_own_process(mode, **case)]
    else:
        lines = time_modes(modes=every, **case)
    for op in ops:
        by_mode = {line["mode"]: line for line in lines if line["op"] == op}
        auto = by_mode.pop("auto")
        summary = {"bench": "multiagent_inference", "impl": "rlpar", "device": device, "op": op,
                   "agents": n, "hidden": hidden, "batch": batch, "summary": True, "auto_mode": auto["auto_mode"],
                   "auto_ms": auto["ms"], "isolated": isolate}
        for ref in ("threads", "loop"):
            if ref in by_mode:
                summary[f"speedup_vs_{ref}"] = round(by_mode[ref]["ms"] / auto["ms"], 3)
        summary["ratio_vs_best_peer"] = round(auto["ms"] / min(x["ms"] for x in by_mode.values()), 3)
        lines.append(summary)
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny smoke run (seconds)")
    parser.add_argument("--torch-threads", type=int, default=os.cpu_count() or 1,
                        help="torch intra-op threads for every mode (default: all cores)")
    parser.add_argument("--ops", nargs="+", default=["act", "update"], choices=["act", "update"])
    parser.add_argument("--agents", type=int, nargs="+", default=[3, 8, 16])
    parser.add_argument("--hidden", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 1024])
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--min-time", type=float, default=0.2, help="seconds per timing round")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds; the best is kept")
    parser.add_argument("--devices", nargs="+", default=None, help="default: cpu, and cuda if available")
    parser.add_argument("--shared-process", action="store_true",
                        help="time all modes in this process, taking turns (default: each mode in its own "
                             "process; --quick implies this)")
    parser.add_argument("--one-mode", choices=(*MODES, "auto"), help=argparse.SUPPRESS)  # child of an isolated run
    args = parser.parse_args(argv)
    if args.one_mode is not None:
        torch.set_num_threads(args.torch_threads)
        for line in time_modes(device=args.devices[0], n=args.agents[0], hidden=args.hidden[0], batch=args.batch[0],
                               min_time=args.min_time, repeats=args.repeats, modes=(args.one_mode,),
                               ops=tuple(args.ops)):
            emit(line)
        return
    if args.torch_threads < 1:
        parser.error(f"--torch-threads must be >= 1, got {args.torch_threads}")
    if args.quick:
        args.agents, args.hidden, args.batch = [3], [32], [1]
        args.min_time, args.repeats, args.shared_process = 0.005, 1, True
    devices = args.devices or (["cpu"] + (["cuda"] if torch.cuda.is_available() else []))
    torch.set_num_threads(args.torch_threads)
    peaks = {device: round(matmul_peak_gflops(device, min_time=0.02 if args.quick else 0.5), 1) for device in devices}
    emit({"bench": "multiagent_inference", "config": True, "torch_threads": args.torch_threads,
          "torch": torch.__version__, "devices": devices, "matmul_peak_gflops": peaks,
          "isolated": not args.shared_process})
    for device in devices:
        for n in args.agents:
            for hidden in args.hidden:
                for batch in args.batch:
                    for line in run_case(device=device, n=n, hidden=hidden, batch=batch, min_time=args.min_time,
                                         repeats=args.repeats, modes=tuple(args.modes), ops=tuple(args.ops),
                                         isolate=not args.shared_process):
                        emit(line)


if __name__ == "__main__":
    main()
