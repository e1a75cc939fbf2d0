"""How long a learner that may not update sleeps before it asks again: one rule for
a single learner's loop (:class:`~experiments.roles.actor_learner.learner.LearnerLoop`)
and a learner group's agreement (:class:`~experiments.roles.actor_learner.learners.Lockstep`)."""

from __future__ import annotations


class Backoff:
    """``short_s`` after each of the first ``after`` asks in a row that found no update
    allowed, ``long_s`` after every later one; an update brings the short wait back.

    Short while pacing holds a learner between updates (data arrives with each actor's
    report, every 20 ms); long once it has been kept waiting (learning starts, a late
    or restarting actor), where each ask costs CPU that the actors it waits for need."""

    def __init__(self, *, short_s: float, long_s: float, after: int) -> None:
        if not 0 < short_s <= long_s:
            raise ValueError(f"need 0 < short_s <= long_s, got {short_s} and {long_s}")
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ValueError(f"after must be an int >= 0, got {after!r}")
        self.short_s, self.long_s, self.after = short_s, long_s, after
        self.misses = 0  # asks in a row that found no update allowed

    def missed(self) -> float:
        """Count one more ask without an update; returns the wait before the next."""
        self.misses += 1
        return self.wait_s

    def updated(self) -> None:
        self.misses = 0

    @property
    def wait_s(self) -> float:
        return self.short_s if self.misses <= self.after else self.long_s
