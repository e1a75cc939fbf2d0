"""CollectiveGroup: torch.distributed collectives on a subset of the world's ranks.

Needs ``World(process_group_backend="gloo")`` (CPU tensors) or ``"nccl"`` (CUDA
tensors). Creating one is collective: every rank of the world must create the same
groups in the same order (a torch.distributed rule), members or not. Beside the six
collectives there are point-to-point ``send``/``recv``/``isend``/``irecv``.

For collectives among chosen ranks beside actors that die and rejoin (which can never
re-enter the default process group), use :meth:`World.create_learner_group` instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

_OPS = {
    "sum": dist.ReduceOp.SUM,
    "product": dist.ReduceOp.PRODUCT,
    "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX,
}


class CollectiveGroup:
    """Collectives among ``ranks``; ranks outside the group get a handle whose methods
    raise RuntimeError. Source/destination ranks are world ranks."""

    def __init__(self, *, world, ranks: Sequence[int]) -> None:
        ranks = sorted(int(r) for r in ranks)
        if not ranks:
            raise ValueError("a CollectiveGroup needs at least one rank")
        if len(set(ranks)) != len(ranks):
            raise ValueError(f"duplicate ranks in {ranks}")
        bad = [r for r in ranks if not 0 <= r < world.world_size]
        if bad:
            raise ValueError(f"ranks {bad} are outside the world of size {world.world_size}")
        self.ranks = ranks
        self.size = len(ranks)
        self.current_rank = world.rank
        self._timeout = timedelta(seconds=world.rpc_timeout)
        self._group = dist.new_group(ranks=ranks, timeout=self._timeout)

    @property
    def is_member(self) -> bool:
        return self.current_rank in self.ranks

    def _check(self, what: str) -> None:
        if not self.is_member:
            raise RuntimeError(f"{what}: rank {self.current_rank} is not in this group {self.ranks}")

    def _check_src(self, what: str, rank: int) -> None:
        if rank not in self.ranks:
            raise ValueError(f"{what}: rank {rank} is not in this group {self.ranks}")

    @staticmethod
    def _op(op: str):
        try:
            return _OPS[op]
        except KeyError:
            raise ValueError(f"op must be one of {sorted(_OPS)}, got {op!r}") from None

    def all_reduce(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """Reduce ``tensor`` across the group in place; returns it."""
        self._check("all_reduce")
        dist.all_reduce(tensor, op=self._op(op), group=self._group)
        return tensor

    def reduce(self, tensor: torch.Tensor, dst: int, op: str = "sum") -> torch.Tensor:
        """Reduce into ``tensor`` on world rank ``dst`` (other ranks' tensors are scratch)."""
        self._check("reduce")
        self._check_src("reduce", dst)
        dist.reduce(tensor, dst=dst, op=self._op(op), group=self._group)
        return tensor

    def broadcast(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        """Copy ``tensor`` of world rank ``src`` into every member's ``tensor``."""
        self._check("broadcast")
        self._check_src("broadcast", src)
        dist.broadcast(tensor, src=src, group=self._group)
        return tensor

    def all_gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """Every member's ``tensor`` (same shape everywhere), in group-rank order."""
        self._check("all_gather")
        out = [torch.empty_like(tensor) for _ in range(self.size)]
        dist.all_gather(out, tensor, group=self._group)
        return out

    def gather(self, tensor: torch.Tensor, dst: int) -> list[torch.Tensor] | None:
        """Members' tensors collected on ``dst`` (group-rank order); None elsewhere."""
        self._check("gather")
        self._check_src("gather", dst)
        out = [torch.empty_like(tensor) for _ in range(self.size)] if self.current_rank == dst else None
        dist.gather(tensor, gather_list=out, dst=dst, group=self._group)
        return out

    def scatter(self, out: torch.Tensor, src: int,
                chunks: Sequence[torch.Tensor] | None = None) -> torch.Tensor:
        """Member i (group-rank order) receives ``chunks[i]`` from ``src`` into ``out``."""
        self._check("scatter")
        self._check_src("scatter", src)
        if self.current_rank == src:
            if chunks is None or len(chunks) != self.size:
                raise ValueError(f"scatter: src must pass {self.size} chunks, got "
                                 f"{None if chunks is None else len(chunks)}")
            chunks = list(chunks)
        else:
            chunks = None
        dist.scatter(out, scatter_list=chunks, src=src, group=self._group)
        return out

    def _check_peer(self, what: str, rank: int) -> None:
        self._check(what)
        self._check_src(what, rank)
        if rank == self.current_rank:
            raise ValueError(f"{what}: rank {rank} cannot exchange with itself")

    def isend(self, tensor: torch.Tensor, dst: int):
        """Start sending ``tensor`` to world rank ``dst``; returns torch's Work
        (``.wait()``, within the world's rpc_timeout). Leave ``tensor`` alone until then."""
        self._check_peer("isend", dst)
        return dist.isend(tensor, dst=dst, group=self._group)

    def irecv(self, tensor: torch.Tensor, src: int):
        """Start receiving into ``tensor`` from world rank ``src``; returns torch's Work."""
        self._check_peer("irecv", src)
        return dist.irecv(tensor, src=src, group=self._group)

    def send(self, tensor: torch.Tensor, dst: int) -> None:
        """Send ``tensor`` to world rank ``dst``."""
        self._check_peer("send", dst)
        dist.send(tensor, dst=dst, group=self._group)

    def recv(self, tensor: torch.Tensor, src: int) -> torch.Tensor:
        """Receive into ``tensor`` from world rank ``src``; returns it."""
        self._check_peer("recv", src)
        dist.recv(tensor, src=src, group=self._group)
        return tensor

    def barrier(self) -> None:
        """Block until every member reached it (gloo: within the world's rpc_timeout)."""
        self._check("barrier")
        dist.monitored_barrier(group=self._group, timeout=self._timeout) \
            if dist.get_backend(self._group) == "gloo" else dist.barrier(group=self._group)

    def __repr__(self) -> str:
        return f"CollectiveGroup(ranks={self.ranks})"
