"""Several learners in the actor-learner program (``--learners K``, default 1).

Ranks 0..K-1 are learners (:mod:`.program`'s role rule). Each samples its own batch
(:mod:`.data`: its own replay shard or queue, or every shard of a sharded replay),
and they learn as one synchronous data-parallel learner: a *learner group*
(:meth:`World.create_learner_group`, gloo on CPU, NCCL when the learners have
GPUs) averages every update's gradients through the builder's gradient hook
(:meth:`~algorithms.builder.Builder.set_grad_hook`), so with the same start and the
same number of updates the parameters stay identical on every learner. Learner 0
is the one the program always had: it hosts the coordinator and the parameter
server, publishes, checkpoints and keeps the run; the others (:func:`run_follower`)
only learn. Actors are never members: they still die and rejoin alone.

What keeps them identical and in step:

- **the same start**: after learner 0 has restored a checkpoint (or made fresh
  networks), it broadcasts its whole algorithm state (networks, target networks,
  optimizer, update count) to the others (:func:`share_state`). A resume thus
  restores every learner from learner 0's file; each replay shard loads its own part;
- **lockstep** (:class:`Lockstep`): before every update the learners agree, in one
  all-reduce of a few flags (carried by the previous update's gradients while they
  learn), whether all of them may update now (learner 0: its data and pacing allow
  it; the others: their own data holds a batch, or its replay shard its share of
  ``learning_starts``) and whether to stop (learner 0: its coordinator says so; the
  others: a stop signal). So every learner
  runs the same updates, none waits in a gradient all-reduce that another will
  never join, and the stop is taken by all at the same update: no deadlock when the
  run ends or when one learner's data runs dry (the others wait with it);
- **filling** (:class:`~experiments.roles.actor_learner.filling.Filling`): the same all-reduce tells learner 0 what each
  learner's own data lacks; the actors of one that lacks data step past pacing
  until it is filled (an actor that starts late would otherwise find the shared
  allowance spent and no learner could ever update), and learner 0 names the
  learner that holds the others back. With queues the other learners' actors wait
  at their full queues meanwhile, however long: the queue's host answers their puts
  "still waiting" well within the RPC timeout (:mod:`rlpar.buffers.hosted_fifo`), so
  the wait is not taken for a dead learner;
- **a member's death**: a collective cannot go on without it, so the others' next
  operation raises ``PeerUnavailable`` and supervision restarts the world from the
  newest checkpoint (a learner is never restarted alone). Learner 0 first writes
  one, unless the death stopped an update between two of its optimizer steps
  (:attr:`Lockstep.whole`).

At the end every learner reports its update count, the priorities it sent and a
digest of its parameters (:func:`gather`), which the summary holds.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from experiments.roles.actor_learner.backoff import Backoff
from experiments.roles.actor_learner.data import hold_shard_until_saved
from experiments.roles.actor_learner.program import Setup
from experiments.runtime.parts import checked

GROUP = "learners"
# How long learners that may not update wait before they ask again: each ask is an
# all-reduce (measured on 2 loopback gloo members: 0.36 ms, 0.05-0.2 ms of CPU each),
# so twice one learner's 0.5 ms, leaving the cores to the actors they wait for.
WAIT_S = 0.001
# After this many not-ready agreements in a row (0.1 s or more of waiting: a late or
# restarting actor, not pacing's short waits between updates) they ask every
# LONG_WAIT_S instead: each 1 ms ask costs the learners together about 0.8 of a core
# (measured: two waiting IMPALA learners, 0.45 + 0.35 s of CPU per second), taken from
# the actors they wait for, and an actor reports every 20 ms anyway.
LONG_WAIT_AFTER = 100
LONG_WAIT_S = 0.02


def join(world: Any, setup: Setup, *, device: Any) -> Any:
    """The learner group of this learner rank (None with one learner: nothing is
    created, nothing costs). Its timeout bounds how long a learner waits for the
    others at a collective: learner 0 restoring or writing a checkpoint keeps them
    waiting, so it is twice the RPC timeout."""
    if setup.learners == 1:
        return None
    backend = "auto" if getattr(device, "type", "cpu") == "cuda" else "gloo"
    return world.create_learner_group(GROUP, list(range(setup.learners)), backend=backend,
                                      timeout=2 * setup.run.rpc_timeout)


class NoPublish:
    """The parameter store of learners 1..K-1: only learner 0 publishes."""

    def push(self, state: Any, version: int | None = None) -> int:
        return int(version or 0)

    def pull(self, newer_than: int = -1) -> None:
        return None


class Lockstep:
    """The learners' agreement before each update, and their gradient hook.

    ``poll(ahead) -> (ready, stop)`` says whether this learner may take the next
    update (``ahead``: 1 when asked during an update, whose count is not in yet) and
    whether it wants to stop; ``lacking() -> int`` what its own data lacks before it
    may learn (:meth:`LearnerData.lacking <experiments.roles.actor_learner.data.LearnerData.lacking>`).
    :meth:`agree` gives (all ready, any stop) for the coming update, and leaves every
    learner's ``lacking`` in :attr:`lacking`, which tells learner 0 whose actors must
    fill its data before any learner can update
    (:class:`~experiments.roles.actor_learner.filling.Filling`). While they learn, that decision rides on the previous update's gradient all-reduce:
    :meth:`average_gradients` (the grad hook it gives the algorithm) appends the
    flags to the gradients, so an update costs one
    collective, not two (on 2 loopback gloo members an all-reduce takes about
    0.36 ms whatever its size below 100K floats, against updates of 2-15 ms). When
    there was none (the first update, after a wait) :meth:`agree` all-reduces the
    flags alone. Every learner calls the hook as often in an update, so all hold
    the same decision; the last call of an update (TD3 has two) decides."""

    def __init__(self, group: Any, *, poll: Any = None, lacking: Any = None) -> None:
        import torch

        self.group = group
        # Learner 0's are set once its loop exists (its poll asks the loop's pacing).
        self.poll: Any = poll
        self.lacking_of: Any = lacking if lacking is not None else (lambda: 0)
        self.lacking = [0] * group.size  # per learner, as of the last decision
        # [not ready, stop, what learner 0 lacks, ..., what learner K-1 lacks]
        size = 2 + group.size
        self._flags = torch.zeros(size, dtype=torch.float32, device=group.device)
        # Holds the flags as its .grad, so the group averages them with the gradients.
        self._carrier = torch.zeros(size, dtype=torch.float32, device=group.device, requires_grad=True)
        self._next: tuple[bool, bool] | None = None
        self._updating, self._averaged = False, 0
        self.backoff = Backoff(short_s=WAIT_S, long_s=LONG_WAIT_S, after=LONG_WAIT_AFTER)

    @property
    def wait_s(self) -> float:
        """How long a learner that may not update sleeps before it asks again: every
        learner holds the same decisions, so the same wait."""
        return self.backoff.wait_s

    @contextlib.contextmanager
    def update(self) -> Iterator[None]:
        """Around one update: counts its gradient averages (:attr:`whole`)."""
        self._updating, self._averaged = True, 0
        yield
        self._updating = False

    @property
    def whole(self) -> bool:
        """Whether the algorithm holds whole updates only: none stopped after one of
        its optimizer steps and before another (TD3's critic step taken, its actor's
        not, by a learner's death in between). What a checkpoint may hold."""
        return not self._updating or self._averaged == 0

    def agree(self) -> tuple[bool, bool]:
        decided, self._next = self._next, None
        if decided is None:
            self._flags.zero_()
            self._set(self._flags, ahead=0)
            self.group.all_reduce(self._flags, op="max")
            decided = self._read(self._flags, members=1)
        if decided[0]:
            self.backoff.updated()
        else:
            self.backoff.missed()
        return decided

    def average_gradients(self, params: Any) -> None:
        """The grad hook: the group's mean of every ``.grad``, and the next decision."""
        import torch

        self._carrier.grad = torch.zeros_like(self._carrier)
        self._set(self._carrier.grad, ahead=1)
        self.group.average_gradients([*params, self._carrier])
        self._averaged += 1
        self._next = self._read(self._carrier.grad, members=self.group.size)

    def _set(self, flags: Any, *, ahead: int) -> None:
        ready, stop = self.poll(ahead)
        flags[0], flags[1] = 0.0 if ready else 1.0, 1.0 if stop else 0.0
        flags[2 + self.group.rank] = float(self.lacking_of())  # the others leave theirs 0

    def _read(self, flags: Any, *, members: int) -> tuple[bool, bool]:
        # A max, or a mean (``members``: what a mean divided each member's own entry by).
        not_ready, stopped, *lacking = flags.tolist()
        self.lacking = [round(members * x) for x in lacking]
        return not_ready == 0.0, stopped > 0.0  # > 0 where any member said so


def share_state(group: Any, algorithm: Any) -> None:
    """Every learner gets learner 0's whole algorithm state (one broadcast of its
    serialized ``state_dict``): networks, targets, optimizer moments, update count."""
    import torch

    if group.rank == 0:
        buffer = io.BytesIO()
        torch.save(algorithm.state_dict(), buffer)
        payload = torch.frombuffer(bytearray(buffer.getvalue()), dtype=torch.uint8).to(group.device)
        size = torch.tensor([payload.numel()], dtype=torch.int64, device=group.device)
    else:
        size = torch.zeros(1, dtype=torch.int64, device=group.device)
    group.broadcast(size, src=0)
    if group.rank != 0:
        payload = torch.empty(int(size.item()), dtype=torch.uint8, device=group.device)
    group.broadcast(payload, src=0)
    if group.rank != 0:
        state = torch.load(io.BytesIO(payload.cpu().numpy().tobytes()), weights_only=True)
        algorithm.load_state_dict(state)


def digest(algorithm: Any) -> int:
    """A 63-bit digest of the acting parameters (``policy_state``), equal on two
    learners exactly when their parameters are bitwise equal."""
    sha = hashlib.sha256()
    for name, tensor in sorted(algorithm.policy_state().items()):
        sha.update(name.encode())
        sha.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return int.from_bytes(sha.digest()[:8], "little") >> 1


def gather(group: Any, learner: Any, *, cpu_s: float) -> dict[str, Any]:
    """What every learner did, for the summary; called by all at the same point
    (right after their agreed stop). ``cpu_s``: this learner process's CPU time since
    its first update (all its threads: gloo's and the RPC threads serving its shard's
    adds too), whose share per update does not depend on the machine's load."""
    import torch

    row = torch.tensor([learner.updates, learner.priorities_sent, digest(learner.algorithm),
                        int(1e6 * learner.update_seconds), int(1e6 * cpu_s)], dtype=torch.int64,
                       device=group.device)
    rows = np.array([r.cpu().tolist() for r in group.all_gather(row)], dtype=np.int64)
    digests = [f"{int(d):016x}" for d in rows[:, 2]]
    return {"learners": group.size, "learner_updates": rows[:, 0].tolist(),
            "learner_priorities_sent": rows[:, 1].tolist(), "learner_digests": digests,
            "learners_identical": len(set(digests)) == 1,
            "learner_update_ms": _per_update(rows[:, 3], rows[:, 0]),
            "learner_process_cpu_ms": _per_update(rows[:, 4], rows[:, 0])}


def _per_update(micros: Any, updates: Any) -> list[float]:
    return [round(1e-3 * int(us) / max(1, int(n)), 3) for us, n in zip(micros, updates)]


def make_learner(setup: Setup, source: Any, params: Any, *, lockstep: Lockstep | None = None):
    """The learner around the builder's algorithm; with several learners its
    gradients go through ``lockstep``'s average over the learner group, on the
    group's GPU under NCCL."""
    from algorithms.actor_learner import Learner
    from experiments.runtime.config import resolve_device

    builder, parts = setup.builder, setup.parts
    device = resolve_device(setup.run.device)
    if lockstep is not None and lockstep.group.device.type == "cuda":
        device = lockstep.group.device  # NCCL: this member's GPU
    algorithm = checked(builder.make_algorithm(device=device, seed=setup.run.seed), builder.algorithm_base,
                        builder.make_algorithm, given=parts.algorithm, part="algorithm")
    if lockstep is not None:
        builder.set_grad_hook(algorithm, lockstep.average_gradients)
    return checked(builder.make_learner(algorithm, source=source, params=params), Learner, builder.make_learner,
                   given=parts.learner, part="learner")


def run_follower(setup: Setup, group: Any, members: Any, *, index: int, shards: list[str],
                 signals: Any) -> None:
    """Learner ``index`` >= 1: hosts its replay shard or queue, learns in lockstep with
    learner 0 on its own batches, and stays until learner 0 has written the last
    checkpoint (which asks it for its shard's part)."""
    import torch

    torch.set_num_threads(setup.run.torch_threads)
    data = setup.path.learner_data(setup, group, shards, learner=index)
    lockstep = Lockstep(members, poll=lambda ahead: (data.local_ready(), signals.stopped), lacking=data.lacking)
    learner = make_learner(setup, data.source, NoPublish(), lockstep=lockstep)
    setup.path.follow(group, data, learner=index)
    share_state(members, learner.algorithm)
    group.barrier()
    cpu_started = None
    try:
        while True:
            ready, stop = lockstep.agree()
            if stop:
                break
            if ready:
                cpu_started = time.process_time() if cpu_started is None else cpu_started
                learner.step()
            else:
                time.sleep(lockstep.wait_s)
        gather(members, learner, cpu_s=time.process_time() - (cpu_started or time.process_time()))
    finally:
        data.close()
    hold_shard_until_saved(setup, group, signals)
