"""A replay split over several learners (``--learners K`` with ``--replay-placement
learner``): each learner's shard in its own process, kept as one part of every
checkpoint (:mod:`rlpar.checkpoint`'s parts, as the shards of a sharded replay are),
which that learner writes and loads when the first learner asks."""

from __future__ import annotations

from typing import Any

from experiments.roles.actor_learner.data import REPLAY, data_name


class LearnerShards:
    """A replay split over K learners (``--replay-placement learner``): learner ``k``
    hosts shard ``k`` (``hosted``) and serves ``replay.<k>/save`` and ``/load``, which
    write and read it as part ``shard-<k>-of-<K>`` of a checkpoint, the parts
    machinery of sharded replays (:mod:`rlpar.checkpoint`). The first learner, which
    keeps the run, asks every learner for its part at each checkpoint and resume."""

    def __init__(self, group: Any, *, hosted: Any, learner: int, learners: int) -> None:
        from rlpar.buffers.distributed import shard_part_names

        self.group, self.hosted = group, hosted
        self.names = [data_name(REPLAY, k, learners) for k in range(learners)]
        self.parts = shard_part_names(learners)
        self.part, self.learner = self.parts[learner], learner
        group.register(f"{self.names[learner]}/save", self.save_part)
        group.register(f"{self.names[learner]}/load", self.load_part)

    def save_part(self, directory: str, *, step: int, kind: str, meta: dict[str, Any]) -> int:
        from rlpar.checkpoint import save_part

        return save_part(directory, self.hosted.state_dict(), kind=kind, step=step, part=self.part,
                         meta=meta).stat().st_size

    def load_part(self, checkpoint: str, *, kind: str, meta: dict[str, Any]) -> int:
        from rlpar.checkpoint import load_part

        state, _ = load_part(checkpoint, self.part, kind=kind, expect_meta=meta)
        self.hosted.load_state_dict(state)
        return len(self.hosted)

    def part_names(self) -> list[str]:
        return list(self.parts)

    def load_keys(self) -> list[str]:
        return [f"{name}/load" for name in self.names]

    def save_parts(self, directory: str, *, step: int, kind: str, meta: dict[str, Any] | None = None) -> int:
        """Every learner writes its part of checkpoint ``step`` at once; the bytes written."""
        return self._each("save", str(directory), meta=meta, step=step, kind=kind)

    def load_parts(self, checkpoint: str, *, kind: str, meta: dict[str, Any] | None = None) -> int:
        """Every learner loads its part; the transitions in all shards after."""
        return self._each("load", str(checkpoint), meta=meta, kind=kind)

    def _each(self, op: str, path: str, *, meta: dict[str, Any] | None, **kwargs: Any) -> int:
        # Every learner at once, this one by a local call; a dead one fails the lot
        # (PeerUnavailable: the checkpointer skips that checkpoint).
        def meta_of(k: int) -> dict[str, Any]:
            return {**(meta or {}), "shard": k, "shards": len(self.names)}

        futures = [self.group.call_async(f"{name}/{op}", path, meta=meta_of(k), **kwargs)
                   for k, name in enumerate(self.names) if k != self.learner]
        local = self.save_part if op == "save" else self.load_part
        return local(path, meta=meta_of(self.learner), **kwargs) + sum(int(f.wait()) for f in futures)
