"""The data path of an actor-learner job, as config sections: the prioritized replay
(Ape-X's) or the FIFO queue of unrolls (IMPALA's). A job has the one its builder's
:class:`~algorithms.builder.Flow` names."""

from __future__ import annotations

import dataclasses
from typing import Literal

from experiments.runtime.cli import field, flag


@dataclasses.dataclass
class ReplayConfig:
    """The prioritized replay (Schaul et al. 2016) and where it lives.

    Which ``--replay-placement`` (figures from ``python -m experiments.bench.scale.apex``
    on 2 shared cores: Atari batches of 128 transitions from 1 to 64 actor processes,
    the paper's 12.5K transitions/s together, a learner drawing batches of 512 as fast
    as it can; docs/benchmarks.md, "Ape-X at scale"):

    - ``learner`` (default): one buffer in the learner's process; actors send their
      adds (asynchronous, 4 in flight) and the learner samples with a local call. It
      took 12.4K/s from 4 to 64 actors while the learner drew 510-590 batches/s (the
      paper's learner: 19). The choice on one machine, and on a cluster while the
      learner's machine holds the replay (about 50 KB per Atari transition: 2.5 GB
      per 50K) and has a core to spare for the adds.
    - ``replay-ranks``: shards on ``--replay-ranks`` processes of their own; actors add
      to one, the learner samples every shard (one round trip each, prefetched). For a
      replay larger than the learner's machine, with the replay ranks on cores
      (machines) of their own: sharing 2 cores with the actors, the learner drew about
      100 batches/s with up to 16 actors, 58 with 32 and 16 with 64.
    - ``actors``: a shard in every actor; adds are local (no transfer at all), but the
      learner asks every actor for every batch: 157 batches/s with 1 actor, 37 with 16,
      14 with 64. For a few actors whose link to the learner is slow.

    With several learners (``--learners K``), ``learner`` splits the replay into K
    shards of ``--replay-capacity / K``, one in each learner's process, each filled by
    the actors ``i mod K`` and sampled by its own learner with a local call; with
    ``replay-ranks`` or ``actors`` every learner samples every shard
    (``experiments.roles.actor_learner.data``).
    """

    replay_capacity: int | None = field(None, help=(
        "replay capacity in env steps (default: the algorithm's, e.g. 100,000); a replay of "
        "sequences holds this / the steps each adds (R2D2: / --period)"))
    replay_placement: Literal["learner", "actors", "replay-ranks"] = field("learner", help=(
        "where the replay lives: in the learner process (the choice on one machine and for "
        "tens of actors; with --learners K, a shard in each learner's), as shards on the actors "
        "(few actors, slow links), or on dedicated replay ranks (a replay too large for the "
        "learner's machine); docs/torchrun.md: Ape-X on a cluster"))
    replay_ranks: int = field(1, help="dedicated replay ranks (with --replay-placement replay-ranks)")
    prefetch: int = field(-1, help=(
        "replay batches the learner keeps in flight (0: sample synchronously; -1: auto, 0 with the "
        "replay in the learner process, 2 with remote shards)"))
    priority_alpha: float = field(0.6, help="prioritization exponent")
    priority_beta: float = field(0.4, help="importance-sampling exponent")
    share_frames: bool = field(True, help=(
        "frame-stack observations (Atari): store each distinct frame once, however many "
        "transitions show it (about one 84x84 frame per transition: 1M transitions in 7 GB)"))

    def validate(self) -> None:
        if self.replay_capacity is not None and self.replay_capacity < 1:
            raise ValueError(f"{flag('replay_capacity')} must be >= 1, got {self.replay_capacity}")
        if self.replay_ranks < 0:
            raise ValueError(f"{flag('replay_ranks')} must be >= 0, got {self.replay_ranks}")
        if self.replay_placement == "replay-ranks" and self.replay_ranks < 1:
            raise ValueError(f"{flag('replay_ranks')} must be >= 1 with --replay-placement replay-ranks")
        if self.prefetch < -1:
            raise ValueError(f"{flag('prefetch')} must be >= -1 (-1: auto), got {self.prefetch}")
        if self.priority_alpha < 0:
            raise ValueError(f"{flag('priority_alpha')} must be >= 0, got {self.priority_alpha}")
        if not 0.0 <= self.priority_beta <= 1.0:
            raise ValueError(f"{flag('priority_beta')} must be in [0, 1], got {self.priority_beta}")

    def extra_ranks(self) -> int:
        return self.replay_ranks if self.replay_placement == "replay-ranks" else 0

    def check_batches(self, batch_size: int | None, *, learners: int, serial: bool, steps_per_item: int = 1,
                      item: str = "") -> None:
        """ValueError naming the flags where the replay could never give a learner a batch
        of ``batch_size`` items (None: not filled yet), or where ``--serial`` cannot hold
        it. ``steps_per_item``: env steps per item (the replay holds ``replay_capacity //
        steps_per_item`` items), ``item``: how the message names that division
        (R2D2's ``" / --period 8"``)."""
        if serial and self.replay_placement != "learner":
            raise ValueError(f"{flag('serial')} keeps the replay in its one process: use --replay-placement learner")
        if self.replay_capacity is None:  # the algorithm's, filled with the env's defaults
            return
        capacity = max(1, self.replay_capacity // steps_per_item)
        held = f"{flag('replay_capacity')} {self.replay_capacity}{item}"
        if batch_size is not None and batch_size > capacity:
            raise ValueError(f"{flag('batch_size')} {batch_size} exceeds {held}"
                             + (f" = {capacity}" if steps_per_item > 1 else ""))
        shard = capacity // max(1, learners)
        if learners > 1 and self.replay_placement == "learner" and batch_size is not None and batch_size > shard:
            # A shard that never holds a batch would hold every learner back for good.
            raise ValueError(f"{flag('batch_size')} {batch_size} exceeds a learner's replay shard: "
                             f"{held} / --learners {learners} = {shard}")

    def check_fits(self, *, item_bytes: int, steps_per_item: int, learners: int, num_actors: int,
                   what: str, available: int | None = None) -> None:
        """ValueError, before any process starts, where one holder's share of the replay
        (the whole of it, a learner's shard, an actor's or a replay rank's) needs more
        than this machine's available memory for ``item_bytes`` a stored item; numpy
        would otherwise fail on its first add, or the kernel kill the process later.
        ``what``: how the message names the items and their contents. ``available``: bytes (None:
        read from /proc/meminfo; no check where it cannot be read)."""
        if self.replay_capacity is None:
            return
        available = available_memory() if available is None else available
        if available is None:
            return
        holders = max(1, self.shards(learners=learners, num_actors=num_actors))
        items = max(1, self.replay_capacity // steps_per_item) // holders
        need = items * item_bytes
        if need <= available:
            return
        fits = max(1, available // 2 // item_bytes) * steps_per_item * holders
        share = "" if holders <= 1 else f" (one of {holders} {self.replay_placement} shards)"
        raise ValueError(f"{flag('replay_capacity')} {self.replay_capacity} needs {need / 2**30:.1f} GiB{share} "
                         f"for {items:,} {what} ({item_bytes / 2**20:.2f} MiB each), more than the "
                         f"{available / 2**30:.1f} GiB this machine has available: give a smaller "
                         f"{flag('replay_capacity')} (e.g. {fits:,}, which takes half of it)")

    def shards(self, *, learners: int, num_actors: int) -> int:
        """How many shards the replay is split into (0: one replay in the learner)."""
        split = learners if learners > 1 else 0  # a replay split over the learners
        return {"actors": num_actors, "replay-ranks": self.replay_ranks, "learner": split}[self.replay_placement]

    def check_resume(self, run_dir: str, *, learners: int, num_actors: int) -> None:
        """Before any process starts: the run to resume has a complete checkpoint for this
        replay's shards (CheckpointMismatch for shards of another count)."""
        import os

        from experiments.runtime.rundir import RunDir
        from rlpar.buffers.distributed import shard_part_names
        from rlpar.checkpoint import latest_checkpoint

        directory = RunDir(run_dir).checkpoints
        shards = self.shards(learners=learners, num_actors=num_actors)
        if shards and directory and os.path.isdir(directory):  # not on a node without the run dir
            latest_checkpoint(directory, parts=shard_part_names(shards))

    def prefetch_depth(self) -> int:
        """``--prefetch`` resolved: a replay in the learner process samples with a local
        call (tens of microseconds with the compiled sum tree), where a prefetch thread
        only adds GIL hand-offs (measured: 2.8 vs 0.7 ms per batch spent waiting on a
        loaded 2-core box); remote shards answer over RPC, which prefetching hides."""
        if self.prefetch >= 0:
            return self.prefetch
        return 0 if self.replay_placement == "learner" else 2


@dataclasses.dataclass
class QueueConfig:
    """The bounded FIFO queue of unrolls between IMPALA's actors and its learner: it
    lives in the learner's process; an actor whose unroll finds it full waits (back-
    pressure) rather than the learner learning from ever staler data."""

    queue_capacity: int = field(64, help=(
        "unrolls the learner's queue holds; actors wait while it is full"))

    def validate(self) -> None:
        if self.queue_capacity < 1:
            raise ValueError(f"{flag('queue_capacity')} must be >= 1, got {self.queue_capacity}")


def available_memory() -> int | None:
    """This machine's available memory in bytes (Linux's MemAvailable), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None
