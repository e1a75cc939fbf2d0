"""Keep ``depth`` sampled batches in flight so a learner does not wait on replay.

With a buffer that can sample asynchronously (the distributed buffers'
``sample_async``), ``depth`` futures are outstanding at all times and the
shards' replies are assembled on RPC threads; with a local buffer a background
thread fills a queue of ``depth`` batches. Either way ``sample()`` returns the
oldest batch, and ``wait_fraction`` says how much of the consumer's time was
spent blocked waiting for one (near 0: replay keeps up; near 1: replay-bound).

Prefetched batches were drawn before the latest priority updates, as in Ape-X
(Horgan et al. 2018, arXiv:1803.00933), where the learner also prefetches.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Any

from rlpar.errors import ChildError
from rlpar.protocols import Sample


class PrefetchingSampler:
    """``sample()`` hands out batches drawn ahead of time from ``buffer``."""

    def __init__(
        self, *, buffer: Any, batch_size: int, depth: int = 2, timeout: float = 60.0
    ) -> None:
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be an int >= 1, got {depth!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.buffer, self.batch_size, self.depth, self.timeout = buffer, batch_size, depth, timeout
        self.waited_s = 0.0
        self.batches = 0
        self._started = time.perf_counter()
        self._closed = False
        self._async = hasattr(buffer, "sample_async")
        if self._async:
            self._futures: collections.deque = collections.deque(
                buffer.sample_async(batch_size) for _ in range(depth)
            )
        else:
            self._queue: queue.Queue = queue.Queue(maxsize=depth)
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._fill, name="replay-prefetch", daemon=True)
            self._thread.start()

    def _fill(self) -> None:
        while not self._stop.is_set():
            try:
                item: Any = self.buffer.sample(self.batch_size)
            except BaseException as exc:  # noqa: B036 - handed to the consumer
                item = exc
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return

    def sample(self) -> Sample:
        """The next batch; blocks (at most ``timeout`` seconds) only if none is ready."""
        if self._closed:
            raise RuntimeError("PrefetchingSampler is closed")
        t0 = time.perf_counter()
        try:
            if self._async:
                fut = self._futures.popleft()
                self._futures.append(self.buffer.sample_async(self.batch_size))
                result = fut.wait()
            else:
                try:
                    result = self._queue.get(timeout=self.timeout)
                except queue.Empty:
                    raise TimeoutError(
                        f"no replay batch within {self.timeout} s (prefetch thread stuck?)"
                    ) from None
                if isinstance(result, BaseException):
                    raise ChildError(
                        f"replay prefetch thread raised {type(result).__name__}: {result}",
                        child_name="replay-prefetch",
                    ) from result
        finally:
            self.waited_s += time.perf_counter() - t0
        self.batches += 1
        return result

    __next__ = sample

    def __iter__(self):
        return self

    @property
    def wait_fraction(self) -> float:
        """Share of wall time since creation that ``sample()`` spent blocked."""
        elapsed = time.perf_counter() - self._started
        return self.waited_s / elapsed if elapsed > 0 else 0.0

    def stats(self) -> dict[str, float]:
        return {
            "prefetch/wait_fraction": self.wait_fraction,
            "prefetch/wait_s_per_batch": self.waited_s / max(1, self.batches),
            "prefetch/batches": float(self.batches),
        }

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._async:
            for fut in self._futures:
                try:
                    fut.wait()
                except Exception:  # the batch is discarded anyway
                    pass
            self._futures.clear()
        else:
            self._stop.set()
            self._thread.join(timeout=self.timeout)

    def __enter__(self) -> PrefetchingSampler:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class PrefetchingBuffer:
    """A :class:`~rlpar.protocols.Buffer` whose ``sample`` comes from a
    :class:`PrefetchingSampler` (``depth`` batches in flight; 0: sample directly).
    The sampler starts on the first ``sample``: sampling an empty buffer is an error."""

    def __init__(self, buffer: Any, *, batch_size: int, depth: int, timeout: float = 60.0) -> None:
        if depth < 0:
            raise ValueError(f"depth must be >= 0, got {depth}")
        self.buffer, self.batch_size, self.depth, self.timeout = buffer, batch_size, depth, timeout
        self.sampler: PrefetchingSampler | None = None

    def sample(self, batch_size: int) -> Sample:
        if self.depth == 0:
            return self.buffer.sample(batch_size)
        if batch_size != self.batch_size:
            raise ValueError(f"this prefetching buffer draws batches of {self.batch_size}, asked {batch_size}")
        if self.sampler is None:
            self.sampler = PrefetchingSampler(buffer=self.buffer, batch_size=batch_size, depth=self.depth,
                                              timeout=self.timeout)
        return self.sampler.sample()

    def add(self, batch: Any, priorities: Any | None = None) -> None:
        self.buffer.add(batch, priorities)

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        self.buffer.update_priorities(indices, priorities)

    def __len__(self) -> int:
        return len(self.buffer)

    def close(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
