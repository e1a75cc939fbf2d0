"""The multi-agent inference benchmark's --quick mode runs and prints JSON lines."""

import json

import pytest

from experiments.bench.multiagent import inference


def bench_lines(capsys, *args):
    """The bench's JSON lines, its main run in this process (its --torch-threads 1 is
    the one_torch_thread fixture's, set back afterwards); an isolated run's modes are
    child processes either way."""
    inference.main(["--torch-threads", "1", *args])
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


@pytest.mark.timeout(120)
def test_quick_mode_prints_json_for_every_mode(capsys, one_torch_thread):
    lines = bench_lines(capsys, "--quick")
    assert lines[0]["config"] and lines[0]["torch_threads"] == 1
    results = [x for x in lines if "mode" in x]
    assert {x["mode"] for x in results} == {"loop", "threads", "jit_fork", "batched", "batched_vmap", "auto"}
    assert {x["op"] for x in results} == {"act", "update"}
    assert all(x["ms"] > 0 for x in results)
    assert all(x["gflop"] > 0 and x["gflops"] > 0 for x in results if x["op"] == "update")
    summaries = [x for x in lines if x.get("summary")]
    assert summaries and all(x["auto_mode"].startswith("actors=batched") for x in summaries)
    assert all("speedup_vs_threads" in x for x in summaries)
    assert lines[0]["isolated"] is False and not any(x["isolated"] for x in summaries)


@pytest.mark.timeout(120)
def test_isolated_run_times_each_mode_in_its_own_process(capsys, one_torch_thread):
    # One mode besides auto: every mode's child runs the same code (--one-mode), each a
    # Python and torch start; every mode's timing is the quick test's, in this process.
    lines = bench_lines(capsys, "--agents", "3", "--hidden", "16", "--batch", "1", "--ops", "act", "--modes", "loop",
                        "--min-time", "0.005", "--repeats", "1")
    assert lines[0]["isolated"] is True
    assert [x["mode"] for x in lines if "mode" in x] == ["loop", "auto"]
    summary = lines[-1]
    assert summary["summary"] and summary["isolated"] and summary["auto_mode"].startswith("actors=batched")
    assert summary["speedup_vs_loop"] > 0 and "speedup_vs_threads" not in summary


def test_isolated_child_failure_is_reported():
    from experiments.bench.multiagent.inference import _time_in_own_process

    with pytest.raises(RuntimeError, match="own process failed"):
        _time_in_own_process("loop", device="no-such-device", n=2, hidden=8, batch=1, min_time=0.001,
                             repeats=1, ops=("act",))
