"""Replay storage: ring storage, trees, (prioritized) replay, distributed replay.

Local: :class:`ReplayBuffer`, :class:`PrioritizedReplayBuffer` (Schaul et al.
2016) over :class:`RingStorage` and batched, numba-compiled :class:`SumTree`/:class:`MinTree`;
:class:`NStepAssembler` builds n-step transitions; :class:`SharedFrames`
stores stacked ``obs``/``next_obs`` once. Distributed (Ape-X):
:class:`DistributedReplayBuffer`, :class:`DistributedPrioritizedReplayBuffer`
shard over an RpcGroup and sample through a :class:`ShardedSampler`;
:class:`HostedBuffer` serves one buffer to other processes;
:class:`TrajectoryQueue` is the bounded FIFO of unrolls between actors and a learner
(IMPALA), :class:`HostedQueue` serves one to producers over RPC;
:class:`PrefetchingSampler` / :class:`PrefetchingBuffer` keep batches in flight.
Sequences (R2D2) are items whose step fields have a time axis: :func:`sequence_spec`
declares them, :func:`mix_priorities` gives each one priority (:mod:`rlpar.buffers.sequence`).
"""

from rlpar.buffers.distributed import DistributedPrioritizedReplayBuffer, DistributedReplayBuffer
from rlpar.buffers.fifo import QueueStats, TrajectoryQueue
from rlpar.buffers.frames import SharedFrames
from rlpar.buffers.hosted import HostedBuffer, RemoteAdder
from rlpar.buffers.hosted_fifo import HostedQueue, RemoteQueue
from rlpar.buffers.nstep import NStepAssembler
from rlpar.buffers.prefetch import PrefetchingBuffer, PrefetchingSampler
from rlpar.buffers.prioritized import PrioritizedReplayBuffer, importance_weights
from rlpar.buffers.replay import ReplayBuffer
from rlpar.buffers.sequence import mix_priorities, sequence_spec
from rlpar.buffers.shard import LocalShardClient, ReplayShard, RpcShardClient
from rlpar.buffers.sharded_sampler import ShardedSampler
from rlpar.buffers.spec import FieldSpec
from rlpar.buffers.storage import RingStorage
from rlpar.buffers.trees import MinTree, SumTree

__all__ = [
    "DistributedPrioritizedReplayBuffer",
    "DistributedReplayBuffer",
    "FieldSpec",
    "HostedBuffer",
    "HostedQueue",
    "LocalShardClient",
    "MinTree",
    "NStepAssembler",
    "PrefetchingBuffer",
    "PrefetchingSampler",
    "PrioritizedReplayBuffer",
    "QueueStats",
    "ReplayBuffer",
    "RemoteAdder",
    "RemoteQueue",
    "ReplayShard",
    "RingStorage",
    "RpcShardClient",
    "ShardedSampler",
    "SharedFrames",
    "SumTree",
    "TrajectoryQueue",
    "importance_weights",
    "mix_priorities",
    "sequence_spec",
]
