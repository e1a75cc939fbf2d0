"""Every CUDA path of rlpar, checked in one go on a machine with a GPU:
``python -m experiments.bench.gpu.check`` (at most 8 minutes; on one H100, 104 s).

CI has no GPU, so these paths are tested there only through their CPU fallbacks; this
check is what runs them on CUDA (docs/gpu.md holds the last result). Each
case is a short run in a process of its own with its own timeout (a hung NCCL call
cannot stall the others) and prints one JSON line::

    {"case": ..., "ok": true, "seconds": ..., "device": ..., "detail": {...}}
    {"case": ..., "ok": false, "seconds": ..., "device": ..., "error": "..."}
    {"case": ..., "ok": null, "seconds": ..., "device": ..., "reason": "..."}   # skipped

Cases (:mod:`experiments.bench.gpu.cases`): ``nccl_learner_group`` (broadcast and
gradient averaging over NCCL), ``rpc_device_maps`` (CUDA tensors over RPC with
TensorPipe device maps), ``apex_gpu_learner``, ``td3_gpu_learner`` (Ape-X on
Pendulum-v1), ``impala_gpu_learner``, ``a3c_gpu_workers`` and ``maddpg_gpu`` (the jobs
with ``--device cuda``), ``ppo_gpu_learner``, ``pqn_gpu_learner`` and ``learners_2_one_gpu``
(Ape-X ``--learners 2``; it and PPO's look their job and flag up at run time, "not
available" on a tree without them). A
machine without CUDA skips every case (ok null). ``--cpu-smoke`` runs each case's CPU
fallback instead (gloo, CPU tensors, ``--device cpu``), in this process, in seconds:
what CI runs (``tests/experiments/bench/gpu/test_bench_gpu_check.py``). ``--cases a,b`` picks.
Exit status 1 if a case failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from experiments.bench.gpu.cases import CASES, TIMEOUTS, Unavailable
from experiments.bench.tools.emit import emit


def attempt(name: str, cpu: bool) -> dict[str, Any]:
    """Run case ``name`` here: its JSON line as a dict."""
    start = time.perf_counter()
    try:
        line: dict[str, Any] = {"ok": True, "detail": CASES[name](cpu)}
    except Unavailable as exc:
        line = {"ok": None, "reason": str(exc)}
    except BaseException as exc:  # noqa: B036 - a failed case is a line, the others still run
        if isinstance(exc, KeyboardInterrupt):
            raise
        line = {"ok": False, "error": f"{type(exc).__name__}: {exc}"[-3000:]}
    return {"case": name, **line, "seconds": round(time.perf_counter() - start, 2)}


def isolated(name: str, cpu: bool, timeout: float) -> dict[str, Any]:
    """Run case ``name`` in a child process (its own session, so that a timeout kills
    the ranks it launched too); its JSON line."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        out = os.path.join(tmp, "line.json")
        cmd = [sys.executable, "-m", "experiments.bench.gpu.check", "--child", name, "--out", out]
        proc = subprocess.Popen(cmd + (["--cpu-smoke"] if cpu else []), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            log, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            log, _ = proc.communicate()
            return {"case": name, "ok": False, "error": f"timed out after {timeout} s: {log[-2000:]}",
                    "seconds": round(time.perf_counter() - start, 2)}
        if os.path.exists(out):
            with open(out) as f:
                return json.load(f)
    return {"case": name, "ok": False, "error": f"exited {proc.returncode} without a result: {log[-2000:]}",
            "seconds": round(time.perf_counter() - start, 2)}


def device_name(cpu: bool) -> str:
    import torch

    if cpu or not torch.cuda.is_available():
        return "cpu"
    return f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true",
                        help="each case's CPU fallback, in this process (CI; seconds)")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated cases (default: all)")
    parser.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                        help="each case in a child process with its timeout (default: on, off with --cpu-smoke)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:  # one case, in a child process of the check
        with open(args.out, "w") as f:
            json.dump(attempt(args.child, args.cpu_smoke), f)
        return 0
    names = [n.strip() for n in args.cases.split(",") if n.strip()]
    unknown = [n for n in names if n not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; cases: {', '.join(CASES)}")
    import torch

    cpu, cuda = args.cpu_smoke, torch.cuda.is_available()
    isolate = (not cpu) if args.isolate is None else args.isolate
    device, failed = device_name(cpu), False
    for name in names:
        if not cpu and not cuda:
            line = {"case": name, "ok": None, "reason": "no CUDA device (--cpu-smoke runs the CPU fallbacks)",
                    "seconds": 0.0}
        elif isolate:
            line = isolated(name, cpu, TIMEOUTS[name])
        else:
            line = attempt(name, cpu)
        failed |= line["ok"] is False
        emit({**line, "device": device})
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
