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
    meter = RateMeter(window=10.0)
    for t in range(11):
        meter.add(100, now=float(t))
    assert meter.rate() == pytest.approx(100.0)
    assert meter.total == 1100


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
