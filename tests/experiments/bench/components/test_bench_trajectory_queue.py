"""Smoke test of the trajectory-queue benchmark: --quick with one producer prints a
well-formed JSON line per case."""

from __future__ import annotations

import json

import pytest

from experiments.bench.components import trajectory_queue


@pytest.mark.timeout(120)
def test_quick_trajectory_queue_bench_prints_one_json_line_per_case(capsys):
    trajectory_queue.main(["--quick", "--producers", "1"])  # in this process: its ranks are children
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert [r["case"] for r in rows] == ["roomy", "full"]
    for r in rows:
        assert r["bench"] == "trajectory_queue" and r["producers"] == 1 and r["items"] == 40
        assert r["items_per_s"] > 0 and r["mb_per_s"] > 0
        assert r["max_depth"] <= r["capacity"]
