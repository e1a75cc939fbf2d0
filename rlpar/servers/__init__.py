"""Versioned key-value server, push-pull model server and gradient server.

Every server exists twice with the same semantics, so an algorithm cannot tell
which one it holds:

* local, in-process and thread-safe: :class:`KeyValueStore`, :class:`ModelStore`,
  :class:`GradServer`;
* RPC-hosted by one member of an :class:`~rlpar.distributed.RpcGroup` under a
  name, reached through small picklable accessors with the same methods:
  ``KeyValueServer``, ``PushPullModelServer``, ``PushPullGradServer``, each with
  ``.host(group, name, ...) -> accessor`` (called on the hosting member) and
  ``.connect(group, name) -> accessor`` (any member).

API::

    KeyValueStore(*, history=4)
        .push(key, value, prev_version) -> new version     # compare-and-set:
            # succeeds only if the newest version of key is prev_version;
            # a key that has no value yet is at version -1 (None means -1);
            # otherwise raises VersionConflict (.expected, .actual)
        .pull(key, version=None, newer_than=None) -> (value, version) | None
        .version(key) -> int                               # -1 if none
    ModelStore(*, device=None)                             # ParameterStore
        .push(state, version=None) -> version              # None: newest + 1
        .pull(newer_than=-1) -> (state, version) | None    # None: nothing newer
        .stats() -> {pulls, transfers, bytes_out, version}
    GradServer(*, model, optimizer_factory, mode="async"|"reduce",
               reduce_batch_size=1, max_staleness=None,
               staleness_policy="drop"|"downweight", lr_scheduler_factory=None)
        .push_gradients(grads, version) -> bool            # False: dropped (stale)
        .push(state, version=None) / .pull(newer_than=-1)  # GradientSink
        .metrics() -> {received, applied, dropped, downweighted, steps, pending,
                       mean_staleness, version, lr}

A pull with nothing newer returns ``None``; remotely that is one small round trip
with no tensor payload, the hot path of Ape-X actors.
"""

from rlpar.servers.grad import GradServer, GradServerConfig
from rlpar.servers.kv import NO_VERSION, KeyValueStore, VersionConflict
from rlpar.servers.model import ModelStore

__all__ = [
    "NO_VERSION",
    "GradServer",
    "GradServerConfig",
    "KeyValueStore",
    "ModelStore",
    "VersionConflict",
]
