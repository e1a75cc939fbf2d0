"""Smoke test of the RPC benchmark: --quick runs and prints well-formed JSON lines."""

from __future__ import annotations

import json

import pytest

from experiments.bench.components import rpc


@pytest.mark.timeout(120)
def test_quick_rpc_bench_prints_one_json_line_per_result(capfd):
    rpc.main(["--quick"])  # in this process: its ranks are child processes either way
    out = capfd.readouterr()
    rows = [json.loads(line) for line in out.out.splitlines() if line.strip()]
    cases = {(r["case"], r["impl"]) for r in rows}
    for case in ("call_latency", "pipelined_calls", "tensor_1MB", "tensor_64MB"):
        assert {(case, "rlpar"), (case, "torch_rpc_raw")} <= cases
    for r in rows:
        assert r["bench"] == "rpc" and r["overhead_ratio"] > 0
        if r["impl"] == "torch_rpc_raw":
            assert r["overhead_ratio"] == 1.0
    latency = [r for r in rows if r["case"] == "call_latency"]
    assert all(0 < r["p50_us"] <= r["p99_us"] for r in latency)
    assert "You are using a Backend" not in out.err
