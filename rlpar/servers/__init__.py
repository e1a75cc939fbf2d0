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
        .stats() -> {pulls, transfers, bytes_out, version}; .version (property)
    GradServer(*, model, optimizer_factory, mode="async"|"reduce",
               reduce_batch_size=1, max_staleness=None,
               staleness_policy="drop"|"downweight", max_non_finite=100,
               round_timeout=None, lr_scheduler_factory=None)
        .push_gradients(grads, version, source=None) -> bool  # False: dropped (stale, or
            # its source's gradient is already in the open round) or rejected (NaN/inf);
            # the max_non_finite-th rejection in a row raises NonFiniteGradients
        .push_gradients_and_wait(grads, version, newer_than=-1, source=None) -> Future
            # of (accepted, pull(newer_than)), set once the gradient's round has closed
        .push(state, version=None) / .pull(newer_than=-1)  # GradientSink
        .member(source) -> GradMember                      # a worker's sink in this process
        .release() / .expire_round() / .waiting(source) / .wait_round(source, timeout)
        .metrics() -> {received, applied, dropped, downweighted, rejected_non_finite,
                       steps, pending, mean_staleness, version, lr, short_rounds,
                       absent}; .version (property)
        # staleness = server version - gradient's version; above max_staleness a
        # gradient is dropped or scaled by 1 / (1 + staleness - max_staleness)
        # reduce mode with sources (worker indices < reduce_batch_size): one gradient per
        # source and round; round_timeout closes a round without the missing sources,
        # which are not waited for until they push again (rlpar.servers.rounds)

    # RPC-hosted: ``group`` is an RpcGroup, ``name`` a string without '/'
    KeyValueServer.host(group, name, *, history=4, timeout=None) -> RemoteKeyValueStore
    PushPullModelServer.host(group, name, *, timeout=None) -> RemoteModelStore
    PushPullGradServer.host(group, name, *, model, optimizer_factory, mode=..., ...,
                            timeout=None) -> RemoteGradServer
    PushPullGradServer.connect(group, name, *, timeout=None, source=None)
        # with a source: pushes name it; push_gradients_and_pull answers when the
        # round closed (a deferred service: no RPC thread of the host waits)
    X.connect(group, name, *, timeout=None) -> the same accessor, from any member

Accessors are picklable (send them to workers) and have the local class's methods
(``RemoteModelStore``: push, pull, stats, version; ``RemoteGradServer``: push,
pull, push_gradients, metrics, version). ``timeout`` (seconds, default the
World's RPC timeout) bounds every call; a dead or silent host raises
:class:`~rlpar.errors.PeerUnavailable`. The host serves its own accessor calls
in-process without RPC. Call ``group.barrier()`` after hosting so that nobody
connects first. CUDA tensors travel as CPU tensors unless ``keep_device=True``
(only with TensorPipe device maps set both ways).

A pull with nothing newer returns ``None``; remotely that is one small round trip
with no tensor payload, the hot path of Ape-X actors.

Sharding (models too big for one reducer): every shard host calls
``ShardedGradServer.host(group, name, shard=i, num_shards=n, model=..., ...)``;
``ShardedGradServer.connect(group, name, num_shards=n)`` gives a GradientSink
that splits pushes by parameter name and merges pulls (no staleness bound there).
"""

from rlpar.servers.grad import GradServer, GradServerConfig
from rlpar.servers.kv import NO_VERSION, KeyValueStore, VersionConflict
from rlpar.servers.model import ModelStore
from rlpar.servers.remote import (
    KeyValueServer,
    PushPullGradServer,
    PushPullModelServer,
    RemoteGradServer,
    RemoteKeyValueStore,
    RemoteModelStore,
)
from rlpar.servers.rounds import GradMember
from rlpar.servers.sharded import RemoteShardedGradServer, ShardedGradServer

__all__ = [
    "NO_VERSION",
    "GradMember",
    "GradServer",
    "GradServerConfig",
    "KeyValueServer",
    "KeyValueStore",
    "ModelStore",
    "PushPullGradServer",
    "PushPullModelServer",
    "RemoteGradServer",
    "RemoteKeyValueStore",
    "RemoteModelStore",
    "RemoteShardedGradServer",
    "ShardedGradServer",
    "VersionConflict",
]
