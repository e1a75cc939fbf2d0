"""Filling: the actors of a learner whose data lacks what it needs to learn step past
pacing until it holds that (:meth:`~algorithms.pacing.Pacing.actor_may_step`).

Pacing's allowance before the first update is ``learning_starts`` plus its slack in
env steps, and it assumes those steps fill the replay. Two cases break that, and
without this rule both stop every actor for good at ``updates=0``, with no error:

- **several learners** (:mod:`.learners`), each learning from its own replay shard or
  queue, update in step: actors that start early spend the shared allowance on their
  own shards, and a late actor's shard never fills;
- **one learner whose items are fewer than its env steps**: R2D2 keeps a sequence only
  where an episode had ``burn_in + 2`` steps, so on short episodes the allowance's env
  steps make fewer sequences than ``learning_starts`` asks for.

The extra steps only bring the first update forward: the learner may then take the
updates those steps are owed (pacing counts every env step), so the replay ratio
holds over the run. Learner 0 (the coordinator's host) keeps the watch: the learners
whose data is short go to the actors in every directive (the coordinator's
``filling``); while none updates for a second, the status line names each and what its
data holds (``filling=learner1:12/100``); and once one's data has not grown for
``warn_after`` seconds, a notice says what it waits for and how its actors are (data
that fills slowly is named on the status line, data that stopped growing, a dead or
hung actor's, in a notice).
"""

from __future__ import annotations

import time
from typing import Any


class Filling:
    """Learner 0's watch over the learners (one, or ``learners`` in step) whose own data
    lacks the ``need`` :attr:`unit` it must hold before they learn; ``lacking`` comes
    from the lockstep's all-reduce (several learners) or the learner's own data (one)."""

    def __init__(self, coordinator: Any, *, learners: int, num_actors: int, need: int, data: str,
                 unit: str, warn_after: float) -> None:
        self.coordinator, self.need, self.warn_after = coordinator, need, warn_after
        self.data, self.unit = data, unit  # e.g. "replay shard", "transitions"
        self.feeders = [[i for i in range(num_actors) if i % learners == k] for k in range(learners)]
        self.lacking: list[int] | None = None
        self._since: float | None = None  # since when no learner could update for want of data
        self._grew = [time.monotonic()] * learners  # when each learner's data last grew
        self._warned = False

    def update(self, lacking: list[int], *, updated: bool) -> None:
        """After each turn (several learners: each agreement): ``lacking`` per learner,
        ``updated``: whether they updated."""
        now = time.monotonic()
        if lacking != self.lacking:
            if self.lacking is not None:
                self._grew = [now if n != old else t for n, old, t in zip(lacking, self.lacking, self._grew)]
            self.lacking = list(lacking)
        filling = tuple(k for k, n in enumerate(lacking) if n > 0)
        if filling != self.coordinator.filling:
            self.coordinator.filling = filling
        if updated or not filling:
            if self._warned:
                who = "learner updates" if len(self.feeders) == 1 else "learners update"
                self.coordinator.say(f"the {who}, after {now - self._since:.0f} s waiting for data")
            self._since, self._warned = None, False
            return
        self._since = now if self._since is None else self._since
        stuck = [k for k in filling if now - self._grew[k] >= self.warn_after]
        if stuck and not self._warned:
            self._warned = True
            for k in stuck:
                self.coordinator.say(self.describe(k, waited=now - self._since, still=now - self._grew[k]))

    def describe(self, learner: int, *, waited: float, still: float) -> str:
        held = self.need - (self.lacking or [0] * len(self.feeders))[learner]
        holds = (f"holds {held} of the {self.need} {self.unit} it needs before it learns, none added for "
                 f"{still:.0f} s")
        if len(self.feeders) == 1:
            return (f"the learner has not updated for {waited:.0f} s: its {self.data} {holds}; "
                    f"it is fed by {self.actors(learner)}")
        return (f"no learner has updated for {waited:.0f} s: learner {learner}'s {self.data} {holds}, and "
                f"the learners update in step; it is fed by {self.actors(learner)}")

    def actors(self, learner: int) -> str:
        states = []
        for i in self.feeders[learner]:
            quiet = self.coordinator.quiet_for(i)
            states.append(f"actor {i} (" + ("no report yet" if quiet is None else
                                            f"last report {quiet:.0f} s ago" if quiet >= 1.0 else "reporting")
                          + ")")
        return ", ".join(states)

    def status(self) -> dict[str, Any]:
        """The status line's ``filling`` entry (None: no entry)."""
        if self._since is None or time.monotonic() - self._since < 1.0 or self.lacking is None:
            return {"filling": None}
        if len(self.feeders) == 1:
            return {"filling": f"{self.need - self.lacking[0]}/{self.need}"}
        return {"filling": ",".join(f"learner{k}:{self.need - n}/{self.need}"
                                    for k, n in enumerate(self.lacking) if n > 0)}
