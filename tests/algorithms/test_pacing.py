"""Pacing: the learner's and the actors' bounds on the replay ratio."""

import pytest

from algorithms.pacing import Pacing


def _updates_a_learner_makes(pacing: Pacing, env_steps: int) -> int:
    updates = 0
    while pacing.learner_may_update(env_steps=env_steps, updates=updates):
        updates += 1
    return updates


@pytest.mark.parametrize("updates_per_step", [0.025, 0.25, 1.0, 3.0])
@pytest.mark.parametrize("env_steps", [0, 8, 16, 392, 400, 1234])
def test_a_paced_learner_stops_exactly_at_its_bound(updates_per_step, env_steps):
    pacing = Pacing(updates_per_step=updates_per_step, learning_starts=200, slack_steps=100)
    made = _updates_a_learner_makes(pacing, env_steps)
    assert made == pacing.learner_bound(env_steps)
    # A fractional due count is exceeded by less than one update, never by one.
    assert pacing.due(env_steps + 100) <= made < pacing.due(env_steps + 100) + 1


def test_the_bound_is_the_ceiling_of_a_fractional_due_count():
    pacing = Pacing(updates_per_step=0.025, learning_starts=200, slack_steps=1000)
    assert pacing.due(392 + 1000) == pytest.approx(29.8)
    assert pacing.learner_bound(392) == 30  # the case the fan-in bench's check missed
    assert pacing.learner_bound(400) == 30


def test_actors_step_until_slack_ahead_of_the_learner():
    pacing = Pacing(updates_per_step=0.25, learning_starts=100, slack_steps=50)
    assert pacing.actor_may_step(env_steps=149, updates=0)
    assert not pacing.actor_may_step(env_steps=150, updates=0)
    assert pacing.actor_may_step(env_steps=150, updates=1)  # 1 update consumed 4 steps


def test_serial_updates_due_count_from_where_learning_started():
    pacing = Pacing(updates_per_step=0.5, learning_starts=100)
    assert pacing.updates_due(env_steps=1000, updates=0, started_at=1000) == 0
    assert pacing.updates_due(env_steps=1010, updates=2, started_at=1000) == 3


@pytest.mark.parametrize("kwargs, match", [
    ({"updates_per_step": 0.0}, "updates_per_step must be > 0"),
    ({"updates_per_step": 1.0, "learning_starts": -1}, "learning_starts and slack_steps must be >= 0"),
    ({"updates_per_step": 1.0, "slack_steps": -1}, "learning_starts and slack_steps must be >= 0"),
])
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Pacing(**kwargs)
