"""``experiments.a3c --sync``: synchronous A2C over the gradient server in reduce mode
(one optimizer step per round of one gradient per worker), serial and in a local
world, resumed from its checkpoint, and not hung by a worker that dies."""

import os
import signal

import pytest
from jobs import a3c_config, scalars

from algorithms.a2c import A2C
from experiments.a3c import A3CJobConfig, format_summary, run
from experiments.runtime import Parts
from experiments.runtime.cli import parse_config


def sync_config(log_dir="none", **over):
    # A round waits long for a gradient here: a busy test machine must not make one short.
    return a3c_config(log_dir, sync=True, num_workers=2, round_timeout=20.0, **over)


def rounds_of_two(summary):
    """Every step averaged both workers' gradients, each computed on the step's version."""
    assert summary["sync"] and summary["short_rounds"] == 0 and summary["mean_staleness"] == 0.0
    assert summary["updates"] == summary["version"] > 0
    assert summary["applied"] == 2 * summary["updates"] + summary["pending"]


@pytest.mark.timeout(60)
def test_serial_sync_steps_once_per_round_and_repeats_for_a_seed():
    runs = [run(sync_config(serial=True), quiet=True) for _ in range(2)]
    for summary in runs:
        rounds_of_two(summary)
        assert summary["pending"] == 0 and summary["dropped"] == 0
    for key in ("env_steps", "updates", "episodes", "train_return", "param_change"):
        assert runs[0][key] == runs[1][key], key
    assert "rounds of 2 gradients (0 short)" in format_summary(runs[0])


@pytest.mark.timeout(120)
def test_two_worker_ranks_average_one_gradient_each_per_step(tmp_path):
    summary = run(sync_config(str(tmp_path), max_env_steps=1200, eval_every=600), quiet=True)
    assert summary["stop_reason"] == "env step budget" and summary["num_sources"] == 2
    rounds_of_two(summary)
    # At most one gradient was dropped: a worker's push into the round its last push
    # already held, after the lead released the rounds at the end.
    assert summary["dropped"] <= 1 and summary["evaluations"] >= 1
    curves = scalars(summary["run_dir"])
    assert [v for _, v in curves["server/short_rounds"]][-1] == 0
    assert [v for _, v in curves["server/absent"]][-1] == 0


@pytest.mark.timeout(60)
def test_a_sync_run_resumes_from_its_checkpoint(tmp_path):
    first = run(sync_config(str(tmp_path), serial=True, max_env_steps=400), quiet=True)
    config = A3CJobConfig()
    config.run.resume, config.run.max_env_steps = first["run_dir"], 800
    more = run(config, quiet=True)
    assert more["resumed_from_step"] == first["env_steps"] and more["sync"]
    assert more["version"] > first["version"] and more["short_rounds"] == 0


def test_sync_flags_are_checked():
    with pytest.raises(SystemExit):
        parse_config(A3CJobConfig, ["--sync", "--max-staleness", "2"])
    with pytest.raises(SystemExit):
        parse_config(A3CJobConfig, ["--sync", "--round-timeout", "60", "--rpc-timeout", "30"])
    assert parse_config(A3CJobConfig, ["--sync"]).sync


class DiesOnceA2C(A2C):
    """SIGKILLs its process once per test, in rank $DIE_RANK after $DIE_AFTER samplings."""

    calls = 0

    def sample_actions(self, obs):
        if os.environ.get("RANK") == os.environ["DIE_RANK"]:
            DiesOnceA2C.calls += 1
            marker = os.environ["DIE_MARKER"]
            if DiesOnceA2C.calls >= int(os.environ["DIE_AFTER"]) and not os.path.exists(marker):
                open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
        return super().sample_actions(obs)


@pytest.mark.timeout(150)
def test_a_killed_worker_does_not_hang_the_rounds(tmp_path, monkeypatch):
    monkeypatch.setenv("DIE_MARKER", str(tmp_path / "killed"))
    monkeypatch.setenv("DIE_RANK", "1")
    monkeypatch.setenv("DIE_AFTER", "40")  # after a few rounds, mid-rollout
    config = a3c_config(str(tmp_path), sync=True, num_workers=2, round_timeout=1.0,
                        max_env_steps=2400, eval_every=100_000, max_seconds=100.0)
    summary = run(config, parts=Parts(algorithm=DiesOnceA2C), quiet=True)
    assert (tmp_path / "killed").exists()
    assert summary["stop_reason"] == "env step budget" and summary["env_steps"] >= 2400
    assert summary["actor_restarts"] == 1 and summary["restarts"] == 0
    # Rounds went on (short ones while worker 1 was away), and nothing its old
    # version computed was averaged into a newer round.
    assert summary["mean_staleness"] == 0.0 and summary["updates"] == summary["version"]
