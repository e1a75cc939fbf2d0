import io
import math

import pytest

from rlpar.logging import MetricLogger, Progress, RateMeter


def test_metric_logger_writes_event_files(tmp_path):
    with MetricLogger(log_dir=tmp_path / "run") as log:
        log.scalars({"loss": 1.5, "bad": math.nan}, step=3, prefix="train/")
        log.config({"lr": 0.1, "env": "CartPole-v1"})
        assert log.skipped_non_finite == 1
    assert any(p.name.startswith("events.out.tfevents") for p in (tmp_path / "run").rglob("*"))


def test_metric_logger_without_dir_is_silent():
    log = MetricLogger(log_dir=None)
    log.scalar("x", 1.0, 0)
    log.close()


def test_rate_meter_counts_over_window():
    meter = RateMeter(window=10.0, now=0.0)
    for t in range(1, 12):
        meter.add(100, now=float(t))
    assert meter.rate(now=11.0) == pytest.approx(100.0)
    assert meter.total == 1100
    assert meter.rate(now=16.0) == pytest.approx(500 / 10)  # the last 5 s were quiet
    assert meter.rate(now=21.0) == pytest.approx(0.0)  # nothing for a whole window


def test_rate_meter_spreads_bursts_and_sparse_events_over_the_time_they_took():
    # Two members report a rollout of 4096 env steps each, 3 ms apart, every 8 s: the
    # rate is about 1K/s, not 4096 / 0.003 (what the last two marks alone would say).
    meter = RateMeter(window=5.0, now=0.0)
    for t in (8.0, 16.0, 24.0):
        meter.add(4096, now=t)
        meter.add(4096, now=t + 0.003)
    assert meter.rate(now=24.5) == pytest.approx(8192 / (24.5 - 16.003))  # since the last pair before 19.5
    first = RateMeter(window=5.0, now=0.0)
    first.add(4096, now=20.0)  # the first report: over the time since the start
    assert first.rate(now=20.0) == pytest.approx(4096 / 20)


def test_progress_throttles():
    out = io.StringIO()
    progress = Progress(every=3600.0, stream=out)
    assert progress.update({"steps": 1, "rate": 2.5})
    assert not progress.update({"steps": 2})
    assert progress.update({"steps": 3}, force=True)
    assert out.getvalue().splitlines() == ["steps=1 rate=2.5", "steps=3"]


@pytest.mark.parametrize("make", [lambda: RateMeter(window=0), lambda: Progress(every=-1),
                                  lambda: MetricLogger(log_dir=None, flush_secs=0)])
def test_invalid_arguments(make):
    with pytest.raises(ValueError):
        make()
