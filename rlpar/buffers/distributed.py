"""Replay sharded over the members of an RpcGroup (Ape-X, Horgan et al. 2018,
arXiv:1803.00933; proportional PER, Schaul et al. 2016, arXiv:1511.05952).

Every shard-hosting member keeps a local shard: ``add`` writes locally, with no
network. Any member samples all shards through a
:class:`~rlpar.buffers.sharded_sampler.ShardedSampler` (one round trip per shard,
the batch and its importance weights as one buffer holding every shard's items
would give; indices encode the shard). Every remote call has a timeout; a shard
that fails raises or is dropped (``on_shard_failure``).

A member whose process died and was restarted alone cannot host its shard again:
a process that had called the dead one cannot call its replacement (TensorPipe keeps
the broken connection, see :mod:`rlpar.distributed.rendezvous`). So the sampler
hosts a fresh, empty shard under the dead member's service keys (:meth:`rehost`),
which the replacement fills with its adds (it calls; nobody calls it) and which
joins the sampling under a new shard number (priority updates still in flight for
the dead shard's items are dropped, never applied to the new one's).

Checkpoints: every shard writes its own part (``shard-<i>-of-<n>``, see
:mod:`rlpar.checkpoint`) of the same step, where it is hosted (:meth:`save_parts`),
and loads it back (:meth:`load_parts`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from rlpar.buffers.frames import SharedFrames
from rlpar.buffers.prioritized import PrioritizedReplayBuffer
from rlpar.buffers.replay import ReplayBuffer
from rlpar.buffers.shard import LocalShardClient, ReplayShard, RpcShardClient, register_shard
from rlpar.buffers.sharded_sampler import (
    FAILURE_POLICIES,
    SERIAL_MASK,
    SHARD_SHIFT,
    ShardedSampler,
)
from rlpar.errors import PeerUnavailable, StateError
from rlpar.protocols import Sample

log = logging.getLogger(__name__)

# The sampler and the index layout live in sharded_sampler; re-exported for existing imports.
__all__ = [
    "FAILURE_POLICIES",
    "SERIAL_MASK",
    "SHARD_SHIFT",
    "DistributedPrioritizedReplayBuffer",
    "DistributedReplayBuffer",
    "ShardedSampler",
    "shard_part_names",
]


def shard_part_names(shards: int) -> list[str]:
    """The checkpoint parts of a replay of ``shards`` shards, one per shard."""
    return [f"shard-{i}-of-{shards}" for i in range(shards)]


class DistributedReplayBuffer:
    """Uniform replay sharded over ``shard_members`` of ``group`` (default: all).

    Construct it in every member with the same arguments, then ``group.barrier()``
    so that every shard's services are registered before anyone calls them. A
    shard-hosting member ``add``s locally; any member may ``sample`` (the first
    sample asks every shard for its stats once; after that they ride on replies). A member without a shard (an actor
    when shards live on dedicated replay processes) sends its adds to
    ``home_shard`` (default: spread by member index). ``timeout`` bounds every
    remote call; ``on_shard_failure`` is ``"raise"`` or ``"drop"``. ``rehosted``: this
    member replaces one that died, whose shard the sampler now hosts (:meth:`rehost`):
    it hosts none itself and adds there.
    """

    def __init__(
        self,
        *,
        group: Any,
        name: str,
        capacity: int,
        shard_members: Sequence[str] | None = None,
        timeout: float = 30.0,
        on_shard_failure: str = "raise",
        home_shard: str | None = None,
        spec: Mapping[str, Any] | None = None,
        seed: int | None = None,
        shared_frames: SharedFrames | None = None,
        rehosted: bool = False,
    ) -> None:
        self._setup(
            group=group,
            name=name,
            shard_members=shard_members,
            timeout=timeout,
            on_shard_failure=on_shard_failure,
            home_shard=home_shard,
            seed=seed,
            rehosted=rehosted,
            capacity=capacity,
            make_local=lambda: ReplayBuffer(
                capacity=capacity, spec=spec, seed=seed, shared_frames=shared_frames
            ),
            prioritized=False,
            sampler_options={},
        )

    def _setup(
        self,
        *,
        group,
        name,
        shard_members,
        timeout,
        on_shard_failure,
        home_shard,
        seed,
        make_local,
        prioritized,
        sampler_options,
        capacity,
        rehosted=False,
    ) -> None:
        if not isinstance(name, str) or not name or "/" in name or "@" in name:
            raise ValueError(f"name must be a non-empty string without '/' or '@', got {name!r}")
        members = list(group.members if shard_members is None else shard_members)
        unknown = [m for m in members if m not in group.members]
        if unknown:
            raise ValueError(f"shard_members {unknown} are not members of {group!r}")
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        if on_shard_failure not in FAILURE_POLICIES:
            raise ValueError(
                f"on_shard_failure must be one of {FAILURE_POLICIES}, got {on_shard_failure!r}"
            )
        self.group, self.name, self.shard_members = group, name, members
        self.timeout = timeout
        me = group.current_member
        self.shard: ReplayShard | None = None
        self._make_local, self._shard_capacity = make_local, capacity
        if me in members and not rehosted:
            self.shard = ReplayShard(make_local())
            register_shard(group, name, self.shard)
        clients = [
            LocalShardClient(self.shard, m)
            if m == me and self.shard is not None
            else RpcShardClient(group, name, m, timeout)
            for m in members
        ]
        # Which sampler shard number serves each member's shard now (see rehost).
        self._serving = {m: i for i, m in enumerate(members)}
        if home_shard is None and me in members:
            home_shard = me  # a rehosted member adds to its own shard, hosted elsewhere
        elif home_shard is None:
            home_shard = members[group.members.index(me) % len(members)]
        elif home_shard not in members:
            raise ValueError(f"home_shard {home_shard!r} is not one of {members}")
        self.home = clients[members.index(home_shard)]
        self.sampler = ShardedSampler(
            clients=clients,
            prioritized=prioritized,
            on_shard_failure=on_shard_failure,
            seed=None if seed is None else seed + 7919 * (group.members.index(me) + 1),
            **sampler_options,
        )

    def add(self, batch: Mapping[str, Any], priorities: Any | None = None) -> None:
        """Add to this member's shard (no network), or to the home shard if none."""
        if self.shard is not None:
            self.shard.add(batch, priorities)
        else:
            self.home.add(batch, priorities)

    def sample(self, batch_size: int) -> Sample:
        return self.sampler.sample(batch_size)

    def sample_async(self, batch_size: int) -> torch.futures.Future:
        return self.sampler.sample_async(batch_size)

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        self.sampler.update_priorities(indices, priorities)

    def flush_updates(self) -> None:
        self.sampler.flush_updates()

    def __len__(self) -> int:
        return len(self.sampler)

    @property
    def local_size(self) -> int:
        return 0 if self.shard is None else len(self.shard)

    # -------------------------------------------------------- restarts, checkpoints

    def rehost(self, member: str, *, added: int = 0) -> int:
        """Host a fresh, empty shard here for ``member``, whose process died (its
        replacement, built with ``rehosted=True``, adds to it); sampling excludes the
        dead shard and includes this one from now on. Returns the transitions the
        dead shard held (lost): its size at its last reply, or, where more were
        ``added`` to it since (what the dead process reported adding: sizes only
        ride on sampling replies, so the last one lags), that, up to a shard's
        capacity. A member whose shard is already hosted here (its earlier
        replacement died too) keeps that shard: nothing is lost."""
        if member not in self._serving:
            raise ValueError(f"{member!r} hosts no shard of {self.name!r} ({self.shard_members})")
        if member == self.group.current_member:
            raise ValueError(f"{member!r} cannot take over its own shard")
        if isinstance(added, bool) or not isinstance(added, int) or added < 0:
            raise ValueError(f"added must be an int >= 0, got {added!r}")
        if self.hosts_shard_of(member):
            return 0
        lost = max(self.sampler.retire(self._serving[member]), min(added, self._shard_capacity))
        shard = ReplayShard(self._make_local())
        register_shard(self.group, self.name, shard, member=member, replace=True)
        self._serving[member] = self.sampler.add_shard(LocalShardClient(shard, member))
        log.warning("replay shard of %r is hosted by %r from now on (restored empty; %d "
                    "transitions lost)", member, self.group.current_member, lost)
        return lost

    def hosts_shard_of(self, member: str) -> bool:
        """Whether ``member``'s shard lives in this process (its own, or rehosted here)."""
        if member not in self._serving:
            raise ValueError(f"{member!r} hosts no shard of {self.name!r} ({self.shard_members})")
        return isinstance(self.sampler.clients[self._serving[member]], LocalShardClient)

    def follow(self, member: str) -> None:
        """``member``'s shard was rehosted by another sampler (:meth:`rehost` in another
        process, e.g. the first of several learners): stop sampling the dead one and
        sample the new one where its service keys lead now. Priority updates in flight
        for the dead one's items are dropped, as in :meth:`rehost`."""
        from rlpar.buffers.shard import service_keys

        if member not in self._serving:
            raise ValueError(f"{member!r} hosts no shard of {self.name!r} ({self.shard_members})")
        self.sampler.retire(self._serving[member])
        self.group.forget_hosts(list(service_keys(self.name, member).values()))
        client = RpcShardClient(self.group, self.name, member, self.timeout)
        self._serving[member] = self.sampler.add_shard(client)

    def part_names(self) -> list[str]:
        """The checkpoint part of each shard, in ``shard_members`` order."""
        return shard_part_names(len(self.shard_members))

    def _each_shard(self, call: Any) -> list[Any]:
        """``call(client, i)`` for every member's shard at once; their results. A
        shard's own error (e.g. CheckpointMismatch, or RemoteError carrying it) is
        raised as is, PeerUnavailable names the shards that are down or unreachable."""
        futures, down = {}, []
        for i, member in enumerate(self.shard_members):
            k = self._serving[member]
            if not self.sampler.alive[k]:
                down.append(member)
                continue
            futures[member] = call(self.sampler.clients[k], i)
        results, failed, errors = [], [], []
        for member, fut in futures.items():
            try:
                results.append(fut.wait())
            except PeerUnavailable as exc:
                failed.append(f"{member}: {exc}")
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]
        if down or failed:
            raise PeerUnavailable(
                f"replay {self.name!r}: shard(s) down {down}, failed {failed}"
            )
        return results

    def save_parts(self, directory: str, *, step: int, kind: str,
                   meta: Mapping[str, Any] | None = None) -> int:
        """Every shard writes its part of checkpoint ``step`` into ``directory`` (a
        path its host can write: this machine's, or a shared file system), all at
        once; returns the bytes written. PeerUnavailable names shards that could not
        (down, or failed), after the others have written theirs."""
        names = self.part_names()
        return sum(self._each_shard(lambda client, i: client.save(
            str(directory), step=step, part=names[i], kind=kind,
            meta={**(meta or {}), "shard": i, "shards": len(names)})))

    def load_parts(self, checkpoint: str, *, kind: str, meta: Mapping[str, Any] | None = None) -> int:
        """Every shard loads its part of the checkpoint whose main file is
        ``checkpoint``; returns the items in all shards after."""
        names = self.part_names()
        sizes = self._each_shard(lambda client, i: client.load(
            str(checkpoint), part=names[i], kind=kind,
            meta={**(meta or {}), "shard": i, "shards": len(names)}))
        self.sampler.forget_stats()
        return sum(sizes)

    def state_dict(self) -> dict[str, Any]:
        """This member's shard (each member checkpoints its own)."""
        if self.shard is None:
            return {}
        with self.shard.lock:
            return self.shard.buffer.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """This member's shard from :meth:`state_dict` (``{}`` for a member without one)."""
        if self.shard is not None:
            with self.shard.lock:
                self.shard.buffer.load_state_dict(state)
        elif not isinstance(state, Mapping) or state:  # another member's shard: loading nothing would lose it
            raise StateError(f"{type(self).__name__}.load_state_dict", "state",
                             f"holds a shard, but {self.group.current_member!r} hosts none "
                             f"of {self.name!r} (shards: {self.shard_members})")


class DistributedPrioritizedReplayBuffer(DistributedReplayBuffer):
    """Proportional prioritized replay sharded over an RpcGroup (Ape-X).

    ``alpha``, ``eps`` and ``tree_arity`` act in the shards, the ``beta`` schedule
    in the sampler; the rest as in :class:`DistributedReplayBuffer`.
    """

    def __init__(
        self,
        *,
        group: Any,
        name: str,
        capacity: int,
        alpha: float = 0.6,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_anneal_steps: int = 0,
        eps: float = 1e-6,
        tree_arity: int = 16,
        shard_members: Sequence[str] | None = None,
        timeout: float = 30.0,
        on_shard_failure: str = "raise",
        home_shard: str | None = None,
        spec: Mapping[str, Any] | None = None,
        seed: int | None = None,
        shared_frames: SharedFrames | None = None,
        rehosted: bool = False,
    ) -> None:
        # Validate the hyper-parameters in every member, shard host or not.
        PrioritizedReplayBuffer(
            capacity=1,
            alpha=alpha,
            beta=beta,
            beta_final=beta_final,
            beta_anneal_steps=beta_anneal_steps,
            eps=eps,
        )
        self._setup(
            group=group,
            name=name,
            shard_members=shard_members,
            timeout=timeout,
            on_shard_failure=on_shard_failure,
            home_shard=home_shard,
            seed=seed,
            rehosted=rehosted,
            capacity=capacity,
            make_local=lambda: PrioritizedReplayBuffer(
                capacity=capacity,
                alpha=alpha,
                beta=beta,
                beta_final=beta_final,
                beta_anneal_steps=beta_anneal_steps,
                eps=eps,
                spec=spec,
                seed=seed,
                tree_arity=tree_arity,
                shared_frames=shared_frames,
            ),
            prioritized=True,
            sampler_options={
                "beta": beta,
                "beta_final": beta_final,
                "beta_anneal_steps": beta_anneal_steps,
            },
        )
