"""The recovery bench: every case's line from a --quick run (fields present and sane,
never timings), and its measurement rules on made-up TensorBoard ticks."""

import json
import math

import pytest

from experiments.bench.recovery import killed_rank as recovery

TIMES = ("rate_before", "rate_min_after", "learner_recovery_s", "throughput_recovery_s")


# Two cases cover the bench's two paths: a world restarted from a checkpoint with shard
# parts, and a process restarted alone (an env worker in MADDPG). The other faults each
# have their own test of the job's side (test_recovery, test_actor_rejoin: an Ape-X actor
# restarted alone, test_a3c_failures), and ~14 s of CPU per quick case counts against the
# suite's 6 minutes.
QUICK_CASES = ("apex-shard-learner", "maddpg-env-worker")


def test_the_quick_cases_are_cases():
    assert set(QUICK_CASES) <= set(recovery.CASES)


@pytest.mark.timeout(240)
def test_quick_recovery_bench_prints_a_sane_line_per_case(capsys):
    # The bench's main in this process (it launches each run's world, whose ranks are
    # what it kills): the imports and the interpreter are paid once, by the test run.
    assert recovery.main(["--quick", "--cases", ",".join(QUICK_CASES)]) == 0
    out = capsys.readouterr().out
    lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    assert [line["case"] for line in lines] == list(QUICK_CASES), out
    for case, line in zip(QUICK_CASES, lines):
        check_line(case, line)


def check_line(case: str, line: dict) -> None:
    assert line["bench"] == "recovery" and line["case"] == case
    # Killed once, restarted once: the world (learner cases) or the rank alone.
    lead = recovery.CASES[case].kill == "lead"
    assert line["restarts"] == 1
    assert (line["world_restarts"], line["rank_restarts"]) == ((1, 0) if lead else (0, 1))
    # The run went on after the death until the killed process was back and the learner
    # had updated for --stop-after seconds since (the quick run's stop, no wall-clock
    # budget): every figure is there (their values are the bench's business, not the
    # test's). Whether env steps got back to 90% of the rate before the death within
    # those 3 s is a race against the machine's load (a restarted world from a checkpoint
    # on a slow 2-core machine may not), so there None, "not within the run", is allowed.
    assert line["stop_reason"] == "recovered" and line["env_steps"] > 0
    for key in TIMES:
        if key == "throughput_recovery_s" and line[key] is None:
            continue
        assert isinstance(line[key], (int, float)) and math.isfinite(line[key]) and line[key] >= 0, key
    assert line["rate_before"] > 0
    for key in ("env_steps_lost", "lost_transitions", "dropped_episodes"):
        assert isinstance(line[key], int) and line[key] >= 0, key
    if lead:  # the restarted world went on from a checkpoint written before the death
        assert line["resumed_from_step"] is not None and line["resumed_from_step"] > 0
    else:
        assert line["resumed_from_step"] is None and line["env_steps_lost"] == 0
    if case == "apex-shard-actor":  # the dead actor's shard is counted lost
        assert line["lost_transitions"] > 0
    assert line["checkpoints"] >= 1 and line["checkpoint_bytes"] > 0 and line["checkpoint_pause_s"] >= 0


def test_cases_take_names_aliases_or_all_and_refuse_unknown_ones(capsys):
    assert recovery.parse_cases("all") == recovery.parse_cases("") == list(recovery.CASES)
    assert recovery.parse_cases("actor, learner,a3c-worker") == ["apex-actor", "apex-learner", "a3c-worker"]
    with pytest.raises(SystemExit):
        recovery.main(["--cases", "apex-actor,gpu"])
    assert "unknown case(s) ['gpu']" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recovery.main(["--kill-at", "20", "--seconds", "10"])
    assert "--kill-at must be in (0, --seconds 10)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        recovery.main(["--stop-after", "0"])
    assert "--stop-after must be > 0 seconds, got 0" in capsys.readouterr().err


def ticks(*rows):
    return [(float(t), int(s), float(u)) for t, s, u in rows]


def test_an_actor_death_is_measured_from_the_ticks_around_it():
    # 100 steps/s, then a death at t=10: half rate for 2 s, full rate again from t=13.
    rows = [(t, 100 * t, 10 * t) for t in range(5, 11)]
    rows += [(11, 1050, 105), (12, 1100, 110), (13, 1200, 120), (14, 1300, 130), (15, 1400, 140)]
    got = recovery._recovery(ticks(*rows), died=10.5, resumed=None)
    assert got["rate_before"] == 100.0  # over the 5 s before the death
    assert got["rate_min_after"] == 50.0
    # The learner lived on: its first tick after the death shows more updates.
    assert got["learner_recovery_s"] == 0.5
    # From t=12 the next 2 s run at 100 steps/s (>= 90 %).
    assert got["throughput_recovery_s"] == 1.5
    # A run that stays at 80 steps/s after the death never got its throughput back: None,
    # and the dip is measured over everything after the death.
    slow = [(t, 1000 + 80 * (t - 10), 10 * t) for t in range(11, 16)]
    got = recovery._recovery(ticks(*rows[:6], *slow), died=10.5, resumed=None)
    assert got["throughput_recovery_s"] is None and got["rate_min_after"] == 80.0


def test_a_restarted_world_is_measured_against_its_checkpoint():
    # The learner dies at t=10.5 (just after its tick at 1000 steps, 100 updates); the
    # world goes on from the checkpoint at step 900 and ticks again from t=14.5.
    before = [(t, 100 * t, 10 * t) for t in range(5, 11)]
    after = [(14.5, 950, 95), (15.5, 1000, 98), (16.5, 1100, 108), (17.5, 1200, 118), (18.5, 1300, 128)]
    got = recovery._recovery(ticks(*before, *after), died=10.5, resumed=900)
    # 95 updates is above the checkpoint's (at most the 90 of the tick at step 900):
    # the restarted learner had updated by t=14.5.
    assert got["learner_recovery_s"] == 4.0
    assert got["throughput_recovery_s"] == 5.0  # t=15.5 on: 2 s at 100 steps/s
    assert got["rate_min_after"] == 0.0  # the restarted world's steps went back
    # Without that margin over the checkpoint's count, no update is seen at t=14.5.
    slow = [(14.5, 950, 90), *after[1:]]
    assert recovery._recovery(ticks(*before, *slow), died=10.5, resumed=900)["learner_recovery_s"] == 5.0
    # Nothing after the death: nothing to report, not a made-up number.
    assert recovery._recovery(ticks(*before), died=10.5, resumed=900)["throughput_recovery_s"] is None


def test_checkpoint_bytes_sum_the_newest_main_file_and_its_parts(tmp_path):
    assert recovery.checkpoint_bytes(str(tmp_path)) == 0
    directory = tmp_path / "checkpoints"
    directory.mkdir()
    (directory / "ckpt-000000000100.pt").write_bytes(b"x" * 7)
    (directory / "ckpt-000000000200.pt").write_bytes(b"x" * 10)
    (directory / "ckpt-000000000200.shard-0-of-2.pt").write_bytes(b"x" * 20)
    (directory / "ckpt-000000000200.shard-1-of-2.pt").write_bytes(b"x" * 30)
    assert recovery.checkpoint_bytes(str(tmp_path)) == 60
