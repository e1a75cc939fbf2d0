"""Smoke test: the servers benchmark's quick mode prints parseable JSON lines."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[4]


@pytest.mark.timeout(120)
def test_servers_bench_quick_prints_json_lines():
    proc = subprocess.run(
        [sys.executable, "-m", "experiments.bench.components.servers", "--quick"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    cases = {(line["case"], line["impl"]) for line in lines}
    for case in ("empty_pull", "full_pull", "grad_push_per_worker", "grad_push_2_workers"):
        assert {(case, "rlpar"), (case, "raw_rpc_sync")} <= cases
    for line in lines:
        assert line["bench"] == "servers" and line["ops_per_s"] > 0
        assert line["ratio_vs_raw"] > 0
