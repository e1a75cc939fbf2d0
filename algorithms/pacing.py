"""The replay ratio, held in one object by every role that needs it.

Ape-X's actors and learner run at their own speeds; on a small machine free-running
actors would starve the learner of CPU (and a free-running learner would overfit a
small replay). ``Pacing`` holds ``updates_per_step`` learner updates per env step
after ``learning_starts`` env steps, with ``slack_steps`` of play either way:

- the learner may update while it is behind the env steps' due updates (plus slack);
- an actor may step while it is not more than ``slack_steps`` ahead of what the
  learner has consumed, or while the data of the learner it feeds lacks what that
  learner needs to learn (``filling``). The allowance assumes its env steps fill the
  replay; they may not: several learners each learn from their own replay shard and
  update in step, so actors that start early spend the shared allowance on their own
  shards and a late actor's shard never fills; and R2D2 keeps a sequence only where
  an episode is long enough, so short episodes make fewer items than env steps.
  Without ``filling`` no update would come and pacing would stop every actor for good
  (``experiments.roles.actor_learner.filling``). The extra steps only bring the first
  update forward; from then on the learners may take the updates those steps are owed
  (``learner_may_update`` counts every env step), so the replay ratio holds over the
  run;
- in one process (serial), ``updates_due`` is the exact number of updates owed
  since the learner could first sample (``started_at`` env steps), so a run is
  deterministic for a seed. Counting from ``started_at`` rather than from
  ``learning_starts`` matters: the replay fills in whole flushes, and the updates
  "owed" for the steps in between, taken as one burst on the first thousand
  transitions, cost CartPole a factor of 3 in env steps to solve (median 45K
  against 15K, seeds 0-5).
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Pacing:
    updates_per_step: float
    learning_starts: int = 0
    slack_steps: int = 1000

    def __post_init__(self) -> None:
        if not self.updates_per_step > 0:
            raise ValueError(f"updates_per_step must be > 0, got {self.updates_per_step}")
        if self.learning_starts < 0 or self.slack_steps < 0:
            raise ValueError("learning_starts and slack_steps must be >= 0")

    def due(self, env_steps: int) -> float:
        """Updates owed after ``env_steps`` env steps."""
        return max(0, env_steps - self.learning_starts) * self.updates_per_step

    def updates_due(self, *, env_steps: int, updates: int, started_at: float) -> int:
        """Whole updates owed now (serial runs) when learning started at ``started_at``
        env steps with ``updates`` = 0 then."""
        return max(0, int(max(0, env_steps - started_at) * self.updates_per_step) - updates)

    def learner_bound(self, env_steps: int) -> int:
        """The most updates a learner paced by :meth:`learner_may_update` makes by
        ``env_steps`` env steps: it updates while below the (often fractional) due
        count plus slack, so its last update lands on that count's ceiling."""
        return math.ceil(self.due(env_steps + self.slack_steps))

    def learner_may_update(self, *, env_steps: int, updates: int) -> bool:
        return updates < self.learner_bound(env_steps)

    def actor_may_step(self, *, env_steps: int, updates: int, filling: bool = False) -> bool:
        return filling or env_steps < self.learning_starts + updates / self.updates_per_step + self.slack_steps
