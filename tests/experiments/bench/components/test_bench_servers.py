"""Smoke test: the servers benchmark's quick mode prints parseable JSON lines."""

import json

import pytest

from experiments.bench.components import servers


@pytest.mark.timeout(120)
def test_servers_bench_quick_prints_json_lines(capsys):
    servers.main(["--quick"])  # in this process: its ranks are child processes either way
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    cases = {(line["case"], line["impl"]) for line in lines}
    for case in ("empty_pull", "full_pull", "grad_push_per_worker", "grad_push_2_workers"):
        assert {(case, "rlpar"), (case, "raw_rpc_sync")} <= cases
    for line in lines:
        assert line["bench"] == "servers" and line["ops_per_s"] > 0
        assert line["ratio_vs_raw"] > 0
