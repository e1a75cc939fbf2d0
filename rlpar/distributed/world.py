"""World: this process's place in a set of ranks joined by TensorPipe RPC and a c10d store.

One World per process. It initializes ``torch.distributed.rpc`` (TensorPipe), connects
to the rendezvous c10d store (where service names are registered), optionally joins a
gloo/nccl process group over every rank (only :class:`CollectiveGroup` needs it: no
default group unless ``process_group_backend`` asks), and hands out :class:`RpcGroup`,
:class:`LearnerGroup` (collectives among chosen ranks, built by them alone, so that
actors may die and rejoin beside it) and :class:`CollectiveGroup` objects.

Security: RPC executes functions sent by peers. By default every socket TensorPipe and
gloo open is bound to the loopback interface; listening anywhere else needs an explicit
``listen_address`` and is logged as a warning. Every rank holds the run's secret
(:mod:`rlpar.distributed.secret`): the store's entries are sealed with it and RPC
messages signed with it (:mod:`rlpar.distributed.sealed`), so a process without it
finds nothing in the store to read, join or call, and its RPC messages are refused.
"""

from __future__ import annotations

import atexit
import ipaddress
import logging
import os
import threading
import warnings
from collections.abc import Sequence
from datetime import timedelta

import torch.distributed as dist
import torch.distributed.rpc as rpc

from rlpar.distributed import current, stops
from rlpar.distributed._child import JOINED_FILE, REJOINABLE_ENV, RESTARTS_ENV
from rlpar.distributed.liveness import Heartbeat, Watch, lost_s, wait_for
from rlpar.distributed.netif import AUTO, address_toward, interface_for_address
from rlpar.distributed.ports import free_port  # noqa: F401 - re-exported
from rlpar.distributed.rendezvous import (
    attempt_store,
    bounded_rpc_group,
    connect_store,
    rejoin_backend,
    restart_count,
    rpc_init_method,
)
from rlpar.distributed.sealed import SealedStore, seal_rpc
from rlpar.distributed.secret import SECRET_ENV, check_secret, secret_from_env
from rlpar.distributed.timeouts import _check_timeout
from rlpar.errors import PeerUnavailable

log = logging.getLogger(__name__)

# The TensorPipe transport of RPC's messages (tensors move through TensorPipe's
# channels whatever it is: cma between processes of one machine). Not "shm",
# TensorPipe's choice between processes of one machine: its reactor busy-polls, so
# every rank burns about a third of a core even when idle (measured: 1.0 s of CPU in
# 3 s of sleep; 8 idle ranks cut another rank's matmul rate by a third on 2 cores),
# and a world of more than ~36 local ranks cannot start on it (connect EAGAIN when
# every rank opens its pipes to rank 0 at once, in init_rpc's all-gather: 40 ranks
# failed; 66 start on uv in 7 s). TCP (uv) costs a small message more of the
# receiver's CPU (about 140 instead of 100 us), yet the Ape-X job ran faster on it:
# 3.4-3.9K instead of 3.0-3.2K env steps/s (CartPole, 2 actors, 2 cores), and 13
# instead of 7 learner updates/s with 8 simulated actors (experiments.bench.scale.apex).
TRANSPORTS = ["uv"]

def current_world() -> World:
    """The World this process has joined; raises RuntimeError if there is none."""
    return current.current_world()


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def _note(exc: BaseException, text: str) -> None:
    if hasattr(exc, "add_note"):  # Python >= 3.11
        exc.add_note(text)


class World:
    """This process's membership in a world of ``world_size`` ranks.

    Every rank constructs a World with the same ``master_addr``/``master_port``; rank 0
    hosts the rendezvous store there (or torchrun's agent does). Construction blocks
    until all ranks have joined (or ``rpc_timeout`` passes). One World per process at a
    time; use it as a context manager or call :meth:`shutdown`.

    ``device_maps`` (peer name -> {local device: peer device}) lets RPC carry CUDA
    tensors directly between GPUs (TensorPipe); without it send CPU tensors.
    Threads: the World does not change torch's intra-op thread count; roles should
    (``torch.set_num_threads(1)`` for actors), and :func:`launch` sets
    OMP_NUM_THREADS=1 in its ranks as torchrun does.

    ``restart_count`` is torchrun's count of worker-group restarts (0 outside an
    elastic agent); every store key of the World, RPC's and the process group's
    included, is scoped by it, so a restarted world does not meet the failed one's keys.

    ``rank_restarts > 0``: this process replaces rank ``rank``, which died while the
    world ran (:func:`launch` restarts the ranks it was told are expendable). It joins
    the running world without the start's collective steps (see
    :mod:`rlpar.distributed.rendezvous` for how, and why only ranks that no peer calls
    can be replaced): it may call the peers' services at once; no peer can call it, it
    cannot join a process group, and :meth:`RpcGroup.barrier` rounds it missed are not
    replayed. ``rejoinable``: ranks of this world may be replaced, so :meth:`shutdown`
    cannot use torch's graceful shutdown (an all-gather over connections a replacement
    does not have) and meets the other ranks in the store instead.

    ``secret``: the run's secret, shared by every rank (default: $RLPAR_RUN_SECRET,
    which :func:`launch` sets; see :func:`rlpar.distributed.secret.secret_from_env` for
    when it may be missing). Ranks with different secrets never meet. It is not kept
    on the World.
    """

    def __init__(
        self,
        *,
        rank: int,
        world_size: int,
        name: str | None = None,
        master_addr: str = "127.0.0.1",
        master_port: int,
        rpc_timeout: float = 60.0,
        listen_address: str = "127.0.0.1",
        num_worker_threads: int = 16,
        process_group_backend: str | None = None,
        local_rank: int | None = None,
        device_maps: dict[str, dict] | None = None,
        rank_restarts: int = 0,
        rejoinable: bool = False,
        secret: str | None = None,
    ) -> None:
        for arg, value in (("rank", rank), ("world_size", world_size), ("master_port", master_port),
                           ("num_worker_threads", num_worker_threads), ("rank_restarts", rank_restarts)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{arg} must be an int, got {value!r}")
        if world_size < 1:
            raise ValueError(f"world_size must be >= 1, got {world_size}")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        if not 0 < master_port < 65536:
            raise ValueError(f"master_port must be in 1..65535, got {master_port}")
        if num_worker_threads < 1:
            raise ValueError(f"num_worker_threads must be >= 1, got {num_worker_threads}")
        if rank_restarts < 0:
            raise ValueError(f"rank_restarts must be >= 0, got {rank_restarts}")
        if rank_restarts and rank == 0:
            raise ValueError("rank 0 hosts the world's store and cannot rejoin: restart the world")
        if rank_restarts and (process_group_backend is not None or device_maps):
            raise ValueError("a rejoining rank cannot join a process group or use device_maps")
        self.rpc_timeout = _check_timeout("rpc_timeout", rpc_timeout)
        if process_group_backend not in (None, "gloo", "nccl"):
            raise ValueError(
                f"process_group_backend must be None, 'gloo' or 'nccl', got {process_group_backend!r}"
            )
        if process_group_backend == "nccl":
            import torch

            if not torch.cuda.is_available():
                raise ValueError("process_group_backend='nccl' needs CUDA; use 'gloo' on CPU")
        name = f"rank{rank}" if name is None else name
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"name must be a non-empty string without '/', got {name!r}")
        secret = secret_from_env() if secret is None else check_secret(secret, origin="secret")
        if listen_address == AUTO:
            listen_address = address_toward(master_addr)

        self.rank = rank
        self.world_size = world_size
        # Index of this process among the ranks on its machine (torchrun's LOCAL_RANK):
        # the usual choice of CUDA device.
        self.local_rank = rank if local_rank is None else int(local_rank)
        self._device_maps = device_maps
        self.name = name
        self.master_addr = master_addr
        self.master_port = master_port
        self.listen_address = listen_address
        self.restart_count = restart_count()
        self.rank_restarts = rank_restarts
        self.rejoined = rank_restarts > 0
        self.rejoinable = bool(rejoinable) or self.rejoined
        self._process_group_backend = process_group_backend
        self._rpc_groups: dict = {}
        self._learner_groups: list = []
        self._groups_lock = threading.Lock()
        self._alive = False
        # Peers whose connection broke (seen by RpcGroup calls); a graceful shutdown
        # would only wait for them until its timeout.
        self.unreachable: set[str] = set()
        # Ranks found lost (no heartbeat, rlpar.distributed.liveness) by shutdown:
        # they never reached it. ``store_lost``: the world's store went away first.
        self.lost_ranks: list[int] = []
        self.store_lost = False
        self._known_lost: set[int] = set()  # found lost by any wait (barriers too): not waited for again

        current.join(self)
        try:
            self._start(num_worker_threads, secret)
        except BaseException:
            current.leave(self)
            raise

    @classmethod
    def from_env(
        cls,
        *,
        name: str | None = None,
        rpc_timeout: float = 60.0,
        listen_address: str | None = None,
        num_worker_threads: int = 16,
        process_group_backend: str | None = None,
        device_maps: dict[str, dict] | None = None,
    ) -> World:
        """Join the world described by the launcher's environment
        (:mod:`rlpar.distributed.launcher_env`): torchrun's (or :func:`launch`'s) RANK,
        WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK; else, in a task of an ``srun``
        step, Slurm's SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and the step's first node
        (MASTER_ADDR/MASTER_PORT override them). Also RLPAR_RUN_SECRET (the run's
        secret: :func:`launch` makes one, under torchrun or srun the user sets it on
        every node), and :func:`launch`'s RLPAR_RANK_RESTARTS (this rank was restarted:
        rejoin) and RLPAR_REJOINABLE.
        ``listen_address`` defaults to $RLPAR_LISTEN_ADDRESS, else 127.0.0.1 (multi-node
        runs must set one; "auto": see :func:`rlpar.distributed.netif.address_toward`).
        """
        from rlpar.distributed.launcher_env import from_environ

        found = from_environ()
        if found is None:
            raise RuntimeError(
                "World.from_env: environment variables ['RANK', 'WORLD_SIZE', 'MASTER_ADDR', "
                "'MASTER_PORT'] are not set, nor is this a task of an srun step (SLURM_PROCID, "
                "SLURM_NTASKS, SLURM_STEP_ID): run under torchrun, srun or rlpar.distributed.launch"
            )
        if listen_address is None:
            listen_address = os.environ.get("RLPAR_LISTEN_ADDRESS", "127.0.0.1")
        return cls(
            rank=found.rank,
            world_size=found.world_size,
            name=name,
            master_addr=found.master_addr,
            master_port=found.master_port,
            rpc_timeout=rpc_timeout,
            listen_address=listen_address,
            num_worker_threads=num_worker_threads,
            process_group_backend=process_group_backend,
            local_rank=found.local_rank,
            device_maps=device_maps,
            rank_restarts=int(os.environ.get(RESTARTS_ENV, "0")),
            rejoinable=bool(os.environ.get(REJOINABLE_ENV)),
        )

    # ------------------------------------------------------------------ setup

    def _start(self, num_worker_threads: int, secret: str | None) -> None:
        self._pin_interfaces()
        raw = attempt_store(connect_store(
            rank=self.rank, world_size=self.world_size, master_addr=self.master_addr,
            master_port=self.master_port, timeout=self.rpc_timeout))
        if secret is not None:
            # Everything below, RPC's and gloo's rendezvous included, uses this store.
            raw = SealedStore(raw, secret)
        # Service names live in the rendezvous store, not in a registry of our own.
        self.store = dist.PrefixStore("rlpar/", raw)
        # Its own connection (clone): a beat never queues behind this process's calls.
        self._beats = dist.PrefixStore("rlpar/", raw.clone())
        self._heartbeat = Heartbeat(self._beats, self.rank)
        try:
            if not self.rejoined:  # a replacement joins a world that is already running
                self._check_in()
            self._init_rpc(raw, num_worker_threads, secret)
        except BaseException:
            self._heartbeat.stop()
            raise
        self._alive = True
        # A script that never calls shutdown (run under torchrun) still leaves cleanly.
        atexit.register(self._shutdown_at_exit)
        try:
            self.store.set(f"world/name/{self.rank}", self.name)
            self.names = [self.store.get(f"world/name/{r}").decode() for r in range(self.world_size)]
            if self._process_group_backend is not None and not dist.is_initialized():
                if self._process_group_backend == "nccl":
                    import torch

                    # NCCL needs one GPU per rank: the usual LOCAL_RANK -> device rule.
                    torch.cuda.set_device(self.local_rank % torch.cuda.device_count())
                dist.init_process_group(
                    self._process_group_backend, store=dist.PrefixStore("pg/", self.store),
                    rank=self.rank, world_size=self.world_size,
                    timeout=timedelta(seconds=self.rpc_timeout),
                )
        except BaseException:
            self._alive = False
            self._heartbeat.stop()
            rpc.shutdown(graceful=False)
            seal_rpc(None)
            raise
        marks = os.environ.get(REJOINABLE_ENV)
        if self.rejoinable and marks:
            # For the launcher: this rank may now be replaced (rejoin) if it dies.
            open(os.path.join(marks, JOINED_FILE.format(rank=self.rank)), "w").close()

    def _check_in(self) -> None:
        """Wait (``rpc_timeout``) until every rank reached the store, naming those that
        did not: torch's start-up (below) would wait weeks for a rank lost before it."""
        key = "world/joined/{}".format
        self.store.set(key(self.rank), "1")
        try:
            arrival = wait_for(self.store, {r: key(r) for r in range(self.world_size)}, timeout=self.rpc_timeout)
        except (RuntimeError, OSError) as exc:
            raise PeerUnavailable(
                f"{self.name}: the world's store at {self.master_addr}:{self.master_port} went away while "
                f"every rank was joining: its host (rank 0) failed to start or was lost ({exc})") from None
        if arrival.complete:
            return
        absent = [r for r in arrival.missing if r not in arrival.lost]
        raise PeerUnavailable(
            f"{self.name}: ranks {arrival.missing} did not join the world within {self.rpc_timeout:g} s "
            "(rpc_timeout, --rpc-timeout)"
            + (f"; ranks {arrival.lost} reached its store and stopped beating: lost" if arrival.lost else "")
            + (f"; ranks {absent} never reached its store at {self.master_addr}:{self.master_port}: "
               f"still starting, lost before, or holding another {SECRET_ENV} (every rank needs "
               "the same one)" if absent else "")
        )

    def _init_rpc(self, raw, num_worker_threads: int, secret: str | None) -> None:
        options = rpc.TensorPipeRpcBackendOptions(
            init_method=rpc_init_method(raw, self.rank, self.world_size),
            rpc_timeout=self.rpc_timeout,
            num_worker_threads=num_worker_threads,
            device_maps=self._device_maps,
            _transports=list(TRANSPORTS),
        )
        seal_rpc(secret)
        # Ranks lost from here on are named by their beats (init_rpc blocks in C++).
        self._heartbeat.watch = Watch(self._beats, [r for r in range(self.world_size) if r != self.rank],
                                      lost_after=min(lost_s(), self.rpc_timeout))
        try:
            with warnings.catch_warnings(), bounded_rpc_group(self.rpc_timeout):
                # torch's own TensorPipe setup trips its ProcessGroup deprecation warning.
                warnings.filterwarnings("ignore", message="You are using a Backend", category=UserWarning)
                rpc.init_rpc(self.name, rank=self.rank, world_size=self.world_size,
                             rpc_backend_options=options,
                             **({"backend": rejoin_backend()} if self.rejoined else {}))
        except BaseException as exc:
            seal_rpc(None)
            lost = self._heartbeat.watch.lost()
            if lost:
                _note(exc, f"(ranks {lost} stopped beating during RPC start-up: lost)")
            elif "timeout" in str(exc).lower() or "timed out" in str(exc).lower():
                _note(exc, f"(ranks whose {SECRET_ENV} differ never meet: every rank of the world "
                           f"needs the same one)")
            raise
        finally:
            self._heartbeat.watch = None

    def _pin_interfaces(self) -> None:
        # TensorPipe's uv transport and gloo pick their listening interface from these
        # variables; without them they bind to whatever the hostname resolves to.
        if _is_loopback(self.listen_address):
            iface = interface_for_address("127.0.0.1") or "lo"
        else:
            log.warning(
                "rlpar World %r listens on %s, beyond loopback. The run secret protects the RPC "
                "pickles (signed: a peer without it can neither call a service nor run Python "
                "here) and the store (keys and values sealed). It does not protect: the traffic "
                "(unencrypted: readable and replayable; tensors unsigned), TorchScript builtin "
                "operators sent straight to the RPC port, a rank aborted by a malformed message, "
                "a peer that has the secret, or a run with RLPAR_ALLOW_NO_SECRET (then any peer "
                "runs code); use only on a trusted network (docs/security.md)",
                self.name, self.listen_address,
            )
            iface = interface_for_address(self.listen_address)
            if iface is None:
                return  # e.g. 0.0.0.0: let TensorPipe resolve the hostname
        os.environ["TP_SOCKET_IFNAME"] = iface
        os.environ["GLOO_SOCKET_IFNAME"] = iface

    # ------------------------------------------------------------------ groups

    def create_rpc_group(self, name: str, members: Sequence[str]):
        """A handle on the RPC group ``name`` made of ``members`` (world names).

        Not collective: any process may create it; the same name must always come with
        the same members (checked through the store; a mismatch is a ValueError).
        """
        from rlpar.distributed.rpc_group import RpcGroup

        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"group name must be a non-empty string without '/', got {name!r}")
        members = list(members)
        if not members:
            raise ValueError(f"group {name!r} needs at least one member")
        unknown = [m for m in members if m not in self.names]
        if unknown:
            raise ValueError(f"group {name!r}: members {unknown} are not in the world {self.names}")
        if len(set(members)) != len(members):
            raise ValueError(f"group {name!r}: duplicate members in {members}")
        with self._groups_lock:
            group = self._rpc_groups.get(name)
            if group is not None:
                if group.members != members:
                    raise ValueError(f"group {name!r} already exists with members {group.members}")
                return group
            encoded = "\0".join(members).encode()
            stored = self.store.compare_set(f"group/{name}", b"", encoded)
            if stored != encoded:
                raise ValueError(
                    f"group {name!r} already exists with members {stored.decode().split(chr(0))}"
                )
            group = RpcGroup(world=self, name=name, members=members)
            self._rpc_groups[name] = group
            return group

    def get_rpc_group(self, name: str):
        """The group ``name`` created by any process (ValueError if nobody created it)."""
        with self._groups_lock:
            group = self._rpc_groups.get(name)
        if group is not None:
            return group
        key = f"group/{name}"
        if not self.store.check([key]):
            raise ValueError(f"no RPC group named {name!r} has been created")
        return self.create_rpc_group(name, self.store.get(key).decode().split("\0"))

    def create_collective_group(self, ranks: Sequence[int]):
        """A :class:`CollectiveGroup` over ``ranks``; collective: every rank must call it."""
        from rlpar.distributed.collective import CollectiveGroup

        if not dist.is_initialized():
            raise RuntimeError(
                "collectives need World(process_group_backend='gloo' or 'nccl')"
            )
        return CollectiveGroup(world=self, ranks=ranks)

    def create_learner_group(self, name: str, ranks: Sequence[int], *, backend: str = "auto",
                             timeout: float | None = None):
        """A :class:`~rlpar.distributed.learner_group.LearnerGroup` named ``name`` over the
        world ranks ``ranks``: called by every member at about the same time (it waits
        up to ``timeout``, default ``rpc_timeout``, for the others) and by no other
        rank, so actors never take part. Needs no ``process_group_backend``.
        ``backend``: "auto" (NCCL when every member has a GPU, else gloo), "gloo" or
        "nccl". ``timeout`` also bounds every operation of the group.
        """
        from rlpar.distributed import learner_group

        group = learner_group.create(self, name, ranks, backend=backend, timeout=timeout)
        with self._groups_lock:
            self._learner_groups.append(group)
        return group

    # ------------------------------------------------------------------ shutdown

    def shutdown(self, *, graceful: bool = True, timeout: float | None = None) -> None:
        """Leave the world. Graceful waits (up to ``timeout``, default ``rpc_timeout``;
        at most ``stops.LEAVE_S`` once this process was asked to stop, see
        :mod:`rlpar.distributed.stops`) for every rank to shut down too, so ranks should
        agree on when to stop first (e.g. a group barrier): a rank that leaves early
        stops serving its services. It does not wait for a lost rank (no heartbeat for
        ``liveness.lost_s()``, at most ``timeout``): those end up in :attr:`lost_ranks`,
        named in a warning. On a timeout, a lost or dead peer it falls back to a local
        shutdown, never hangs. Also runs at interpreter exit if the program did not
        call it."""
        if not self._alive:
            return
        self._alive = False
        timeout = self.rpc_timeout if timeout is None else _check_timeout("timeout", timeout)
        # This process was asked to stop (under torchrun so was every rank, after a
        # rank died): meet the peers in the store for a few seconds at most. torch's
        # graceful shutdown would wait for a dead peer forever (its agent's join).
        stopping = stops.requested() is not None
        if stopping:
            timeout = min(timeout, stops.LEAVE_S)
        try:
            broken = bool(self.unreachable)
            if graceful and broken:
                log.warning("%r: peers %s are unreachable; shutting down without waiting for them",
                            self.name, sorted(self.unreachable))
                # A static world's broken peer is gone: lost unless it reached shutdown.
                # In a rejoinable one it may be a replacement (only its old connection broke).
                if self.rejoinable:
                    graceful = False
                else:
                    self._known_lost.update(self.names.index(n) for n in self.unreachable if n in self.names)
            # Every rank meets the others in the store first: torch's graceful shutdown
            # neither says who is missing nor stops waiting for a rank that is gone.
            if graceful and self._meet(timeout) and not (self.rejoinable or stopping or broken):
                try:
                    rpc.shutdown(graceful=True, timeout=timeout)
                except Exception as exc:  # dead peer or timeout: the local agent is finalized anyway
                    log.warning("graceful RPC shutdown of %r failed: %s", self.name, exc)
            else:
                rpc.shutdown(graceful=False)
        finally:
            self._heartbeat.stop()
            for group in self._learner_groups:
                group.destroy()
            self._learner_groups.clear()
            if self._process_group_backend is not None and dist.is_initialized():
                try:
                    dist.destroy_process_group()
                except Exception as exc:
                    log.warning("destroying the process group of %r failed: %s", self.name, exc)
            from rlpar.distributed.rpc_group import forget_world

            seal_rpc(None)  # RPC is down: nothing more is signed with this run's secret
            forget_world(self)
            current.leave(self)
            atexit.unregister(self._shutdown_at_exit)

    def _meet(self, timeout: float) -> bool:
        """Wait (up to ``timeout``) until every rank reached its shutdown, or every rank
        that has not is lost; True if every rank came. Every rank's own calls are
        answered by then, since each waits for its calls before leaving."""
        key = "world/left/{}".format
        try:
            self.store.set(key(self.rank), "1")
            arrival = wait_for(self.store, {r: key(r) for r in range(self.world_size)}, timeout=timeout,
                               known_lost=self._known_lost)
        except (RuntimeError, OSError) as exc:
            if self.rejoinable:
                return False  # the store's host (rank 0) has left: it saw every rank arrive, or died
            # In a static world the store's host leaves only once every rank has arrived
            # (rank 0 waits in torch's graceful shutdown, torchrun's agent in its exit
            # barrier): it is gone.
            self.store_lost = True
            self.lost_ranks = sorted(self._known_lost)
            log.warning("%r: the world's store at %s:%s is gone (%s): its host (rank 0, or torchrun's "
                        "agent on the rendezvous host) was lost; leaving without waiting",
                        self.name, self.master_addr, self.master_port, exc)
            return False
        if arrival.complete:
            return True
        self.lost_ranks = arrival.lost
        late = [r for r in arrival.missing if r not in arrival.lost]
        if late:
            log.warning("%r: ranks %s did not reach shutdown within %g s; leaving anyway",
                        self.name, late, timeout)
        if arrival.lost:
            log.warning("%r: ranks %s (%s) are lost: no heartbeat for %g s; leaving without them",
                        self.name, arrival.lost, ", ".join(self.name_of(r) for r in arrival.lost),
                        min(lost_s(), timeout))
            self._leave_in_order(timeout, present=[r for r in range(self.world_size) if r not in arrival.missing])
        return False

    def _leave_in_order(self, timeout: float, present: list[int]) -> None:
        """A meeting that found ranks lost: rank 0 leaves first, with its verdict, and
        the others after it (each waits, up to ``timeout``, while rank 0 is neither
        gone nor lost). Under a launcher a rank that ends with the lost ones' exit
        status makes torchrun stop its node's other ranks: so no rank makes it stop
        the lead before the lead has ended. Rank 0, when it hosts the store (outside
        torchrun's agent), keeps it until the others have seen it go."""
        key = "world/gone/{}".format
        try:
            self.store.set(key(self.rank), "1")
            if self.rank != 0:
                if 0 not in self._known_lost:
                    wait_for(self.store, {0: key(0)}, timeout=timeout, known_lost=self._known_lost)
            elif os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
                wait_for(self.store, {r: key(r) for r in present}, timeout=timeout, known_lost=set())
        except (RuntimeError, OSError):
            pass  # the store went with rank 0, which has left

    def name_of(self, rank: int) -> str:
        """The world name of ``rank`` (``rank<N>`` before the names are known)."""
        names = getattr(self, "names", None)
        return names[rank] if names and rank < len(names) else f"rank{rank}"

    def _shutdown_at_exit(self) -> None:
        try:
            self.shutdown()
        except Exception as exc:  # at exit there is nobody left to raise to
            log.warning("shutdown of %r at exit failed: %s", self.name, exc)

    @property
    def alive(self) -> bool:
        return self._alive

    def __enter__(self) -> World:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        # After an error, peers may be gone or stuck: do not wait for them.
        self.shutdown(graceful=exc_type is None)

    def __repr__(self) -> str:
        return f"World(name={self.name!r}, rank={self.rank}, world_size={self.world_size})"
