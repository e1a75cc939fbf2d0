"""Many processes: World, RpcGroup, CollectiveGroup and a local launcher.

See :mod:`rlpar.distributed.world` for how a process joins, :mod:`.rpc_group` for
services and paired values, :mod:`.collective` for collectives on a subset of ranks and
:mod:`.launch` for running N ranks locally (the same entry runs under torchrun).
"""

from rlpar.distributed.collective import CollectiveGroup
from rlpar.distributed.launch import launch
from rlpar.distributed.rpc_group import RpcGroup
from rlpar.distributed.world import World, current_world, free_port

__all__ = ["CollectiveGroup", "RpcGroup", "World", "current_world", "free_port", "launch"]
