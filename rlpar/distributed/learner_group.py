"""LearnerGroup: collectives among chosen ranks of a World, and only among them.

Synchronous data-parallel learning (DD-PPO, Wijmans et al. 2020; PQN; sync A2C; K
learners inside Ape-X or IMPALA) averages every member's gradients by all-reduce, so
the parameters stay identical on every member. torch's own subgroups cannot carry
that beside actors that come and go: ``dist.new_group`` is collective over the whole
default process group, which every rank must have joined at the start, and which a
restarted actor can never rejoin. A LearnerGroup is instead a process group of its
own (gloo, or NCCL when every member has a GPU) that only its members build, on a
prefix of the World's store: sealed with the run secret like every other key, and
under torchrun scoped by the restart count (the World's store already is). Actors
are never members, so an actor's death and rejoin never touch it; a member's death
breaks it for good (a collective cannot go on without a member): every later
operation raises, and supervision restarts the world from the newest checkpoint.

Addressing: ``src``/``dst`` are *group ranks*, 0..size-1 in the order of ``ranks``
(the world ranks of the members, sorted); :attr:`rank` is this member's group rank.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from rlpar.distributed import _buckets
from rlpar.distributed.collective import _OPS
from rlpar.errors import PeerUnavailable

BACKENDS = ("auto", "gloo", "nccl")


def create(world, name: str, ranks: Sequence[int], *, backend: str,
           timeout: float | None) -> LearnerGroup:
    """What :meth:`World.create_learner_group` does: arguments checked before anything
    touches the store, then one set of members per name for the whole world (as for
    RPC groups: a second creation with other ranks is a ValueError)."""
    from rlpar.distributed.timeouts import _check_timeout

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"group name must be a non-empty string without '/', got {name!r}")
    ranks = sorted(int(r) for r in ranks)
    if not ranks or len(set(ranks)) != len(ranks):
        raise ValueError(f"learner group {name!r} needs distinct ranks, got {ranks}")
    if not all(0 <= r < world.world_size for r in ranks):
        raise ValueError(f"learner group {name!r}: ranks {ranks} are not all in a world "
                         f"of size {world.world_size}")
    if world.rank not in ranks:
        raise ValueError(f"learner group {name!r}: only its members {ranks} create it, "
                         f"not rank {world.rank}")
    timeout = world.rpc_timeout if timeout is None else _check_timeout("timeout", timeout)
    encoded = ",".join(map(str, ranks)).encode()
    stored = world.store.compare_set(f"learner/{name}", b"", encoded)
    if stored != encoded:
        raise ValueError(f"learner group {name!r} already exists with ranks {stored.decode()}")
    return LearnerGroup(world=world, name=name, ranks=ranks, backend=backend, timeout=timeout)


def _has_gpu() -> bool:
    return torch.cuda.is_available() and dist.is_nccl_available()


NO_GPU = "-"


def _nccl_device(local_rank: int) -> str:
    """Where this member would run NCCL, as the group sees it: ``host:index`` (the
    usual LOCAL_RANK rule), or ``"-"`` without a GPU."""
    if not _has_gpu():
        return NO_GPU
    return f"{socket.gethostname()}:{local_rank % torch.cuda.device_count()}"


def choose_backend(requested: str, devices: Sequence[str]) -> str:
    """The group's backend from each member's :func:`_nccl_device`. NCCL takes one
    member per GPU (two members on one GPU fail at the first collective: "Duplicate
    GPU detected"), so ``auto`` picks it only when every member has a GPU of its own,
    else gloo (e.g. two learners sharing a machine's one GPU: their gradients average
    through CPU memory); an explicit ``nccl`` on a shared GPU is a ValueError."""
    distinct = NO_GPU not in devices and len(set(devices)) == len(devices)
    if requested == "auto":
        return "nccl" if distinct else "gloo"
    if requested == "nccl" and not distinct:
        raise ValueError(f"backend 'nccl' needs a GPU of its own for every member, got {list(devices)} "
                         "(host:index; '-' for none); use 'gloo' or 'auto'")
    return requested


class _Pending:
    """A started send/recv: :meth:`wait` finishes it within the group's timeout."""

    def __init__(self, group: LearnerGroup, work, what: str, tensor: torch.Tensor) -> None:
        self._group, self._work, self._what, self.tensor = group, work, what, tensor

    def wait(self) -> torch.Tensor:
        """The tensor sent or received; PeerUnavailable if the peer died or was silent."""
        self._group._finish(self._work, self._what)
        return self.tensor


class LearnerGroup:
    """Collectives and point-to-point among the world ranks ``ranks``.

    Get one from :meth:`World.create_learner_group`, called by every member (and by no
    other rank). Tensors must live on :attr:`device` (CPU for gloo, this member's
    GPU for NCCL); :meth:`average_gradients` and :meth:`broadcast_parameters` copy
    to it themselves. Every operation fails within ``timeout`` seconds with
    :class:`~rlpar.errors.PeerUnavailable` if a member is dead or does not take part,
    and the group is broken from then on.
    """

    def __init__(self, *, world, name: str, ranks: Sequence[int], backend: str = "auto",
                 timeout: float) -> None:
        self.name = name
        self.ranks = sorted(ranks)
        self.size = len(self.ranks)
        self.rank = self.ranks.index(world.rank)
        self.timeout = timeout
        self._wait = timedelta(seconds=timeout)
        self._broken: str | None = None
        if backend == "nccl" and not _has_gpu():
            raise ValueError(f"learner group {name!r}: backend 'nccl' needs CUDA on every member, "
                             f"and world rank {world.rank} has none; use 'gloo' or 'auto'")
        store = world.store
        # A name may be built again (after destroy()): every build of it gets its own
        # keys. Each member counts itself in; no member can start the next build
        # before every member counted itself into this one (this one's rendezvous).
        generation = (store.add(f"learner/{name}/joins", 1) - 1) // self.size
        base = f"learner/{name}/{generation}/"
        store.set(f"{base}gpu/{self.rank}", _nccl_device(world.local_rank))
        gpus = self._meet(store, [f"{base}gpu/{r}" for r in range(self.size)])
        # Every member decides from the same published devices: the same backend.
        self.backend = choose_backend(backend, [g.decode() for g in gpus])
        try:
            self._pg = self._connect(world, dist.PrefixStore(base + "pg/", store))
        except RuntimeError as exc:  # a member died between meeting and connecting
            raise PeerUnavailable(f"learner group {self.name!r}: members did not connect "
                                  f"within {self.timeout} s: {exc}") from exc

    def _connect(self, world, pg_store):
        if self.backend == "nccl":
            # NCCL: one GPU per member, by the usual LOCAL_RANK rule.
            self.device = torch.device("cuda", world.local_rank % torch.cuda.device_count())
            # NCCL makes its communicators lazily, on the current device.
            torch.cuda.set_device(self.device)
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = self._wait
            return dist.ProcessGroupNCCL(pg_store, self.rank, self.size, options)
        self.device = torch.device("cpu")
        # Listens where the World pinned gloo (GLOO_SOCKET_IFNAME: loopback by default).
        return dist.ProcessGroupGloo(pg_store, self.rank, self.size, self._wait)

    def _meet(self, store, keys: list[str]) -> list[bytes]:
        # Poll rather than store.wait: a blocking wait holds the store client's lock
        # and stalls this process's RPC threads' service lookups meanwhile.
        deadline = time.monotonic() + self.timeout
        pause = 0.0005
        while not store.check(keys):
            if time.monotonic() > deadline:
                missing = [self.ranks[i] for i, k in enumerate(keys) if not store.check([k])]
                raise PeerUnavailable(f"learner group {self.name!r}: world ranks {missing} did not "
                                      f"create it within {self.timeout} s")
            time.sleep(pause)
            pause = min(pause * 2, 0.01)
        return [store.get(k) for k in keys]

    def __repr__(self) -> str:
        return (f"LearnerGroup(name={self.name!r}, ranks={self.ranks}, rank={self.rank}, "
                f"backend={self.backend!r})")

    # ------------------------------------------------------------------ plumbing

    def _check(self, what: str) -> None:
        if self._broken is not None:
            raise PeerUnavailable(f"learner group {self.name!r}: {what} on a broken group "
                                  f"(earlier: {self._broken}); restart the world")
        if self._pg is None:
            raise RuntimeError(f"learner group {self.name!r}: {what} after destroy()")

    def _peer(self, what: str, peer: int) -> int:
        if isinstance(peer, bool) or not isinstance(peer, int) or not 0 <= peer < self.size:
            raise ValueError(f"{what}: group rank must be an int in [0, {self.size}), got {peer!r}")
        return peer

    def _finish(self, work, what: str) -> None:
        # The explicit timeout also makes NCCL's wait block this thread (not only the
        # stream) and raise instead of leaving the job to the watchdog.
        try:
            work.wait(self._wait)
        except Exception as exc:
            self._broken = f"{what}: {exc}"
            raise PeerUnavailable(
                f"learner group {self.name!r} (world ranks {self.ranks}): {what} failed: a member "
                f"died or did not take part within {self.timeout} s: {exc}") from exc

    def _run(self, what: str, start) -> None:
        # What start() itself raises (a non-contiguous tensor, a dtype the backend
        # lacks) is the caller's mistake, raised as is; peers fail only in the wait.
        self._check(what)
        self._finish(start(), what)

    # ------------------------------------------------------------------ collectives

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce ``tensor`` over the members in place (``op``: sum, product, min,
        max); returns it."""
        if op not in _OPS:
            raise ValueError(f"op must be one of {sorted(_OPS)}, got {op!r}")
        opts = dist.AllreduceOptions()
        opts.reduceOp = _OPS[op]
        self._run("all_reduce", lambda: self._pg.allreduce([tensor], opts))
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        """Copy group rank ``src``'s ``tensor`` into every member's ``tensor``."""
        opts = dist.BroadcastOptions()
        opts.rootRank, opts.rootTensor = self._peer("broadcast", src), 0
        self._run("broadcast", lambda: self._pg.broadcast([tensor], opts))
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every member's ``tensor`` (same shape everywhere), in group-rank order."""
        out = [torch.empty_like(tensor) for _ in range(self.size)]
        self._run("all_gather", lambda: self._pg.allgather([out], [tensor]))
        return out

    def barrier(self) -> None:
        """Block until every member reached it."""
        opts = dist.BarrierOptions()
        if self.backend == "nccl":
            opts.device_ids = [self.device.index]
        opts.timeout = self._wait
        self._run("barrier", lambda: self._pg.barrier(opts))

    # ------------------------------------------------------------------ point to point

    def isend(self, tensor: torch.Tensor, dst: int, *, tag: int = 0) -> _Pending:
        """Start sending ``tensor`` to group rank ``dst``; ``.wait()`` finishes it.
        Do not change ``tensor`` before then."""
        self._check("isend")
        dst = self._peer("isend", dst)
        if dst == self.rank:
            raise ValueError("isend: a member cannot send to itself")
        return _Pending(self, self._pg.send([tensor], dst, tag), f"send to group rank {dst}", tensor)

    def irecv(self, tensor: torch.Tensor, src: int, *, tag: int = 0) -> _Pending:
        """Start receiving into ``tensor`` from group rank ``src``; ``.wait()`` returns
        it filled."""
        self._check("irecv")
        src = self._peer("irecv", src)
        if src == self.rank:
            raise ValueError("irecv: a member cannot receive from itself")
        return _Pending(self, self._pg.recv([tensor], src, tag), f"recv from group rank {src}", tensor)

    def send(self, tensor: torch.Tensor, dst: int, *, tag: int = 0) -> None:
        """Send ``tensor`` to group rank ``dst`` (returns once it is handed over)."""
        self.isend(tensor, dst, tag=tag).wait()

    def recv(self, tensor: torch.Tensor, src: int, *, tag: int = 0) -> torch.Tensor:
        """Receive into ``tensor`` from group rank ``src``; returns it."""
        return self.irecv(tensor, src, tag=tag).wait()

    # ------------------------------------------------------------------ parameters

    def average_gradients(self, parameters: nn.Module | Iterable[torch.Tensor], *,
                          bucket_mb: float = 25.0) -> None:
        """Replace each parameter's ``.grad`` by its mean over the members.

        One all-reduce per flat bucket of about ``bucket_mb`` MB (per dtype and device),
        not one per tensor: a call costs latency, and a network has dozens of tensors
        (DDP buckets gradients likewise). A parameter without a gradient counts as zeros
        and gets one, so every member reduces the same layout."""
        if isinstance(parameters, nn.Module):
            parameters = parameters.parameters()
        grads = []
        for p in parameters:
            if not p.requires_grad:
                continue
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            if p.grad.is_sparse:
                raise TypeError("average_gradients: sparse gradients are not supported")
            grads.append(p.grad)
        self.average(grads, bucket_mb=bucket_mb)

    def average(self, tensors: Iterable[torch.Tensor], *, bucket_mb: float = 25.0) -> None:
        """Replace each of ``tensors`` by its mean over the members, in place, in flat
        buckets of about ``bucket_mb`` MB (:meth:`average_gradients` on the gradients
        themselves: what an algorithm's gradient hook hands over)."""
        with torch.no_grad():
            for bucket, flat in _buckets.flatten(list(tensors), self.device, bucket_mb):
                self.all_reduce(flat)
                flat.div_(self.size)
                _buckets.unflatten(bucket, flat)

    def broadcast_parameters(self, module_or_tensors: nn.Module | Iterable[torch.Tensor], *,
                             src: int = 0, bucket_mb: float = 25.0) -> None:
        """Copy group rank ``src``'s parameters (and a module's buffers) into every
        member's, in place: the start of data-parallel training, where every member
        must begin from the same network."""
        if isinstance(module_or_tensors, nn.Module):
            tensors = [*module_or_tensors.parameters(), *module_or_tensors.buffers()]
        else:
            tensors = list(module_or_tensors)
        with torch.no_grad():
            for bucket, flat in _buckets.flatten(tensors, self.device, bucket_mb):
                self.broadcast(flat, src)
                _buckets.unflatten(bucket, flat)

    # ------------------------------------------------------------------ end

    def destroy(self) -> None:
        """Release the group's connections (also done by :meth:`World.shutdown`)."""
        pg, self._pg = self._pg, None
        if pg is not None:
            try:
                pg.shutdown()
            except Exception:  # broken connections: nothing left to close politely
                pass
