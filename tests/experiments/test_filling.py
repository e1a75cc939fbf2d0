"""Filling (experiments.roles.actor_learner.filling): learner 0 tells the actors of a
learner whose data is short to step past pacing, names that learner on the status
line while it fills, and in a notice once its data stops growing."""

import time

from experiments.roles.actor_learner.filling import Filling
from experiments.runtime.config import RunConfig
from experiments.runtime.coordinator import Coordinator
from experiments.runtime.messages import Report
from rlpar.logging import MetricLogger


def coordinator(num_sources):
    run = RunConfig(status_every=0.5, eval_every=10**6, max_env_steps=10**6, max_seconds=600.0)
    return Coordinator(job="t", run=run, env_id="x", num_sources=num_sources, target=1e9, started=time.time(),
                       logger=MetricLogger(log_dir=None))


def test_learner_0_names_the_learner_whose_data_holds_everyone_back(capsys):
    coord = coordinator(4)
    coord.report(Report(source=0, env_steps=10, transitions=10))
    filling = Filling(coord, learners=2, num_actors=4, need=100, data="replay shard", unit="transitions",
                      warn_after=1.0)
    filling.update([0, 100], updated=False)
    assert coord.report(Report(source=0, env_steps=1)).filling == (1,)  # actors 1 and 3 may step
    assert filling.status() == {"filling": None}  # not yet a second without an update
    time.sleep(1.05)
    filling.update([0, 60], updated=False)
    assert filling.status() == {"filling": "learner1:40/100"}
    coord.tick(updates=0, status=filling.status(), force=True)
    err = capsys.readouterr()
    assert "filling=learner1:40/100" in err.out
    assert err.err == ""  # its shard fills, slowly: the status line says so, no notice
    time.sleep(1.05)
    filling.update([0, 60], updated=False)  # a second on, nothing added: a notice
    err = capsys.readouterr()
    assert ("learner 1's replay shard holds 40 of the 100 transitions it needs before it learns, "
            "none added for 1 s" in err.err and "fed by actor 1 (no report yet), actor 3 (no report yet)" in err.err)
    filling.update([0, 0], updated=True)
    assert coord.filling == () and filling.status() == {"filling": None}
    coord.tick(updates=1, status=filling.status(), force=True)
    err = capsys.readouterr()
    assert "filling=" not in err.out and "the learners update, after 2 s waiting for data" in err.err


def test_one_learner_names_its_replay_while_it_fills_and_when_it_stops_growing(capsys):
    coord = coordinator(2)
    filling = Filling(coord, learners=1, num_actors=2, need=63, data="replay", unit="sequences", warn_after=1.0)
    filling.update([63], updated=False)
    assert coord.report(Report(source=0, env_steps=1)).filling == (0,)  # every actor may step
    time.sleep(1.05)
    filling.update([50], updated=False)
    assert filling.status() == {"filling": "13/63"} and capsys.readouterr().err == ""
    time.sleep(1.05)
    filling.update([50], updated=False)
    err = capsys.readouterr().err
    assert ("the learner has not updated for 2 s: its replay holds 13 of the 63 sequences it needs before it "
            "learns, none added for 1 s; it is fed by actor 0 (last report 2 s ago), actor 1 (no report yet)") in err
    filling.update([0], updated=False)  # filled; pacing may hold the update back, not the data
    assert coord.filling == () and filling.status() == {"filling": None}
    assert "the learner updates, after 2 s waiting for data" in capsys.readouterr().err
