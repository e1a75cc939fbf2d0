"""Sampling one batch from replay shards as if they were one buffer (Ape-X,
Horgan et al. 2018, arXiv:1803.00933; proportional PER, Schaul et al. 2016,
arXiv:1511.05952).

:class:`ShardedSampler` is transport-agnostic: it holds a list of shard clients
(in-process or RPC, see :mod:`rlpar.buffers.shard`) and draws one batch from all
of them with one round trip per shard, all in flight at once:

1. it draws ``batch_size`` stratified positions over the global sampling mass,
   using each shard's mass from its last reply (every reply carries size, mass and
   minimum mass, so there is no separate stats round trip);
2. each position falls into one shard's share of the mass; the shard is sent the
   position's fraction of its own share and maps it onto its own sum tree
   (shards that get no position are still asked, for fresh stats);
3. importance weights use the global count ``N = sum N_s``, global mass and global
   minimum mass from the replies: exactly what one buffer holding every shard's
   items would give.

Indices encode the shard: ``shard << 48 | serial``; ``update_priorities`` sends
each shard its part asynchronously (fire and forget: failures are counted and
logged), and the shard drops updates for slots overwritten since (serial check).

A shard that fails (dead peer, timeout) raises
:class:`~rlpar.errors.PeerUnavailable` naming it (``on_shard_failure="raise"``)
or is excluded from then on and the batch is drawn from the rest (``"drop"``).
A shard can join later (:meth:`ShardedSampler.add_shard`) under a new shard
number, and a dead one be retired (:meth:`ShardedSampler.retire`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlpar.buffers.prioritized import annealed_beta, importance_weights
from rlpar.buffers.replay import check_batch_size, check_indices, check_priorities
from rlpar.buffers.shard import ShardReply
from rlpar.buffers.storage import OutputPool
from rlpar.errors import PeerUnavailable
from rlpar.protocols import Sample

log = logging.getLogger(__name__)

SHARD_SHIFT = 48
SERIAL_MASK = (1 << SHARD_SHIFT) - 1
FAILURE_POLICIES = ("raise", "drop")


class ShardedSampler:
    """Transport-agnostic core: samples and updates a list of shard clients.

    ``clients`` are LocalShardClient / RpcShardClient (or anything with
    ``sample_at``/``update`` returning futures and a ``name``).
    """

    def __init__(
        self,
        *,
        clients: Sequence[Any],
        prioritized: bool,
        beta: float = 0.4,
        beta_final: float = 1.0,
        beta_anneal_steps: int = 0,
        on_shard_failure: str = "raise",
        seed: int | None = None,
    ) -> None:
        if on_shard_failure not in FAILURE_POLICIES:
            raise ValueError(
                f"on_shard_failure must be one of {FAILURE_POLICIES}, got {on_shard_failure!r}"
            )
        if not clients:
            raise ValueError("a sharded buffer needs at least one shard")
        self.clients = list(clients)
        self.prioritized = prioritized
        self.beta0, self.beta_final = float(beta), float(beta_final)
        self.beta_anneal_steps = int(beta_anneal_steps)
        self.on_shard_failure = on_shard_failure
        self.rng = np.random.default_rng(seed)
        self.alive = [True] * len(self.clients)
        # Last known (size, total mass, min mass) per shard; None until first reply.
        self.known: list[tuple[int, float, float] | None] = [None] * len(self.clients)
        self.sample_steps = 0
        self.update_errors = 0
        self.updates_sent = 0
        self.last_update_error: BaseException | None = None
        self._pending: set[torch.futures.Future] = set()
        self._dropped_size: dict[int, int] = {}
        self._pool = OutputPool()
        self._lock = threading.Lock()

    @property
    def beta(self) -> float:
        return annealed_beta(self.beta0, self.beta_final, self.sample_steps, self.beta_anneal_steps)

    def live_shards(self) -> list[int]:
        return [i for i, ok in enumerate(self.alive) if ok]

    def add_shard(self, client: Any) -> int:
        """Sample from ``client`` too (e.g. a shard that replaces a dead one); returns
        its shard number, which its sample indices carry."""
        with self._lock:
            self.clients.append(client)
            self.alive.append(True)
            self.known.append(None)
            return len(self.clients) - 1

    def retire(self, i: int) -> int:
        """Stop sampling shard ``i`` (its host died); returns its size in its last
        reply (0 if none came), also when a failed call dropped it already."""
        with self._lock:
            known = self.known[i]
            size = known[0] if known is not None else self._dropped_size.get(i, 0)
            self.alive[i] = False
            self.known[i] = None
            return size

    def forget_stats(self) -> None:
        """Ask every shard for its stats again before the next batch (e.g. after
        they loaded a checkpoint)."""
        with self._lock:
            self.known = [None] * len(self.known)

    def _fail(self, i: int, exc: BaseException) -> None:
        """A shard's call failed: raise, or (``"drop"``, for an unreachable shard
        only) exclude it. A shard that answered with an error (RemoteError: a bug or
        bad input, not a dead peer) is always raised."""
        if not isinstance(exc, PeerUnavailable):
            raise exc
        if not self.alive[i]:  # already excluded (a late reply from before)
            return
        name = self.clients[i].name
        err = PeerUnavailable(f"replay shard {name!r} is unavailable: {exc}")
        if self.on_shard_failure == "raise":
            raise err from exc
        log.warning("dropping replay shard %r: %s", name, err)
        self.alive[i] = False
        if self.known[i] is not None:
            self._dropped_size[i] = self.known[i][0]
        self.known[i] = None

    def _refresh(self, shards: list[int]) -> None:
        futures = {i: self.clients[i].sample_at(np.empty(0)) for i in shards}
        for i, fut in futures.items():
            try:
                reply = fut.wait()
            except Exception as exc:
                self._fail(i, exc)
                continue
            self.known[i] = (reply.size, reply.total, reply.min_mass)

    # ------------------------------------------------------------------ sampling

    def sample_async(self, batch_size: int) -> torch.futures.Future:
        """Start drawing a batch; the future's value is a :class:`Sample`."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
            raise TypeError(f"batch_size must be an int, got {batch_size!r}")
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        with self._lock:
            shards = self.live_shards()
            unknown = [i for i in shards if self.known[i] is None]
            if unknown:
                self._refresh(unknown)  # only before a shard's first reply
                shards = self.live_shards()
            if not shards:
                raise PeerUnavailable("every replay shard has failed; nothing to sample from")
            sizes = np.array([self.known[i][0] for i in shards])
            check_batch_size(batch_size, int(sizes.sum()))
            mass = np.array([self.known[i][1] for i in shards], dtype=np.float64)
            if mass.sum() <= 0:
                mass = sizes.astype(np.float64)
            self.sample_steps += 1
            beta = self.beta
            positions = self._positions(batch_size, mass)
        futures = [self.clients[i].sample_at(positions[j]) for j, i in enumerate(shards)]
        out: torch.futures.Future = torch.futures.Future()
        all_done = torch.futures.collect_all(futures)
        all_done.add_done_callback(lambda _: self._combine(out, shards, futures, batch_size, beta))
        return out

    def _positions(self, batch_size: int, mass: np.ndarray) -> list[np.ndarray]:
        """Stratified global positions, split by shard, as fractions of its share."""
        if self.prioritized:
            u = (np.arange(batch_size) + self.rng.random(batch_size)) / batch_size
        else:
            u = self.rng.random(batch_size)  # uniform with replacement, as ReplayBuffer
        cum = np.cumsum(mass)
        total = cum[-1]
        pos = u * total
        owner = np.minimum(np.searchsorted(cum, pos, side="right"), len(mass) - 1)
        start = cum - mass
        frac = (pos - start[owner]) / np.where(mass[owner] > 0, mass[owner], 1.0)
        np.clip(frac, 0.0, np.nextafter(1.0, 0.0), out=frac)
        return [frac[owner == j] for j in range(len(mass))]

    def _combine(
        self,
        out: torch.futures.Future,
        shards: list[int],
        futures: list[torch.futures.Future],
        batch_size: int,
        beta: float,
    ) -> None:
        try:
            replies: list[ShardReply] = []
            failed = False
            with self._lock:
                for i, fut in zip(shards, futures):
                    try:
                        reply = fut.wait()
                    except Exception as exc:
                        self._fail(i, exc)  # raises under "raise"
                        failed = True
                        continue
                    self.known[i] = (reply.size, reply.total, reply.min_mass)
                    replies.append(reply)
            if failed:
                # "drop": draw the whole batch again from the shards still alive, so
                # the batch keeps the single-buffer distribution over what is left.
                retry = self.sample_async(batch_size)
                retry.add_done_callback(lambda f: _forward(f, out))
                return
            out.set_result(self._assemble(shards, replies, beta))
        except BaseException as exc:  # noqa: B036 - delivered to whoever waits
            out.set_exception(exc)

    def _assemble(self, shards: list[int], replies: list[ShardReply], beta: float) -> Sample:
        parts = [(i, r) for i, r in zip(shards, replies) if r.serials.size]
        layouts = {r.shared for _, r in parts}
        if len(layouts) > 1:
            raise ValueError(f"shards store frames differently: {sorted(map(repr, layouts))}")
        shared = layouts.pop()
        batch = {}
        for k in parts[0][1].batch:
            cols = [r.batch[k] for _, r in parts]
            n_rows = sum(c.shape[0] for c in cols)
            dst = self._pool.empty((n_rows, *cols[0].shape[1:]), cols[0].dtype)
            batch[k] = np.concatenate(cols, out=dst)
        if shared is not None:  # shards sent frames as stored; split once, merged
            batch = shared.split(batch, self._pool.empty)
        indices = np.concatenate([(np.int64(i) << SHARD_SHIFT) | r.serials for i, r in parts])
        n = indices.size
        if not self.prioritized:
            return Sample(batch, indices, np.ones(n, dtype=np.float32))
        mass = np.concatenate([r.mass for _, r in parts])
        count = sum(r.size for r in replies)
        total = sum(r.total for r in replies)
        min_mass = min(r.min_mass for r in replies if r.size)
        return Sample(
            batch,
            indices,
            importance_weights(mass, total=total, min_leaf=min_mass, count=count, beta=beta),
        )

    def sample(self, batch_size: int) -> Sample:
        return self.sample_async(batch_size).wait()

    # ------------------------------------------------------------------ updates

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        """Send each shard its part, without waiting (failures are counted/logged)."""
        idx = check_indices(indices)
        p = check_priorities(priorities, idx.shape[0])
        if not self.prioritized or idx.size == 0:
            return
        if idx.min() < 0:
            raise ValueError("indices must be those returned by sample (non-negative)")
        shard_of = idx >> SHARD_SHIFT
        serials = idx & SERIAL_MASK
        for i in np.unique(shard_of).tolist():
            if i >= len(self.clients):
                raise ValueError(f"index names shard {i}, but there are {len(self.clients)}")
            if not self.alive[i]:
                continue
            mine = shard_of == i
            fut = self.clients[i].update(serials[mine], p[mine])
            with self._lock:
                self.updates_sent += 1
                self._pending.add(fut)
            fut.add_done_callback(lambda f, i=i: self._update_done(i, f))

    def _update_done(self, i: int, fut: torch.futures.Future) -> None:
        with self._lock:
            self._pending.discard(fut)
        try:
            fut.wait()
        except Exception as exc:
            with self._lock:
                self.update_errors += 1
                self.last_update_error = exc
            log.warning("priority update to replay shard %r failed: %s", self.clients[i].name, exc)

    def flush_updates(self) -> None:
        """Wait until every priority update sent so far has landed or failed (each
        remote call has its own timeout, so this cannot hang)."""
        with self._lock:
            pending = list(self._pending)
        for fut in pending:
            try:
                fut.wait()
            except Exception:  # counted by _update_done
                pass

    def __len__(self) -> int:
        """Items in live shards, as of their last replies."""
        with self._lock:
            unknown = [i for i in self.live_shards() if self.known[i] is None]
            if unknown:
                self._refresh(unknown)
            return sum(self.known[i][0] for i in self.live_shards())


def _forward(src: torch.futures.Future, dst: torch.futures.Future) -> None:
    try:
        dst.set_result(src.wait())
    except BaseException as exc:  # noqa: B036
        dst.set_exception(exc)
