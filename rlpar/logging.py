"""Metric logging to TensorBoard and a periodic one-line console status.

TensorBoard is imported lazily so processes that never log (env workers, shard
hosts) do not pay for it.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections import deque
from collections.abc import Mapping
from typing import Any, TextIO


class MetricLogger:
    """Writes scalars, text and hyperparameters under ``log_dir`` for TensorBoard.

    With ``log_dir=None`` nothing is written (tests, benchmarks). Non-finite values
    are skipped with a counter rather than poisoning the curves.
    """

    def __init__(self, *, log_dir: str | os.PathLike[str] | None, flush_secs: int = 10) -> None:
        if flush_secs <= 0:
            raise ValueError(f"flush_secs must be positive, got {flush_secs}")
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.skipped_non_finite = 0
        self._writer = None
        if self.log_dir is not None:
            from torch.utils.tensorboard import SummaryWriter

            os.makedirs(self.log_dir, exist_ok=True)
            self._writer = SummaryWriter(log_dir=self.log_dir, flush_secs=flush_secs)

    def scalar(self, tag: str, value: float, step: int) -> None:
        value = float(value)
        if not math.isfinite(value):
            self.skipped_non_finite += 1
            return
        if self._writer is not None:
            self._writer.add_scalar(tag, value, global_step=step)

    def scalars(self, metrics: Mapping[str, float], step: int, *, prefix: str = "") -> None:
        for tag, value in metrics.items():
            self.scalar(f"{prefix}{tag}", value, step)

    def text(self, tag: str, text: str, step: int = 0) -> None:
        if self._writer is not None:
            self._writer.add_text(tag, text, global_step=step)

    def config(self, config: Mapping[str, Any]) -> None:
        """Record a run's configuration as text (and as hparams where TensorBoard allows)."""
        self.text("config", "```\n" + json.dumps(dict(config), indent=2, default=str) + "\n```")
        if self._writer is not None:
            simple = {k: v for k, v in config.items() if isinstance(v, int | float | str | bool)}
            self._writer.add_hparams(simple, {}, run_name=".")

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> MetricLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RateMeter:
    """Events per second over the last ``window`` seconds: the events since the newest
    mark at or before the window's start, over the time since it, up to now. So events
    that come in bursts (two members reporting a rollout each within a millisecond)
    or further apart than the window are still counted over the time they took; the
    first ones over the time since the meter was made (``now``: its start, in the
    clock ``add`` and ``rate`` are given)."""

    def __init__(self, *, window: float = 10.0, now: float | None = None) -> None:
        if window <= 0:
            raise ValueError(f"window must be positive, got {window}")
        self.window = window
        self.total = 0
        self._marks: deque[tuple[float, int]] = deque([(time.monotonic() if now is None else now, 0)])

    def add(self, count: int = 1, *, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.total += count
        self._marks.append((now, self.total))
        self._trim(now)

    def _trim(self, now: float) -> None:
        # Keep one mark at or before the window's start: the base the rate counts from.
        while len(self._marks) > 1 and self._marks[1][0] <= now - self.window:
            self._marks.popleft()

    def rate(self, *, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        self._trim(now)
        t0, n0 = self._marks[0]
        return (self.total - n0) / (now - t0) if now > t0 else 0.0


class Progress:
    """Prints ``key=value`` status lines at most every ``every`` seconds."""

    def __init__(self, *, every: float = 5.0, stream: TextIO | None = None, prefix: str = "") -> None:
        if every < 0:
            raise ValueError(f"every must be >= 0, got {every}")
        self.every = every
        self.stream = stream if stream is not None else sys.stdout
        self.prefix = prefix
        self._last = -math.inf

    def update(self, fields: Mapping[str, Any], *, force: bool = False) -> bool:
        now = time.monotonic()
        if not force and now - self._last < self.every:
            return False
        self._last = now
        parts = [f"{k}={_fmt(v)}" for k, v in fields.items()]
        print(self.prefix + " ".join(parts), file=self.stream, flush=True)
        return True


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
