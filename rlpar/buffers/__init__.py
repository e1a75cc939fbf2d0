"""Replay storage: ring storage, trees, (prioritized) replay, distributed replay."""

from rlpar.buffers.nstep import NStepAssembler
from rlpar.buffers.prioritized import PrioritizedReplayBuffer, importance_weights
from rlpar.buffers.replay import ReplayBuffer
from rlpar.buffers.spec import FieldSpec
from rlpar.buffers.storage import RingStorage
from rlpar.buffers.trees import MinTree, SumTree

__all__ = [
    "FieldSpec",
    "MinTree",
    "NStepAssembler",
    "PrioritizedReplayBuffer",
    "ReplayBuffer",
    "RingStorage",
    "SumTree",
    "importance_weights",
]
