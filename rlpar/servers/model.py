"""In-process parameter store: the learner pushes, actors pull when newer."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import torch

from rlpar.servers.kv import NO_VERSION
from rlpar.servers.tensors import nbytes, snapshot


def check_push_version(version: int | None, current: int) -> int:
    """The version a push gets: ``current + 1`` when not given, else ``version``,
    which must be newer than ``current`` so pullers never move backwards."""
    if version is None:
        return current + 1
    if not isinstance(version, int) or isinstance(version, bool):
        raise TypeError(f"version must be an int or None, got {version!r}")
    if version <= current:
        raise ValueError(f"pushed version {version} is not newer than the stored version {current}")
    return version


def check_newer_than(newer_than: int) -> None:
    if not isinstance(newer_than, int) or isinstance(newer_than, bool):
        raise TypeError(f"newer_than must be an int, got {newer_than!r}")


class ModelStore:
    """A thread-safe :class:`~rlpar.protocols.ParameterStore` holding the newest
    state dict.

    ``push`` stores a detached copy (on ``device`` if given), so the pusher may keep
    training in place. ``pull(newer_than=v)`` returns ``None`` unless a newer
    version exists; pulled tensors are shared between pullers and must be treated
    as read-only (``load_state_dict`` copies them, which is the intended use).
    """

    def __init__(self, *, device: torch.device | str | None = None) -> None:
        self.device = None if device is None else torch.device(device)
        self._lock = threading.Lock()
        self._state: dict[str, Any] | None = None
        self._version = NO_VERSION
        self._pulls = 0
        self._transfers = 0
        self._bytes_out = 0

    def push(self, state: Mapping[str, Any], version: int | None = None) -> int:
        return self._push_owned(snapshot(state, device=self.device), version)

    def _push_owned(self, state: dict[str, Any], version: int | None) -> int:
        # For states nobody else holds (fresh from RPC deserialization): no copy.
        if self.device is not None and any(
            isinstance(v, torch.Tensor) and v.device != self.device for v in state.values()
        ):
            state = snapshot(state, device=self.device)
        with self._lock:
            version = check_push_version(version, self._version)
            self._state, self._version = state, version
            return version

    def pull(self, newer_than: int = -1) -> tuple[dict[str, Any], int] | None:
        check_newer_than(newer_than)
        with self._lock:
            self._pulls += 1
            if self._state is None or self._version <= newer_than:
                return None
            self._transfers += 1
            self._bytes_out += nbytes(self._state)
            return dict(self._state), self._version

    @property
    def version(self) -> int:
        """Newest version, ``-1`` before the first push."""
        with self._lock:
            return self._version

    def stats(self) -> dict[str, int]:
        """Counters: ``pulls`` asked, ``transfers`` that returned a state dict,
        ``bytes_out`` of tensor payload returned, and the current ``version``."""
        with self._lock:
            return {
                "pulls": self._pulls,
                "transfers": self._transfers,
                "bytes_out": self._bytes_out,
                "version": self._version,
            }
