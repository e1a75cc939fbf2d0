"""The GPU check without a GPU: every case's CPU fallback runs and prints one valid JSON
line; a machine without CUDA skips every case; a case in a child process that runs
past its timeout is killed with what it launched."""

import json

import pytest
import torch

from experiments.bench.gpu import check as gpu_check
from experiments.bench.gpu.cases import CASES, TIMEOUTS


def lines(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


@pytest.mark.timeout(150)
def test_cpu_smoke_runs_every_cases_fallback(capsys):
    assert gpu_check.main(["--cpu-smoke"]) == 0
    out = lines(capsys.readouterr().out)
    assert [line["case"] for line in out] == list(CASES)
    for line in out:
        assert line["device"] == "cpu" and line["seconds"] >= 0
        # ok, or a path this checkout does not have yet (PPO, --learners), said so.
        assert line["ok"] is True or (line["ok"] is None and "not available" in line["reason"]), line
    by_case = {line["case"]: line for line in out}
    assert by_case["nccl_learner_group"]["detail"]["identical"]
    assert by_case["rpc_device_maps"]["detail"]["exact"]
    for case in ("apex_gpu_learner", "td3_gpu_learner", "impala_gpu_learner", "a3c_gpu_workers", "maddpg_gpu"):
        assert by_case[case]["detail"]["updates"] > 0, case
    assert sum(TIMEOUTS.values()) <= 8 * 60  # the whole check on a GPU machine


def test_without_cuda_every_case_is_skipped(capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpu_check.main([]) == 0
    out = lines(capsys.readouterr().out)
    assert len(out) == len(CASES) and all(line["ok"] is None and "no CUDA" in line["reason"] for line in out)


@pytest.mark.timeout(60)
def test_an_isolated_case_reports_its_line_or_its_timeout():
    line = gpu_check.isolated("ppo_gpu_learner", True, timeout=50)
    assert line["case"] == "ppo_gpu_learner" and line["ok"] in (True, None)
    late = gpu_check.isolated("impala_gpu_learner", True, timeout=0.01)
    assert late["ok"] is False and "timed out" in late["error"]


def test_unknown_cases_are_refused():
    with pytest.raises(SystemExit):
        gpu_check.main(["--cases", "nope"])
