"""The actor-learner program's update loop (experiments.roles.actor_learner.learner.LearnerLoop)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from experiments.roles.actor_learner.backoff import Backoff
from experiments.roles.actor_learner.learner import (
    WAIT_LONG_AFTER,
    WAIT_LONG_S,
    WAIT_S,
    LearnerLoop,
)


class _Learner:
    updates = 0

    def step(self) -> dict[str, float]:
        self.updates += 1
        return {"loss": 1.0}


class _Data:
    def __init__(self) -> None:
        self.is_ready = False

    def ready(self, transitions: int) -> bool:
        return self.is_ready


class _Loop(LearnerLoop):
    def __init__(self, data: _Data) -> None:
        super().__init__(_Learner(), SimpleNamespace(env_steps=0, transitions=0, updates=0), None, data=data)
        self.sleeps: list[float] = []

    def wait(self, seconds: float = WAIT_S) -> None:
        self.sleeps.append(seconds)


def test_a_learner_kept_waiting_asks_less_often_and_an_update_brings_the_short_wait_back():
    """Waiting for learning to start (seconds) at 2,000 asks a second once cost a
    twentieth of a core, taken from the actors it waits for; the short waits pacing
    makes between updates keep the short wait."""
    data = _Data()
    loop = _Loop(data)
    for _ in range(WAIT_LONG_AFTER + 3):
        assert loop.step() is False
    assert loop.sleeps == [WAIT_S] * WAIT_LONG_AFTER + [WAIT_LONG_S] * 3 and WAIT_LONG_S > WAIT_S
    data.is_ready = True
    assert loop.step() is True and loop.learner.updates == 1
    data.is_ready = False
    loop.sleeps.clear()
    assert loop.step() is False and loop.sleeps == [WAIT_S]


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"short_s": 0.0, "long_s": 0.01, "after": 1}, "0 < short_s <= long_s"),
    ({"short_s": 0.02, "long_s": 0.01, "after": 1}, "0 < short_s <= long_s"),
    ({"short_s": 0.001, "long_s": 0.01, "after": -1}, "after must be an int >= 0"),
    ({"short_s": 0.001, "long_s": 0.01, "after": 2.5}, "after must be an int >= 0"),
])
def test_a_backoff_refuses_waits_that_do_not_grow_and_a_bad_count(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Backoff(**kwargs)


def test_a_backoff_after_zero_waits_long_from_the_first_miss():
    backoff = Backoff(short_s=0.001, long_s=0.01, after=0)
    assert backoff.wait_s == 0.001 and backoff.missed() == 0.01
    backoff.updated()
    assert backoff.wait_s == 0.001
