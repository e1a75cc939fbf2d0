"""Smoke test of the gradient-averaging benchmark: --quick runs every mode in a world
of two ranks and prints well-formed JSON lines."""

import json

import pytest

from experiments.bench import sync_allreduce


@pytest.mark.timeout(120)
def test_quick_sync_allreduce_bench_measures_every_mode(capsys):
    sync_allreduce.main(["--quick"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    assert [r["mode"] for r in lines[:-1]] == ["alone", "flat", "per_tensor", "ddp"]
    assert all(r["median_ms"] > 0 for r in lines[:-1]) and "loadavg_after" in lines[-1]
