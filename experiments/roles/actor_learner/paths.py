"""Each data path of the actor-learner program as one typed part, made once from the
job's flow and config (:func:`data_path`): which ranks host the data, who samples
what, how a checkpoint keeps it and what becomes of a dead actor's share. The roles
call its methods; none of them tests a placement's name (the placements and the
queue: :mod:`experiments.roles.actor_learner.data`).

- :class:`UnrollQueue`: a queue of unrolls in each learner's process (IMPALA's);
- :class:`LearnerReplay` (``--replay-placement learner``): the replay in the
  learners' processes, split into one shard per learner with several;
- :class:`ActorShards` (``actors``): a shard on every actor, dropped from sampling
  when its actor dies and rehosted by the learner for the replacement;
- :class:`ReplayRanks` (``replay-ranks``): shards on dedicated replay ranks, never
  dropped (a dead one restarts the world);
- :class:`Gradients`: A3C's gradient server in learner 0's process, to which actors
  push gradients (:mod:`experiments.roles.actor_learner.gradients`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from experiments.roles.actor_learner.data import (
    QUEUE,
    REPLAY,
    LearnerData,
    Unrolls,
    data_name,
    follow_key,
    local_replay,
    replay_items,
    replay_layout,
    sharded_replay,
)


class DataPath:
    """What every data path answers (the defaults: data in the learners' processes,
    no shard elsewhere, nothing to compile)."""

    data = ""  # "replay" or "queue"
    placement: str | None = None  # --replay-placement, as checkpoints' headers write it
    extra_ranks = 0  # ranks of its own, after the learners (the role rule)
    kernels = False  # uses the replay's compiled kernels (announced on a first run)
    rehosts_dead_shards = False  # a dead actor's shard moves to the learner
    shard_role: str | None = None  # the role whose ranks host remote shards
    capacity = 0  # what it holds at most (a bound on the count of reported adds)
    noun, unit = "", ""  # "learner 1's <noun> holds 12 of the 100 <unit> it needs" (a replay: flow.items)

    def hosts_data(self, rank: int | None, *, learners: int) -> bool:
        """Whether rank ``rank`` (None: not told) hosts replay data, so loads the
        replay's kernels while the rendezvous waits."""
        return False

    def shard_members(self, names: Sequence[str], roles: Sequence[str]) -> list[str]:
        """The ranks (by name) that host remote shards, in rank order (none here)."""
        return [name for name, role in zip(names, roles) if role == self.shard_role] if self.shard_role else []

    def actor_keeps_shard(self, *, restarted: bool) -> bool:
        """Whether an ending actor stays to serve its shard until the last checkpoint."""
        return False

    def learner_data(self, setup: Any, group: Any | None, shards: list[str], *, learner: int = 0) -> LearnerData:
        raise NotImplementedError

    def actor_sink(self, setup: Any, group: Any, shards: list[str], *, index: int, rehosted: bool = False) -> Any:
        raise NotImplementedError

    def follow(self, group: Any, data: LearnerData, *, learner: int) -> None:
        """Learner ``learner`` >= 1: take part in the first learner's rehosting of a
        dead actor's shard (nothing to take part in here)."""

    def checkpoint_meta(self, setup: Any, data: LearnerData) -> dict[str, Any]:
        """What a checkpoint's header says of the data path (a resume refuses another)."""
        return {"data": self.data}

    def load_keys(self, data: LearnerData) -> list[str]:
        """The services that load the checkpoint parts of ``data`` (none here)."""
        return []


class UnrollQueue(DataPath):
    """A queue of unrolls in each learner's process (``queue.<k>`` with several):
    actor ``i`` puts to learner ``i mod K``'s. On-policy data: no checkpoint keeps it."""

    data, noun, unit = "queue", "queue", "unrolls"

    def __init__(self, queue: Any) -> None:
        self.queue = queue  # QueueConfig

    def learner_data(self, setup: Any, group: Any | None, shards: list[str], *, learner: int = 0) -> LearnerData:
        from rlpar.buffers import HostedQueue, TrajectoryQueue

        flow, run = setup.flow, setup.run
        queue = TrajectoryQueue(capacity=self.queue.queue_capacity)
        name = data_name(QUEUE, learner, setup.learners)
        hosted = HostedQueue.host(group, name, queue) if group is not None else queue
        source = Unrolls(hosted, collate=setup.builder.collate, batch_size=flow.batch_size, timeout=run.rpc_timeout)
        return LearnerData(flow, source=source, queue=hosted, capacity=self.capacity)

    def actor_sink(self, setup: Any, group: Any, shards: list[str], *, index: int, rehosted: bool = False) -> Any:
        from rlpar.buffers import HostedQueue

        name = data_name(QUEUE, index % setup.learners, setup.learners)
        return HostedQueue.connect(group, name, timeout=setup.run.rpc_timeout)


class Replay(DataPath):
    """A prioritized replay, wherever it is placed (``replay``: its ReplayConfig)."""

    data, kernels, noun = "replay", True, "replay shard"  # its unit: the flow's items

    def __init__(self, replay: Any) -> None:
        self.replay = replay
        self.placement = replay.replay_placement  # written in checkpoints' headers

    def checkpoint_meta(self, setup: Any, data: LearnerData) -> dict[str, Any]:
        meta = {"replay_placement": self.placement, "replay_layout": sorted(replay_layout(setup))}
        if data.parts is not None:
            meta["replay_shards"] = len(data.parts.part_names())
        return meta

    def _source(self, setup: Any, buffer: Any) -> Any:
        from rlpar.buffers import PrefetchingBuffer

        return PrefetchingBuffer(buffer, batch_size=setup.flow.batch_size, depth=self.replay.prefetch_depth(),
                                 timeout=setup.run.rpc_timeout)


class LearnerReplay(Replay):
    """The replay in the learners' processes: one buffer, kept in learner 0's own
    checkpoint file; with K learners, learner ``k`` hosts shard ``k``
    (``replay.<k>``), fed by actors ``i`` with ``i mod K = k``, and kept as part ``k``
    of every checkpoint (:class:`~experiments.roles.actor_learner.learner_shards.LearnerShards`)."""

    def hosts_data(self, rank: int | None, *, learners: int) -> bool:
        return rank is not None and rank < learners

    def learner_data(self, setup: Any, group: Any | None, shards: list[str], *, learner: int = 0) -> LearnerData:
        from experiments.roles.actor_learner.learner_shards import LearnerShards
        from rlpar.buffers import HostedBuffer

        flow, learners = setup.flow, setup.learners
        buffer = local_replay(setup, learner=learner)
        # With several learners, each from its own shard: its share of learning_starts
        # (no learner starts on a few transitions while the others' shards are full),
        # no more than the shard holds.
        shard_min = min(buffer.capacity, max(flow.batch_size, -(-flow.learning_starts // learners)))
        hosted = HostedBuffer.host(group, data_name(REPLAY, learner, learners), buffer) if group is not None \
            else buffer
        source = self._source(setup, hosted)
        split = (LearnerShards(group, hosted=hosted, learner=learner, learners=learners) if learners > 1
                 else None)
        return LearnerData(flow, source=source, hosted=hosted, split=split, shard_min=shard_min,
                           capacity=replay_items(setup))

    def actor_sink(self, setup: Any, group: Any, shards: list[str], *, index: int, rehosted: bool = False) -> Any:
        from rlpar.buffers import HostedBuffer

        return HostedBuffer.connect(group, data_name(REPLAY, index % setup.learners, setup.learners))

    def load_keys(self, data: LearnerData) -> list[str]:
        return data.split.load_keys() if data.split is not None else []


class _Shards(Replay):
    """Remote shards (``shard_role``'s ranks host one each), which every learner
    samples with its own sampler and each of which writes its own checkpoint part."""

    on_shard_failure = "raise"

    def hosts_data(self, rank: int | None, *, learners: int) -> bool:
        return True  # actors and replay ranks host shards; learners sample them

    def shards(self, setup: Any, group: Any, shards: list[str], *, rehosted: bool = False) -> Any:
        return sharded_replay(setup, group, shards, rehosted=rehosted, on_shard_failure=self.on_shard_failure)

    def learner_data(self, setup: Any, group: Any | None, shards: list[str], *, learner: int = 0) -> LearnerData:
        sharded = self.shards(setup, group, shards)
        return LearnerData(setup.flow, source=self._source(setup, sharded), sharded=sharded,
                           capacity=replay_items(setup))

    def actor_sink(self, setup: Any, group: Any, shards: list[str], *, index: int, rehosted: bool = False) -> Any:
        return self.shards(setup, group, shards, rehosted=rehosted)

    def follow(self, group: Any, data: LearnerData, *, learner: int) -> None:
        group.register(follow_key(learner), data.sharded.follow)

    def load_keys(self, data: LearnerData) -> list[str]:
        from rlpar.buffers.shard import service_keys

        return [service_keys(REPLAY, member)["load"] for member in data.sharded.shard_members]


class ActorShards(_Shards):
    """A shard on every actor (adds are local). The learner samples on without a dead
    actor's shard (its first failed call drops it) and hosts a fresh one for its
    replacement, which cannot be called by the peers that had called the dead one."""

    shard_role, on_shard_failure, rehosts_dead_shards = "actor", "drop", True

    def actor_keeps_shard(self, *, restarted: bool) -> bool:
        return not restarted  # a replacement's shard is the learner's


class ReplayRanks(_Shards):
    """Shards on ``--replay-ranks`` dedicated ranks; the learner and every actor call
    them, so a dead one is not restarted alone: the world restarts."""

    shard_role = "replay"

    def __init__(self, replay: Any) -> None:
        super().__init__(replay)
        self.extra_ranks = replay.replay_ranks


class Gradients(DataPath):
    """A3C's gradient server in learner 0's process (``section``: the job's ``server``
    section, whose staleness flags reach the server through the builder's
    ``server_args``): actors push gradients and pull parameters, nothing is sampled."""

    data, noun, unit = "gradients", "gradient server", "gradients"

    def __init__(self, section: Any) -> None:
        self.section = section

    def learner_data(self, setup: Any, group: Any | None, shards: list[str], *, learner: int = 0) -> LearnerData:
        from experiments.roles.actor_learner.gradients import GradientData, GradientHost

        if learner:
            raise ValueError("A3C's gradient server has one learner: --learners 1")
        return GradientData(setup.flow, source=GradientHost(group))

    def actor_sink(self, setup: Any, group: Any, shards: list[str], *, index: int, rehosted: bool = False) -> Any:
        from experiments.roles.actor_learner.gradients import GRADS
        from rlpar.servers import PushPullGradServer

        return PushPullGradServer.connect(group, GRADS, timeout=setup.run.rpc_timeout)


PLACEMENTS = {"learner": LearnerReplay, "actors": ActorShards, "replay-ranks": ReplayRanks}


def data_path(data: str, section: Any) -> DataPath:
    """The data path a flow's ``data`` names, from the config's section for it
    (a QueueConfig, a ReplayConfig whose ``--replay-placement`` picks the class, or A3C's
    server section)."""
    if data == "queue":
        return UnrollQueue(section)
    if data == "gradients":
        return Gradients(section)
    return PLACEMENTS[section.replay_placement](section)
