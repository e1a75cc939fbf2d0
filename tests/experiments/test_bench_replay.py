"""Smoke test: the replay benchmark's --quick mode runs and prints JSON lines."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(120)
def test_replay_bench_quick_prints_json_lines():
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.bench.replay", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    assert lines
    for line in lines:
        assert line["bench"] == "replay"
    ours = [ln for ln in lines if ln["impl"] == "rlpar" and "skipped" not in ln]
    metrics = {(ln["case"], ln["metric"]) for ln in ours}
    for case in ("cartpole", "atari"):
        for metric in (
            "add64_transitions_per_s",
            "sample256_per_s",
            "update256_per_s",
            "sample_update_per_s",
        ):
            assert (case, metric) in metrics
    for line in ours:
        assert line["value"] > 0
    # Peers are measured or explicitly skipped, never silently missing.
    for peer in ("cpprb", "tianshou"):
        assert any(ln["impl"] == peer for ln in lines)
    assert any(ln["impl"] == "rlpar-distributed" for ln in lines)
    # The numpy-copy reference is measured but never counted as a peer.
    reference = [ln for ln in lines if ln["impl"] == "numpy-copy"]
    assert {ln["metric"] for ln in reference} == {"add64_transitions_per_s", "sample256_per_s"}
    for line in ours:
        if line["metric"] in ("add64_transitions_per_s", "sample256_per_s"):
            assert line["ratio_vs_numpy_copy"] > 0
        else:
            assert line["ratio_vs_numpy_copy"] is None
        peers = [
            ln["value"]
            for ln in lines
            if ln.get("metric") == line["metric"]
            and ln.get("case") == line["case"]
            and ln["impl"] in ("cpprb", "tianshou")
            and "skipped" not in ln
        ]
        if peers:
            assert line["ratio_vs_best_peer"] == pytest.approx(line["value"] / max(peers), rel=1e-2)
        else:
            assert line["ratio_vs_best_peer"] is None
