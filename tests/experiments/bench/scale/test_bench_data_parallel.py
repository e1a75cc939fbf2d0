"""Smoke tests of experiments.bench.scale.data_parallel: the all-reduce case's quick mode
prints parseable JSON lines; the PPO cases say when experiments.ppo is missing, and
their arithmetic holds on fake runs."""

import json
import os

import pytest

from experiments.bench.scale import data_parallel
from experiments.bench.tools import straggler_env


def lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.timeout(120)
def test_allreduce_quick_prints_every_net_and_impl(capsys):
    data_parallel.main(["--quick", "--cases", "allreduce"])
    out = lines(capsys.readouterr().out)
    rows = {(line["net"], line["impl"]): line for line in out if line.get("case") == "allreduce"}
    assert set(rows) == {(net, impl) for net in data_parallel.NETS  # --quick: no DDP
                         for impl in ("rlpar_average_gradients", "raw_all_reduce")}
    for row in rows.values():
        assert row["ranks"] == 2 and row["backend"] == "gloo" and row["params"] > 0
        assert row["ms_p50"] > 0 and row["ms_p90"] >= row["ms_p50"] and row["gb_per_s"] > 0
    assert rows[("nature_cnn", "raw_all_reduce")]["params"] > 1_500_000  # the Nature CNN's 1.7M
    assert "loadavg_end" in out[-1]


def test_ppo_cases_say_when_ppo_is_missing(monkeypatch):
    monkeypatch.setattr(data_parallel, "PPO", "experiments.no_such_job")
    for case in (data_parallel.ppo_ranks, data_parallel.straggler):
        (line,) = case(True)
        assert line["ok"] is None and "not available" in line["reason"]


def test_straggler_cost_from_three_runs(monkeypatch):
    seen = []

    def fake_ppo(argv, *, iterations, steps_per_iteration, seconds):
        fraction = float(argv[argv.index("--preempt-fraction") + 1])
        slow = os.environ["RLPAR_BENCH_SLOW_RANK"]
        seen.append((slow, fraction, argv[argv.index("--num-workers") + 1]))
        sps = 1000.0 if not slow else (600.0 if fraction == 0 else 950.0)
        return {"env_steps_per_s": sps, "updates_per_s": 1.0, "wall_s": seconds}

    monkeypatch.setattr(data_parallel, "ppo_missing", lambda *flags: None)
    monkeypatch.setattr(data_parallel, "_ppo", fake_ppo)
    monkeypatch.delenv("RLPAR_BENCH_SLOW_RANK", raising=False)
    out = data_parallel.straggler(True)
    assert seen == [("", 0.0, "4"), ("3", 0.0, "4"), ("3", 0.6, "4")]  # the last rank is slow
    assert out[-1] == {"case": "straggler_cost", "ranks": 4, "cost_preempt_0.0": 0.4, "cost_preempt_0.6": 0.05}
    assert "RLPAR_BENCH_SLOW_RANK" not in os.environ  # put back as it was


def test_the_straggler_env_is_slower_only_in_its_rank():
    env = {"RLPAR_BENCH_STEP_S": "0.01", "RLPAR_BENCH_SLOW_RANK": "3", "RLPAR_BENCH_SLOW_FACTOR": "3"}
    assert straggler_env.step_seconds({**env, "RANK": "3"}) == pytest.approx(0.03)
    assert straggler_env.step_seconds({**env, "RANK": "0"}) == pytest.approx(0.01)
    assert straggler_env.step_seconds({}) == pytest.approx(0.005)
