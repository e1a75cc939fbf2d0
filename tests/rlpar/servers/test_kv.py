"""Local versioned key-value store: compare-and-set, bounded history, pulls."""

import threading

import pytest

from rlpar.servers import KeyValueStore, VersionConflict


def test_first_push_is_version_zero_and_cas_chains():
    kv = KeyValueStore(history=3)
    assert kv.version("w") == -1
    assert kv.pull("w") is None
    assert kv.push("w", "a", None) == 0
    assert kv.push("w", "b", 0) == 1
    assert kv.pull("w") == ("b", 1)
    with pytest.raises(VersionConflict) as info:
        kv.push("w", "c", 0)
    assert (info.value.expected, info.value.actual) == (0, 1)
    with pytest.raises(VersionConflict):
        kv.push("w", "c", -1)  # the key already exists
    assert kv.push("other", 1, -1) == 0
    assert sorted(kv.keys()) == ["other", "w"]


def test_history_is_bounded_and_versions_addressable():
    kv = KeyValueStore(history=2)
    for v in range(5):
        kv.push("k", f"v{v}", v - 1)
    assert kv.pull("k", version=4) == ("v4", 4)
    assert kv.pull("k", version=3) == ("v3", 3)
    assert kv.pull("k", version=2) is None  # evicted
    assert kv.pull("k", version=9) is None
    assert kv.pull("missing", version=0) is None


def test_pull_newer_than():
    kv = KeyValueStore()
    kv.push("k", [1, 2, 3], None)
    assert kv.pull("k", newer_than=-1) == ([1, 2, 3], 0)
    assert kv.pull("k", newer_than=0) is None
    assert kv.pull("k", newer_than=7) is None
    assert kv.pull("missing", newer_than=-1) is None


@pytest.mark.parametrize("history", [0, -1, 1.5, True, "2"])
def test_invalid_history(history):
    with pytest.raises(ValueError, match="history"):
        KeyValueStore(history=history)


def test_invalid_arguments():
    kv = KeyValueStore()
    with pytest.raises(ValueError, match="at most one"):
        kv.pull("k", version=0, newer_than=0)
    with pytest.raises(TypeError, match="newer_than"):
        kv.pull("k", newer_than="0")
    with pytest.raises(TypeError, match="prev_version"):
        kv.push("k", 1, "0")
    with pytest.raises(ValueError, match="prev_version"):
        kv.push("k", 1, -2)


def test_concurrent_threads_exactly_one_winner_per_version():
    kv = KeyValueStore(history=100)
    wins: dict[int, list[int]] = {}
    barrier = threading.Barrier(3)

    def contender(ident: int) -> None:
        barrier.wait()
        for _ in range(200):
            current = kv.version("k")
            try:
                new = kv.push("k", ident, current)
            except VersionConflict:
                continue
            wins.setdefault(new, []).append(ident)
            if new >= 59:
                return

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert all(len(winners) == 1 for winners in wins.values())
    assert sorted(wins) == list(range(len(wins)))
    for version, winners in wins.items():
        assert kv.pull("k", version=version) in (None, (winners[0], version))
