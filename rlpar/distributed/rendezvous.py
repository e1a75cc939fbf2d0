"""The c10d store every rank of a World shares, and how RPC is handed the same store.

Rank 0 hosts a TCPStore whose listening socket we bind ourselves, on the master address
only (a plain TCPStore server listens on every interface). Under torchrun the agent
already hosts the store and every rank is a client, as torch.distributed does it.

``torch.distributed.rpc.init_rpc`` builds its store from a URL; a registered
rendezvous scheme lets it reuse ours, so RPC, our service names and the process group
all live in one store, which the World seals with the run secret
(:class:`rlpar.distributed.sealed.SealedStore`): no key name or value in it is readable
or writable without the secret.

torchrun's agent keeps its store across ``--max-restarts`` restarts, so the keys of a
failed attempt (peers' old addresses: RPC's and gloo's, our names) are still there
when the restarted workers rendezvous, and they would connect to dead ports. Every key
of an attempt therefore lives under ``restart<TORCHELASTIC_RESTART_COUNT>/``
(:func:`attempt_store`). That count is kept by each node's agent, and torch's agent
does not count a restart it makes for a membership change: in a multi-node job, a
node whose workers were still healthy when another node's failed restarts with an
older count than that node, and from then on their attempts do not meet. Multi-node jobs with
``--max-restarts`` should therefore run torchrun with
``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``: every attempt then gets a fresh store
(hosted by rank 0 of the workers, on a new port), which no stale key can reach.

A rank restarted alone (:func:`rlpar.distributed.launch` with ``restartable``) cannot
go through ``init_rpc``'s start: in a static world that is a gloo rendezvous and an
all-gather with every rank, which the running ranks will not repeat. torch's dynamic
membership (``world_size=None``) does not help either (torch 2.13): a member that died
without leaving stays listed, so a newcomer under its name is refused ("not unique"),
and one under a new name fails calling the dead member during the join, which also
leaves torch's membership token held and blocks every later join and leave.
:func:`rejoin_backend` is an RPC backend for the replacement instead: it builds the
TensorPipe agent of the static world directly, reads the peers' names and addresses
from the store (still there from the start) and publishes its own new address. The
running ranks serve its calls at once (a reply goes back on the caller's connection);
a rank that had called the dead process cannot call the new one (TensorPipe keeps its
broken connection), so only ranks that nobody calls may be restarted this way.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
from datetime import timedelta
from urllib.parse import urlparse

import torch.distributed as dist

SCHEME = "rlpar-store"
RESTART_ENV = "TORCHELASTIC_RESTART_COUNT"
_pending: dict[str, tuple] = {}
_lock = threading.Lock()
_registered = False
_tokens = itertools.count()


def connect_store(*, rank: int, world_size: int, master_addr: str, master_port: int,
                  timeout: float) -> dist.Store:
    """Host (rank 0) or join the world's TCPStore at ``master_addr:master_port``."""
    wait = timedelta(seconds=timeout)
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or rank != 0:
        return dist.TCPStore(master_addr, master_port, world_size, False, wait)
    family, kind, proto, _, address = socket.getaddrinfo(
        master_addr, master_port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(max(128, 4 * world_size))
    except OSError as exc:
        sock.close()
        raise OSError(f"rank 0 cannot host the store on {master_addr}:{master_port}: {exc}") from exc
    # detach: the TCPStore server now owns the descriptor.
    return dist.TCPStore(master_addr, master_port, world_size, True, wait,
                         wait_for_workers=False, master_listen_fd=sock.detach())


def restart_count() -> int:
    """How many times torchrun's elastic agent restarted this worker group (its
    TORCHELASTIC_RESTART_COUNT); 0 when not run by an agent."""
    raw = os.environ.get(RESTART_ENV, "")
    if raw == "":
        return 0
    try:
        count = int(raw)
    except ValueError:
        count = -1
    if count < 0:
        raise ValueError(f"{RESTART_ENV} must be an int >= 0, got {raw!r}")
    return count


def attempt_store(store: dist.Store) -> dist.Store:
    """``store`` as this attempt sees it: under an elastic agent, keys are prefixed by
    the restart count, so a restarted world never reads the keys of a failed one."""
    if os.environ.get(RESTART_ENV, "") == "":
        return store
    return dist.PrefixStore(f"restart{restart_count()}", store)  # PrefixStore adds the "/"


def _handler(url: str, **kwargs):
    token = urlparse(url).netloc
    with _lock:
        store, rank, world_size = _pending.pop(token)
    yield store, rank, world_size


def rpc_init_method(store: dist.Store, rank: int, world_size: int) -> str:
    """A one-use init_method URL under which init_rpc finds ``store``."""
    global _registered
    with _lock:
        if not _registered:
            dist.register_rendezvous_handler(SCHEME, _handler)
            _registered = True
        token = f"s{next(_tokens)}"
        _pending[token] = (store, rank, world_size)
    return f"{SCHEME}://{token}"


_REJOIN = "RLPAR_REJOIN"


def _rejoin_options(rpc_timeout, init_method, **kwargs):
    from torch.distributed.rpc import TensorPipeRpcBackendOptions

    return TensorPipeRpcBackendOptions(rpc_timeout=rpc_timeout, init_method=init_method, **kwargs)


def _rejoin_agent(store, name, rank, world_size, rpc_backend_options):
    from torch.distributed.rpc import TensorPipeAgent, TensorPipeRpcBackendOptions

    if not isinstance(rpc_backend_options, TensorPipeRpcBackendOptions):
        raise TypeError(f"rejoining needs TensorPipeRpcBackendOptions, got {rpc_backend_options!r}")
    if rpc_backend_options.device_maps or rpc_backend_options.devices:
        raise ValueError("a rejoining rank cannot use device_maps/devices: its peers would not "
                         "learn the reverse maps")
    # The static world's agent, without the start's collective steps (see the module
    # docstring); init_rpc then registers it as this process's agent.
    return TensorPipeAgent(store, name, rank, world_size, rpc_backend_options, {}, [])


def rejoin_backend():
    """The RPC backend (``init_rpc(backend=...)``) that joins a running static world
    in place of a rank that died; registered on first use."""
    from torch.distributed.rpc import backend_registry

    with _lock:
        if not backend_registry.backend_registered(_REJOIN):
            backend_registry.register_backend(_REJOIN, _rejoin_options, _rejoin_agent)
    return backend_registry.BackendType[_REJOIN]


@contextlib.contextmanager
def bounded_rpc_group(seconds: float):
    """Inside ``init_rpc`` torch builds a gloo group over every rank with its constant
    DEFAULT_PROCESS_GROUP_TIMEOUT (2**31 ms: 25 days), read at that call; a rank lost
    there would hold the others that long. Bound it by the world's RPC timeout."""
    from torch.distributed.rpc import constants

    with _rpc_group_lock:
        before = constants.DEFAULT_PROCESS_GROUP_TIMEOUT
        constants.DEFAULT_PROCESS_GROUP_TIMEOUT = timedelta(seconds=seconds)
        try:
            yield
        finally:
            constants.DEFAULT_PROCESS_GROUP_TIMEOUT = before


_rpc_group_lock = threading.Lock()
