"""Where an actor-learner job's data lives, and each rank's handle of it.

A **replay** (prioritized, Schaul et al. 2016) is placed by ``--replay-placement``:

- ``learner``: one buffer hosted in the learner process; actors add over RPC;
- ``actors``: one shard per actor (adds are local); the learner samples across
  shards, one round trip per shard, prefetched;
- ``replay-ranks``: shards on dedicated replay ranks; actors add there.

A **queue** of unrolls (IMPALA's) always lives in the learner's process: actors put
whole unrolls over RPC, waiting while it is full; the learner takes ``batch_size``
of them per update, in order, and its builder collates them into one batch.

With several learners (``--learners K``) every learner samples its own batch:

- ``learner``: the replay is split into K shards, one in each learner's process
  (``replay.<k>``, ``replay_capacity / K`` each): actor ``i`` adds to learner
  ``i mod K``'s shard, each learner samples its own with a local call and sends its
  new priorities there. Why not learner 0's one buffer sampled by all: every other
  learner's batch would then cross RPC and learner 0's process would serve K-1
  learners' samples besides its own adds, the bottleneck this placement avoids
  (docs/benchmarks.md, "Ape-X at scale"); the shards are alike in expectation, since the
  actors' exploration rates are interleaved over them. Each shard is one part of
  every checkpoint (:class:`~experiments.roles.actor_learner.learner_shards.LearnerShards`);
- ``actors``, ``replay-ranks``: every learner samples across all shards with its own
  sampler (its own seed), its priorities going back to the owning shards;
- a queue: one per learner (``queue.<k>``), actor ``i`` putting to learner
  ``i mod K``'s, so no unroll crosses between learners.

Each of these is one class of :mod:`experiments.roles.actor_learner.paths`, made once per rank,
whose methods the roles call; the pieces they are made of are here (``setup``: the
rank's :class:`~experiments.roles.actor_learner.program.Setup`, which makes its data path, so this
module does not import it).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from rlpar.protocols import Sample

REPLAY, QUEUE = "replay", "queue"


def follow_key(learner: int) -> str:
    """Learner ``learner``'s service that takes over a rehosted replay shard."""
    return f"learner.{learner}/follow"


def data_name(base: str, learner: int, learners: int) -> str:
    """The service name of learner ``learner``'s replay or queue: ``base`` with one
    learner (as always), ``base.<k>`` with several, each hosting its own."""
    return base if learners == 1 else f"{base}.{learner}"


def replay_layout(setup: Any) -> dict[str, Any]:
    """Replay keyword arguments for the env's observations: ``SharedFrames`` when
    they are uint8 frame stacks (stack axis first, as both Atari paths make them)
    that an n-step transition's obs and next_obs overlap in."""
    from rlpar.buffers import SharedFrames

    flow = setup.flow
    if shares_frames(setup.path.replay, env_id=setup.env.env_id, user_env=setup.parts.env is not None,
                     items=flow.items, obs_space=setup.builder.spec.observation_space):
        stack = setup.builder.spec.observation_space.shape[0]
        return {"shared_frames": SharedFrames.for_steps(flow.n_step, stack=stack)}
    return {}


def shares_frames(replay: Any, *, env_id: str, user_env: bool, items: str, obs_space: Any) -> bool:
    """Whether the replay stores each distinct frame once (``--share-frames``): Atari's
    uint8 frame stacks in transitions (a sequence has no next_obs to share obs's frames
    with). ``n_step`` does not matter: a transition over more steps than the stack shares
    no frame with its own next_obs, and still all but one with its env's neighbours."""
    from experiments.runtime.envs import is_atari

    shape = obs_space.shape or ()
    return (replay.share_frames and is_atari(env_id) and not user_env and items == "transitions"
            and obs_space.dtype == np.uint8 and len(shape) == 3)


def replay_items(setup: Any) -> int:
    """The items the whole replay holds: ``--replay-capacity`` counts env steps, and
    each item adds ``flow.steps_per_item`` of them (an R2D2 sequence: its period)."""
    capacity = setup.path.replay.replay_capacity
    if capacity is None:
        raise ValueError("replay_capacity is not filled: the job's env_defaults sets the algorithm's "
                         "(Builder.replay_steps)")
    return max(1, capacity // setup.flow.steps_per_item)


def local_replay(setup: Any, *, learner: int = 0):
    """The replay in a learner's process: all of it with one learner; learner
    ``learner``'s share with several (its own seed, so the shards draw apart)."""
    from rlpar.buffers import PrioritizedReplayBuffer

    replay = setup.path.replay
    return PrioritizedReplayBuffer(capacity=max(1, replay_items(setup) // setup.learners),
                                   alpha=replay.priority_alpha, beta=replay.priority_beta,
                                   seed=setup.run.seed + 7919 * learner, **replay_layout(setup))


def sharded_replay(setup: Any, group: Any, shards: list[str], *, rehosted: bool = False,
                   on_shard_failure: str = "raise"):
    """The sharded replay in any rank. ``on_shard_failure="drop"`` (shards on the
    actors): the learner samples on without the shard of a dead actor (its first
    failed call drops it) until its replacement rejoins; ``"raise"`` (shards on replay
    ranks): never dropped (a dead one restarts the world). ``rehosted``: this rank
    replaces a dead actor, whose shard the learner now hosts."""
    from rlpar.buffers import DistributedPrioritizedReplayBuffer

    replay = setup.path.replay
    return DistributedPrioritizedReplayBuffer(
        group=group, name=REPLAY, capacity=max(1, replay_items(setup) // len(shards)),
        alpha=replay.priority_alpha, beta=replay.priority_beta, shard_members=shards,
        timeout=setup.run.rpc_timeout, seed=setup.run.seed, rehosted=rehosted,
        on_shard_failure=on_shard_failure, **replay_layout(setup))


class Unrolls:
    """A queue of unrolls as the learner's source: ``sample(n)`` takes the next ``n``
    (waiting for them at most ``timeout`` seconds) and collates them into one batch.
    Each is used once, so there are no priorities; ``ready`` says whether a batch is
    there, so the learner's loop never blocks on an empty queue while it should stop."""

    def __init__(self, queue: Any, *, collate: Any, batch_size: int, timeout: float) -> None:
        self.queue, self.collate, self.batch_size, self.timeout = queue, collate, batch_size, timeout

    def ready(self) -> bool:
        return len(self.queue) >= self.batch_size

    def sample(self, batch_size: int) -> Sample:
        items = self.queue.get(batch_size, timeout=self.timeout)
        return Sample(batch=self.collate(items), indices=np.empty(0, dtype=np.int64),
                      weights=np.empty(0, dtype=np.float32))

    def update_priorities(self, indices: Any, priorities: Any) -> None:
        raise TypeError("a queue of unrolls has no priorities")

    def __len__(self) -> int:
        return len(self.queue)

    def close(self) -> None:
        self.queue.close()


class LearnerData:
    """Learner ``learner``'s side of the data path, as its data path
    (:mod:`experiments.roles.actor_learner.paths`) makes it: ``source`` (what it samples),
    ``hosted`` (a replay buffer in this process: checkpointed with the learner's state,
    or with several learners as its part, ``split``), ``sharded`` (remote shards,
    which checkpoint their own parts) and ``queue`` (unrolls). ``capacity``: what the
    replay holds at most (0 for a queue)."""

    def __init__(self, flow: Any, *, source: Any, hosted: Any = None, sharded: Any = None, queue: Any = None,
                 split: Any = None, shard_min: int | None = None, capacity: int = 0) -> None:
        self.source, self.hosted, self.sharded, self.queue, self.split = source, hosted, sharded, queue, split
        self.min_size = max(flow.learning_starts, flow.batch_size)
        self.batch_size = flow.batch_size
        self.shard_min = flow.batch_size if shard_min is None else shard_min
        self.capacity = capacity
        # What checkpoints keep: a buffer in this learner's own state, or parts that
        # their holders write (remote shards, or a replay split over the learners).
        self.in_state = hosted if split is None else None
        self.parts = sharded if sharded is not None else split
        # What this learner's own data needs before it learns (Filling's words).
        self.need = self.batch_size if queue is not None else self.shard_min

    def ready(self, reported: int) -> bool:
        """Whether the learner may sample: a queue holds a batch; a replay holds at
        least ``learning_starts`` (and a batch of) transitions, by the ``reported``
        count (a sharded replay's size is only refreshed by sampling)."""
        if self.queue is not None:
            return self.source.ready()
        return self.short_of(reported) == 0

    def short_of(self, reported: int) -> int:
        """What a replay lacks before :meth:`ready` by the ``reported`` count: items up
        to ``learning_starts`` (and a batch)."""
        return max(0, self.min_size - reported)

    def local_ready(self) -> bool:
        """Whether this learner's own data gives a batch now (several learners: each
        says so for its own queue or replay shard; remote shards are sampled by all,
        so the first learner's count of reported transitions decides for them)."""
        return self.lacking() == 0

    def lacking(self) -> int:
        """What this learner's own data lacks before it may learn: unrolls for a batch
        in its queue; transitions in its replay shard, up to ``shard_min`` (its share
        of ``learning_starts``, at least a batch); 0 for remote shards."""
        if self.queue is not None:
            return max(0, self.batch_size - len(self.queue))
        if self.hosted is not None:
            return max(0, self.shard_min - len(self.hosted))
        return 0

    def held(self, *, reported: int) -> int:
        """What the data path holds: the hosted buffer's or queue's size; for shards
        (whose sizes only ride on sampling replies) what was added (``reported``: less
        what dead shards took with them), bounded by the capacity, exact until a shard
        fills."""
        if self.in_state is not None:
            return len(self.in_state)
        if self.queue is not None:
            return len(self.queue)
        return min(self.capacity, reported)

    @property
    def sink(self) -> Any:
        """Where an actor in this process adds (the serial program's)."""
        return self.hosted if self.hosted is not None else self.queue

    def close(self) -> None:
        self.source.close()


def hold_shard_until_saved(setup: Any, group: Any, signals: Any) -> None:
    """A rank that hosts a shard stays (serving it) until the learner has written its
    last checkpoint, which asks every shard for its part; after a stop by signal
    (the world is ending) at most ``STOP_HOLD_S``."""
    from experiments.runtime.job import STOP_HOLD_S
    from rlpar.errors import PeerUnavailable

    hold = STOP_HOLD_S if signals.stopped else max(60.0, 2 * setup.run.rpc_timeout)
    deadline = time.monotonic() + hold
    try:
        while (not group.call("coord/released", timeout=min(hold, setup.run.rpc_timeout))
               and time.monotonic() < deadline):
            time.sleep(0.05)
    except PeerUnavailable:  # the learner is gone: nothing left to save for it
        pass


def run_replay(setup: Any, group: Any, *, shards: list[str], signals: Any) -> None:
    """A dedicated replay rank: hosts one shard (served on RPC threads) until the
    learner has written its last checkpoint."""
    setup.path.shards(setup, group, shards)
    group.barrier()
    hold_shard_until_saved(setup, group, signals)


def _warm_replay_kernels() -> None:
    from rlpar.buffers import trees

    trees.kernels()


def warm_in_background() -> threading.Thread:
    """Load the replay's compiled kernels while the RPC rendezvous waits on peers."""
    thread = threading.Thread(target=_warm_replay_kernels, name="warm-replay", daemon=True)
    thread.start()
    return thread
