"""In-process versioned key-value store with compare-and-set pushes.

Versions of a key count up from 0. A key that was never pushed has no version;
``NO_VERSION`` (-1) names that state, so the first push of a key passes
``prev_version=-1`` (``None`` means the same). Each key keeps only its newest
``history`` versions, so memory stays bounded however often it is pushed.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable
from typing import Any

from rlpar.errors import RlparError

NO_VERSION = -1


class VersionConflict(RlparError):
    """A compare-and-set push lost: the key's newest version was not ``expected``."""

    def __init__(self, key: Any, *, expected: int, actual: int) -> None:
        super().__init__(
            f"push to key {key!r} expected newest version {expected}, but it is {actual}"
        )
        self.key = key
        self.expected = expected
        self.actual = actual

    def __reduce__(self):  # keep the keyword-only constructor picklable
        return (_rebuild_conflict, (self.key, self.expected, self.actual))


def _rebuild_conflict(key: Any, expected: int, actual: int) -> VersionConflict:
    return VersionConflict(key, expected=expected, actual=actual)


def check_version_args(version: int | None, newer_than: int | None) -> None:
    if version is not None and newer_than is not None:
        raise ValueError(f"pass at most one of version={version!r} and newer_than={newer_than!r}")
    for name, value in (("version", version), ("newer_than", newer_than)):
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise TypeError(f"{name} must be an int or None, got {value!r}")


def normalize_prev_version(prev_version: int | None) -> int:
    if prev_version is None:
        return NO_VERSION
    if not isinstance(prev_version, int) or isinstance(prev_version, bool):
        raise TypeError(f"prev_version must be an int or None, got {prev_version!r}")
    if prev_version < NO_VERSION:
        raise ValueError(f"prev_version must be >= -1, got {prev_version}")
    return prev_version


class KeyValueStore:
    """Thread-safe versioned store: ``push`` is compare-and-set, ``pull`` is cheap
    when nothing is newer.

    Values are stored as given (no copy): callers hand over ownership on push and
    treat pulled values as read-only, which is what the RPC-hosted variant gives
    for free because values travel by copy.
    """

    def __init__(self, *, history: int = 4) -> None:
        if not isinstance(history, int) or isinstance(history, bool) or history < 1:
            raise ValueError(f"history must be an int >= 1, got {history!r}")
        self.history = history
        self._lock = threading.Lock()
        self._data: dict[Hashable, deque[tuple[int, Any]]] = {}

    def push(self, key: Hashable, value: Any, prev_version: int | None) -> int:
        """Store ``value`` as version ``prev_version + 1`` if the newest version of
        ``key`` is ``prev_version`` (``-1``/``None``: the key has no value yet).
        Returns the new version; raises :class:`VersionConflict` otherwise."""
        expected = normalize_prev_version(prev_version)
        with self._lock:
            versions = self._data.get(key)
            actual = versions[-1][0] if versions else NO_VERSION
            if actual != expected:
                raise VersionConflict(key, expected=expected, actual=actual)
            if versions is None:
                versions = self._data[key] = deque(maxlen=self.history)
            versions.append((expected + 1, value))
            return expected + 1

    def pull(
        self, key: Hashable, version: int | None = None, newer_than: int | None = None
    ) -> tuple[Any, int] | None:
        """The newest ``(value, version)`` of ``key``; or exactly ``version`` if
        given; or the newest only if it is newer than ``newer_than``. ``None`` when
        the key is unknown, the version was evicted from history, or nothing is
        newer."""
        check_version_args(version, newer_than)
        with self._lock:
            versions = self._data.get(key)
            if not versions:
                return None
            if version is not None:
                for v, value in versions:
                    if v == version:
                        return value, v
                return None
            newest, value = versions[-1]
            if newer_than is not None and newest <= newer_than:
                return None
            return value, newest

    def version(self, key: Hashable) -> int:
        """Newest version of ``key``, ``-1`` if it has none."""
        with self._lock:
            versions = self._data.get(key)
            return versions[-1][0] if versions else NO_VERSION

    def keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._data)
