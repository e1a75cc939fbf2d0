"""Which ranks of a world are still there: heartbeats in the world's store.

Every rank adds 1 to its own counter in the store every :data:`BEAT_S`, from the moment
it reaches the store until it leaves, on a store connection of its own (a beat never
waits behind this process's other store calls, nor they behind a beat stalled on a
cut link). A rank whose counter has not moved for :data:`LOST_S`, as seen by another
rank, is *lost*: its process or machine is gone, or cut off from the store's host
(``$RLPAR_LOST_S`` sets another time: :func:`lost_s`).

Why not a call to the peer: a rank that replaced a dead one cannot be called by a
peer that had called the dead one (see :mod:`rlpar.distributed.rendezvous`), and a
rank still starting has no RPC yet; every rank can reach the store. Why not torch's
own timeouts: they say that a wait ran out, not who was missing, and some of them
(the gloo group inside ``init_rpc``) are weeks long.

A :class:`Watch` reads the counters only while a rank waits for others (start-up,
barriers, shutdown), so a quiet world costs one small store write per rank a second.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping

# Every rank beats this often.
BEAT_S = 1.0
# A rank whose beat has not moved for this long is lost. Ten missed beats: far beyond
# a busy machine's scheduling delays (a beat needs the GIL for microseconds), short
# enough that survivors of a lost node leave within seconds of their work's end.
LOST_S = 10.0
# The environment variable that sets it for this process and the ones it starts (a
# test that waits for a lost rank sets a few seconds); read at each use.
LOST_S_ENV = "RLPAR_LOST_S"
# How long stopping waits for a beat in flight: a healthy one returns in milliseconds,
# even on a loaded machine; one stalled on a cut link is left behind.
STOP_WAIT_S = 2.0


def lost_s() -> float:
    """Seconds without a beat after which a rank is lost: ``$RLPAR_LOST_S`` if set,
    else :data:`LOST_S`."""
    raw = os.environ.get(LOST_S_ENV, "").strip()
    if not raw:
        return LOST_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{LOST_S_ENV} must be a positive number of seconds, got {raw!r}")
    return value


def beat_key(rank: int) -> str:
    return f"world/beat/{rank}"


class Heartbeat:
    """A daemon thread adding 1 to ``rank``'s counter in ``store`` every ``every`` s;
    while :attr:`watch` is set it also polls that :class:`Watch` (for waits that block
    in C++, as ``init_rpc`` does, and cannot poll it themselves)."""

    def __init__(self, store, rank: int, *, every: float = BEAT_S) -> None:
        self.watch: Watch | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(store, beat_key(rank), every),
                                        name=f"rlpar-heartbeat-{rank}", daemon=True)
        self._thread.start()

    def _run(self, store, key: str, every: float) -> None:
        while True:
            try:
                store.add(key, 1)
                watch = self.watch
                if watch is not None:
                    watch.poll(every=0.0)
            except Exception:  # noqa: BLE001 - the store's host is gone or cut off: others see it
                pass
            if self._stop.wait(every):
                return

    def stop(self, *, wait: float | None = None) -> None:
        """Stop beating, and wait (up to ``wait``, default :data:`STOP_WAIT_S`) for a
        beat in flight to return. The beat's store call runs without the GIL: one that
        returns while the interpreter finalizes makes Python end the thread by a forced
        unwind through torch's C++ frames, which aborts the process ("terminate called
        without an active exception", SIGABRT at exit: seen on a rank that left right
        after its shutdown). A beat stalled on a cut link is not waited for beyond
        ``wait``."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(STOP_WAIT_S if wait is None else wait)


class Watch:
    """The beat counters of ``ranks`` as seen from here since the watch began: a rank
    that has beaten is lost once its counter has not moved for ``lost_after`` seconds
    of watching. A rank that never beat is not lost but absent: still starting, gone
    before it reached the store, or beating under another run secret's key."""

    def __init__(self, store, ranks: Iterable[int], *, lost_after: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._store, self._clock = store, clock
        self.lost_after = lost_s() if lost_after is None else float(lost_after)
        now = clock()
        # rank -> (last counter value seen, when it last moved or the watch began)
        self._seen: dict[int, tuple[int, float]] = {int(r): (0, now) for r in ranks}
        self._polled = float("-inf")
        self._lock = threading.Lock()

    def poll(self, *, every: float = BEAT_S) -> None:
        """Read the counters, at most once per ``every`` seconds. Store errors are
        raised: the store's host is gone."""
        now = self._clock()
        with self._lock:
            if now - self._polled < every:
                return
            self._polled = now
            ranks = list(self._seen)
        values = {rank: self._store.add(beat_key(rank), 0) for rank in ranks}
        with self._lock:
            for rank, value in values.items():
                last, since = self._seen[rank]
                if value != last:
                    # Moved (or first seen beating): silence counts from now, except
                    # for a rank already beating when the watch began, whose silence
                    # counts from the watch's start.
                    self._seen[rank] = (value, now if last else since)

    def lost(self, among: Iterable[int] | None = None) -> list[int]:
        """The watched ranks (of ``among``) that beat and then stopped for ``lost_after``."""
        now = self._clock()
        wanted = None if among is None else set(among)
        with self._lock:
            return sorted(rank for rank, (value, since) in self._seen.items()
                          if (wanted is None or rank in wanted) and value and now - since >= self.lost_after)


@dataclasses.dataclass
class Arrival:
    """How a :func:`wait_for` ended: ``missing`` the ranks whose key was not set,
    ``lost`` those of them that stopped beating (all of them, unless time ran out)."""

    missing: list[int]
    lost: list[int]

    @property
    def complete(self) -> bool:
        return not self.missing


def lost_key(rank: int) -> str:
    return f"world/lost/{rank}"


def wait_for(store, keys: Mapping[int, str], *, timeout: float, lost_after: float | None = None,
             known_lost: set[int] | None = None, clock: Callable[[], float] = time.monotonic) -> Arrival:
    """Wait until the key of every rank in ``keys`` (rank -> store key) is set, or
    every rank still missing is lost (:class:`Watch`, after ``lost_after``, by default
    :func:`lost_s`; never
    waiting for the dead longer than that), or ``timeout`` passes. ``known_lost``:
    ranks an earlier wait found lost, not waited for again (a rank found lost is
    added). A rank found lost is also flagged in the store (:func:`lost_key`), so the
    other ranks' waits need not watch it for ``lost_after`` again. Store errors are
    raised (its host is gone). Polls: a blocking ``store.wait`` would hold the store
    client's lock, stalling this process's other store calls (RPC threads' lookups)."""
    known = set() if known_lost is None else known_lost
    everyone = list(keys.values())
    deadline = clock() + timeout
    watch: Watch | None = None
    pause, looked = 0.0005, float("-inf")
    while True:
        if store.check(everyone):
            return Arrival([], [])
        now = clock()
        if now - looked >= BEAT_S or now > deadline:
            looked = now
            missing = [rank for rank, key in keys.items() if not store.check([key])]
            if not missing:
                return Arrival([], [])
            if watch is None:  # silence counts from here: the wait's start
                after = lost_s() if lost_after is None else lost_after
                watch = Watch(store, missing, lost_after=min(after, timeout), clock=clock)
            watch.poll(every=0.0)
            flagged = {rank for rank in missing if rank not in known and store.check([lost_key(rank)])}
            seen = set(watch.lost(among=missing))
            for rank in seen - known - flagged:
                store.set(lost_key(rank), "1")
            lost = sorted(seen | flagged | (known & set(missing)))
            if len(lost) == len(missing) or now > deadline:
                known.update(lost)
                return Arrival(missing, lost)
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
