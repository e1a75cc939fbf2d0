"""Ape-X with 8 actors on 2 cores (envs that sleep, so the actors fit): every actor's
transitions reach the replay, every actor pulls newer parameters than it started
with, and pacing holds the replay ratio within its bounds."""

import pytest

from experiments.apex import pacing
from experiments.bench.scale.apex_actors import ScalingPoint, job_config, run_point, steady
from experiments.roles.actor_learner.program import REPORT_EVERY_S, REPORTS_PER_S, report_every


@pytest.mark.timeout(240)
def test_eight_sleeping_actors_add_pull_and_stay_paced(tmp_path):
    # 10 ms steps: each actor still pulls every 16 vector steps (0.3 s) and the learner
    # starts within a second, at half the CPU of 5 ms steps. The run stops on env steps,
    # not time (a time budget burns CPU to its end, and under load the world's start ate
    # most of its 14 s): 2,000 is past learning_starts plus the pacing slack (1,200), so
    # the actors cannot reach it before the learner made ~200 updates (a push every 4),
    # and every actor pulls several of those versions whatever the load. The seconds
    # only bound it.
    point = ScalingPoint(actors=8, seconds=120.0, max_env_steps=2000, step_s=0.01, num_envs=2,
                         frames=False, hidden="32", batch_size=32, updates_per_step=0.25, learning_starts=200, push_every=4,
                         pull_every=16, replay_capacity=20_000)
    summary, records = run_point(point, out_dir=str(tmp_path))

    assert summary["num_actors"] == 8 and summary["updates"] > 0, summary
    assert [r["index"] for r in records] == list(range(8))
    for r in records:
        assert r["transitions"] > 0, r  # this actor's adds went through
        assert len(r["versions"]) >= 2 and r["versions"][-1] > r["versions"][0], r["versions"]
    # Each actor's last record is written at its last add, before its final report:
    # every env step is counted exactly once by the coordinator.
    assert summary["env_steps"] == sum(r["env_steps"] for r in records)
    assert steady(records)["env_steps_per_s"] > 0

    assert summary["stop_reason"] == "env step budget", summary["stop_reason"]
    paced = pacing(job_config(point))  # the job's own
    assert point.max_env_steps > point.learning_starts + paced.slack_steps
    env_steps, updates = summary["env_steps"], summary["updates"]
    # The learner never runs ahead of the updates the env steps make due (plus slack).
    assert updates <= paced.learner_bound(env_steps), (env_steps, updates)
    # The actors never run further ahead of the learner than the slack, plus what the
    # others stepped since their last report (a vector step sleeps 2 x 10 ms, so at
    # most report_every(8) / 20 ms + 1 vector steps of 2 envs each between reports).
    vector_step_s = point.num_envs * point.step_s
    between_reports = point.num_envs * (int(report_every(point.actors) / vector_step_s) + 1)
    allowed = point.learning_starts + updates / point.updates_per_step + paced.slack_steps
    assert env_steps <= allowed + point.actors * between_reports, (env_steps, updates)


def test_reports_of_all_actors_together_are_capped():
    assert report_every(1) == report_every(2) == REPORT_EVERY_S  # small jobs keep 50 Hz
    for actors in (8, 64, 360):
        assert actors / report_every(actors) <= REPORTS_PER_S + 1e-9
    assert report_every(64) < report_every(360)


def test_pacing_slack_covers_what_the_actors_hold_back():
    # 32 actors x 4 envs x (16 buffered vector steps + 3-step windows): more than the
    # default slack; with less, the learner never sees enough transitions to start.
    config = job_config(ScalingPoint(actors=32, seconds=1.0, num_envs=4))
    held = 32 * 4 * (16 + config.learn.n_step)
    assert pacing(config).slack_steps >= held + config.learn.batch_size
    small = job_config(ScalingPoint(actors=2, seconds=1.0, num_envs=4))
    assert pacing(small).slack_steps == 1000  # the default where it suffices
