"""Smoke test: the replay benchmark's --quick mode runs and prints JSON lines."""

import json

import pytest

from experiments.bench.components import replay


@pytest.mark.timeout(120)
def test_replay_bench_quick_prints_json_lines(capsys):
    # In this process (its numba kernels are loaded already, see conftest.py); --threads
    # is its torch thread count, set back afterwards.
    import torch

    threads = torch.get_num_threads()
    try:
        replay.main(["--quick"])
    finally:
        torch.set_num_threads(threads)
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
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
    peer_lines = ("cpprb", "cpprb-stack-compress", "tianshou", "tianshou-stack-num")
    for peer in peer_lines:
        assert any(ln["impl"] == peer for ln in lines)
    # Frame-sharing layouts run on the frames case only.
    shared = [ln for ln in lines if ln["impl"] == "rlpar-shared-frames"]
    assert {ln["case"] for ln in shared} == {"atari"} and len(shared) == 4
    for impl in ("rlpar-shared-frames", "cpprb-stack-compress", "tianshou-stack-num"):
        assert all(ln["case"] == "atari" for ln in lines if ln["impl"] == impl)
    assert any(ln["impl"] == "rlpar-distributed" for ln in lines)
    assert any(ln["impl"] == "rlpar-distributed-shared-frames" for ln in lines)
    # The numpy-copy reference is measured but never counted as a peer.
    reference = [ln for ln in lines if ln["impl"] == "numpy-copy"]
    assert {ln["metric"] for ln in reference} == {"add64_transitions_per_s", "sample256_per_s"}
    for line in ours + shared:
        if line["metric"] in ("add64_transitions_per_s", "sample256_per_s"):
            assert line["ratio_vs_numpy_copy"] > 0
        else:
            assert line["ratio_vs_numpy_copy"] is None
        # The best line of another library: never rlpar's other layout or the reference.
        peers = [
            ln["value"]
            for ln in lines
            if ln.get("metric") == line["metric"]
            and ln.get("case") == line["case"]
            and ln["impl"] in peer_lines
            and "skipped" not in ln
        ]
        if peers:
            assert line["ratio_vs_best_peer"] == pytest.approx(line["value"] / max(peers), rel=1e-2)
        else:
            assert line["ratio_vs_best_peer"] is None
