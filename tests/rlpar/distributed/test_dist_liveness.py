"""Lost ranks (rlpar.distributed.liveness): survivors of a rank that died, or never
came, stop waiting for it within LOST_S (or the timeout) and name it."""

from __future__ import annotations

import pickle
import threading

import dist_liveness_programs as programs
import pytest
from unsupervised import run_ranks

from rlpar.distributed.liveness import LOST_S, Heartbeat, Watch, beat_key, lost_s, wait_for


class _Store:
    """The part of a c10d store the liveness code uses, in memory."""

    def __init__(self) -> None:
        self.data: dict[str, int | bytes] = {}

    def add(self, key, amount):
        self.data[key] = int(self.data.get(key, 0)) + amount
        return self.data[key]

    def set(self, key, value):
        self.data[key] = value

    def check(self, keys):
        return all(k in self.data for k in keys)


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _SlowStore(_Store):
    """A store whose beats block until ``release`` is set, saying when one started."""

    def __init__(self) -> None:
        super().__init__()
        self.started, self.release = threading.Event(), threading.Event()

    def add(self, key, amount):
        self.started.set()
        self.release.wait(30)
        return super().add(key, amount)


def test_stopping_waits_for_the_beat_in_flight():
    # A beat's store call that returns while the interpreter finalizes aborts the
    # process (SIGABRT at exit): stop() returns only once the beat is back.
    store = _SlowStore()
    heartbeat = Heartbeat(store, 3, every=0.01)
    assert store.started.wait(10)
    threading.Timer(0.2, store.release.set).start()
    heartbeat.stop()
    assert not heartbeat._thread.is_alive()
    assert store.data[beat_key(3)] == 1


def test_stopping_leaves_a_stalled_beat_behind_after_its_wait():
    store = _SlowStore()  # a beat stalled on a cut link: it does not return
    heartbeat = Heartbeat(store, 0, every=0.01)
    assert store.started.wait(10)
    heartbeat.stop(wait=0.05)
    assert heartbeat._thread.is_alive()
    store.release.set()
    heartbeat._thread.join(10)
    assert not heartbeat._thread.is_alive()  # ended at its next wake-up: no second beat
    assert store.data[beat_key(0)] == 1


def test_a_rank_is_lost_once_its_beat_stops_for_lost_after_and_one_that_never_beat_is_not():
    store, clock = _Store(), _Clock()
    store.add(beat_key(1), 5)
    store.add(beat_key(2), 7)
    watch = Watch(store, [1, 2, 3], lost_after=10.0, clock=clock)
    for _ in range(12):
        watch.poll(every=0.0)
        store.add(beat_key(2), 1)  # rank 2 beats on, rank 1 stopped, rank 3 never beat
        clock.now += 1.0
    assert watch.lost() == [1]
    assert watch.lost(among=[2, 3]) == []


def test_wait_for_stops_early_only_when_every_missing_rank_is_lost(monkeypatch):
    monkeypatch.setattr("rlpar.distributed.liveness.time.sleep", lambda s: None)
    store, clock = _Store(), _Clock()
    store.set("in/0", b"1")
    store.add(beat_key(1), 3)  # rank 1 beat once and stopped: lost after LOST_S

    def tick(s):
        clock.now += 0.5

    monkeypatch.setattr("rlpar.distributed.liveness.time.sleep", tick)
    arrival = wait_for(store, {0: "in/0", 1: "in/1"}, timeout=60.0, clock=clock)
    assert (arrival.missing, arrival.lost) == ([1], [1])
    assert LOST_S <= clock.now - 100.0 < LOST_S + 2
    # A rank that never beat (still starting) is waited for until the timeout.
    clock.now = 100.0
    arrival = wait_for(store, {0: "in/0", 2: "in/2"}, timeout=30.0, clock=clock)
    assert (arrival.missing, arrival.lost) == ([2], [])
    assert clock.now - 100.0 >= 30.0


def test_lost_s_is_read_from_the_environment_at_each_use_and_bad_values_are_named(monkeypatch):
    monkeypatch.delenv("RLPAR_LOST_S", raising=False)
    assert lost_s() == LOST_S == 10.0
    monkeypatch.setenv("RLPAR_LOST_S", "2.5")  # after the import: read at use
    assert lost_s() == 2.5 and Watch(_Store(), [1]).lost_after == 2.5
    for bad in ("0", "-1", "soon", "inf", "nan"):
        monkeypatch.setenv("RLPAR_LOST_S", bad)
        with pytest.raises(ValueError, match=f"RLPAR_LOST_S must be a positive number of seconds, got '{bad}'"):
            lost_s()


def _run(tmp_path, entry, args, *, nprocs, world_size, timeout):
    """``nprocs`` ranks of a world of ``world_size`` (see unsupervised); each rank's
    outcome, or its exit code if it wrote none."""
    run_ranks(tmp_path, entry, args, nprocs=nprocs, world_size=world_size, timeout=timeout)
    out = []
    for rank in range(nprocs):
        try:
            with open(tmp_path / f"result{rank}.pkl", "rb") as f:
                status, value = pickle.load(f)
            assert status == "ok", value
            out.append(value)
        except FileNotFoundError:
            out.append(int((tmp_path / f"exit{rank}").read_text().split()[0]))
    return out


@pytest.mark.timeout(120)
def test_survivors_of_a_killed_rank_name_it_and_stop_waiting_within_lost_s(tmp_path, monkeypatch):
    # Lost after 3 s of silence, not 10 (the ranks inherit it): the survivors wait that long.
    monkeypatch.setenv("RLPAR_LOST_S", "3")
    # rpc_timeout 60: torch's graceful shutdown (before) waited all of it for the dead rank.
    results = _run(tmp_path, programs.lose_a_rank, (2, 60.0), nprocs=3, world_size=3, timeout=100)
    assert results[2] == -9
    for barrier, barrier_s, shutdown_s, lost in results[:2]:
        assert "['rank2'] are lost (no heartbeat for 3 s)" in barrier, barrier
        assert barrier_s < 3 + 10
        assert lost == [2]
        assert shutdown_s < 3 + 10


@pytest.mark.timeout(90)
def test_a_rank_that_never_joins_is_named_within_the_rpc_timeout(tmp_path):
    # Before, a world short of a rank waited in torch's init_rpc (its gloo group: 25 days).
    # A 4 s timeout: ranks 0 and 1 fork from one zygote with torch loaded, so both reach
    # the store well within it even on a loaded machine; rank 2 never does, however long.
    results = _run(tmp_path, programs.join_short, (4.0,), nprocs=2, world_size=3, timeout=80)
    (text, elapsed), (other, other_s) = results
    assert "ranks [2] did not join the world within 4 s" in text, text
    assert "never reached its store" in text
    # Rank 1 says the same, or that the store went with rank 0, its host, if rank 0
    # gave up first.
    assert "ranks [2] did not join" in other or "went away while every rank was joining" in other, other
    assert max(elapsed, other_s) < 4.0 + 10
