"""A local run ends with its lead: once the lead returned its summary, a rank that
does not finish (an actor stuck in a hung env) is killed and named, and the run
returns and saves the lead's summary instead of waiting for the launch's timeout."""

from __future__ import annotations

import json
import logging
import os
import time

import pytest
from jobs import apex_config

from experiments.runtime import job as runtime
from experiments.runtime.parts import Parts
from tests.procs import wait_until_dead


def _rank_main(ctx):
    rank = os.environ["RANK"]
    with open(os.path.join(ctx.run_dir, f"pid{rank}"), "w") as f:
        f.write(str(os.getpid()))
    if rank == "0":
        return {"job": "ends", "env_steps": 1}
    _stuck_in_env_step()


def _stuck_in_env_step():
    time.sleep(3600)


def _unused(*args):
    raise AssertionError("not called in a local run")


@pytest.mark.timeout(60)
def test_a_rank_that_hangs_after_the_lead_returned_is_killed_named_and_the_summary_saved(
        tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(runtime, "FINISH_GRACE_S", 0.5)
    caplog.set_level(logging.WARNING, logger="rlpar.distributed.launch")
    job = runtime.Job(name="ends", rank_main=_rank_main, serial_main=_unused, resolve=_unused,
                      check=_unused, describe=_unused, roles=lambda config, nprocs: ["learner", "actor 0"])
    ctx = runtime.JobContext(job="ends", config=apex_config(max_seconds=60.0), parts=Parts(),
                             run_dir=str(tmp_path), started=time.time(), nprocs=2)
    t0 = time.monotonic()
    summary = runtime.execute(job, ctx)
    assert summary == {"job": "ends", "env_steps": 1, "restarts": 0}
    assert time.monotonic() - t0 < 40  # not the launch's timeout (60 + 120 s)
    assert json.load(open(tmp_path / "summary.json")) == summary
    (warning,) = [r.getMessage() for r in caplog.records if "had not finished" in r.getMessage()]
    assert "rank 1 (actor 0)" in warning and "_stuck_in_env_step" in warning, warning
    pids = [int(open(tmp_path / f"pid{rank}").read()) for rank in (0, 1)]
    assert wait_until_dead(pids) == []


@pytest.mark.timeout(30)
def test_the_end_does_not_wait_for_a_source_that_stopped_reporting():
    import threading

    from experiments.runtime.config import RunConfig
    from experiments.runtime.coordinator import Coordinator
    from experiments.runtime.messages import Report
    from rlpar.logging import MetricLogger

    run = RunConfig(status_every=0.0, max_env_steps=10**6, max_seconds=600.0)

    def coordinator(**kwargs):
        coord = Coordinator(job="t", run=run, env_id="x", num_sources=3, target=1e9, started=time.time(),
                            logger=MetricLogger(log_dir=None), quiet=True, **kwargs)
        coord.report(Report(source=0, env_steps=10, transitions=10))
        coord.report(Report(source=1, env_steps=10, transitions=10))  # then dead: no final report
        # Source 2 never reports (hung in its env from the start); source 0 ends as asked.
        threading.Timer(0.3, coord.report, (Report(source=0, env_steps=0, final=True),)).start()
        return coord

    for coord, wait in ((coordinator(), {"quiet": 1.0}),  # after a stop by signal
                        (coordinator(silent_after=1.0), {})):  # by default: sources named silent
        t0 = time.monotonic()
        assert not coord.wait_for_sources(timeout=25.0, **wait)
        assert 0.3 <= time.monotonic() - t0 < 10
        assert coord.summary(algorithm=object, updates=0, run_dir=None)["silent_sources"] == [1, 2]
