"""R2D2's actor and greedy policy: recurrent, so each keeps a state per env copy.

Kapturowski et al. 2019 (sec. 2.3): an actor carries its LSTM state from step to step
of an episode and starts each episode from the zero state; every sequence it adds to
replay stores the state it had at the sequence's first step. :class:`R2D2Actor` is an
Ape-X actor (:class:`~algorithms.actor_learner.Actor`, per-env-copy epsilon by
:func:`~algorithms.dqn.apex.exploration_rates`) whose behaviour hands that state on as
the step's extras, which :class:`SequenceItems` passes to the
:class:`~algorithms.r2d2.adder.SequenceAdder`; the sequences go to the replay with
initial priorities from the actor's own copy (:meth:`R2D2.initial_priorities`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from algorithms.actor_learner import Actor, Batch
from algorithms.dqn.apex import exploration_rates
from algorithms.dqn.config import ApexConfig
from algorithms.r2d2.adder import SequenceAdder
from algorithms.r2d2.r2d2 import R2D2
from rlpar.protocols import Buffer, ParameterStore

# Episodes per sub-env with no sequence kept after which an actor gives up (SequenceItems).
EPISODES_PER_ENV = 20


class SequenceItems:
    """The actor's adder (:class:`algorithms.actor_learner.Adder`): a
    :class:`SequenceAdder` fed the state each step was acted on from (the extras).

    A sequence cut by its episode's end is kept only with ``min_valid`` steps (the
    burn-in and a trained step), or 2 if it starts the episode and is trained from its
    first step (``train_episode_starts``: then every episode makes one).
    Where most episodes are shorter, the actors step past
    pacing until the replay holds what the learner needs (the runtime's filling);
    where every one is, nothing ever reaches the replay and the learner never starts:
    a run that would play on and learn nothing. So once the sub-envs have ended
    :data:`EPISODES_PER_ENV` episodes each (in all) without a single sequence kept,
    :meth:`add` raises a ValueError naming the burn-in and the episodes' mean length.
    That many, not one or two: untrained epsilon-greedy actors play short episodes
    mostly, and a long one now and then is enough (MinAtar Breakout with
    ``--burn-in 16``: about 6% of a random policy's episodes reach its 18 steps)."""

    def __init__(self, adder: SequenceAdder) -> None:
        self.adder = adder
        self.episodes = self.episode_steps = self.kept = 0

    def add(self, *, obs: np.ndarray, action: np.ndarray, reward: np.ndarray, next_obs: np.ndarray,
            reset_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
            extras: Mapping[str, np.ndarray], cut: np.ndarray | None) -> list[Batch]:
        # next_obs holds each ended episode's final observation (what a truncated one
        # bootstraps from).
        batch = self.adder.add(obs=obs, action=action, reward=reward, terminated=terminated, truncated=truncated,
                               state=extras, final_obs=next_obs, cut=cut)
        if not self.kept:
            self._check_kept(batch, np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool))
        return [] if batch is None else [batch]

    def _check_kept(self, batch: Batch | None, done: np.ndarray) -> None:
        self.kept = 0 if batch is None else len(batch["mask"])
        self.episode_steps += len(done)
        self.episodes += int(done.sum())
        if not self.kept and self.episodes >= EPISODES_PER_ENV * self.adder.num_envs:
            raise ValueError(
                f"R2D2 has kept no sequence from the first {self.episodes} episodes (about "
                f"{self.episode_steps / self.episodes:.1f} env steps each): a sequence cut by its episode's end "
                f"needs {self.adder.min_valid} steps (--burn-in + 2), so the replay would stay empty and the "
                "learner never start; lower --burn-in below the episodes' length, or train each episode's "
                "first sequence from its first step (--train-episode-starts)")


class R2D2Actor(Actor):
    """One R2D2 actor with an acting copy of :class:`R2D2`: epsilon-greedy at Ape-X's
    per-copy rates, the recurrent state kept per env copy (:attr:`state`) and zeroed
    where an episode starts, each completed sequence added at once with its initial
    priority."""

    def __init__(self, *, r2d2: R2D2, env: Any, buffer: Buffer, params: ParameterStore, index: int,
                 num_actors: int, config: ApexConfig, seed: int | None = None) -> None:
        config.validate()
        self.r2d2, self.config, self.index = r2d2, config, index
        r2d2.tie_target()
        r2d2.epsilon = exploration_rates(index, num_actors, env.num_envs, eps=config.eps, alpha=config.eps_alpha,
                                         per_env=config.eps_per_env)
        cfg = r2d2.config
        self.state = r2d2.initial_state(env.num_envs)
        self.sequences = adder = SequenceAdder(num_envs=env.num_envs, length=cfg.sequence_length,
                                               period=cfg.period, min_valid=cfg.min_sequence_steps,
                                               start_min_valid=cfg.min_start_steps)
        # add_every 1: a sequence is already many steps; held back, it would only delay
        # the learner (and widen pacing's slack).
        super().__init__(acting=r2d2, behave=self.behaviour, adder=SequenceItems(adder), env=env, sink=buffer,
                         params=params, add_every=1, pull_every=config.pull_every, prioritized=True, seed=seed)

    def behaviour(self, obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Actions from the kept state; the extras are that state (a sequence starting
        at this step stores it)."""
        before = self.state
        actions, after = self.r2d2.act(obs, before, explore=True)
        self.state = self.r2d2.last_step(after, action=actions)
        return actions, before

    def rewarded(self, reward: np.ndarray) -> None:
        self.state = self.r2d2.last_step(self.state, reward=reward)

    def episodes_started(self, mask: np.ndarray) -> None:
        self.state = self.r2d2.reset_state(self.state, mask)

    def held_items(self) -> list[Batch]:
        """The episodes' open sequences with ``min_sequence_steps`` valid steps, padded
        and masked, each with its start state; they get initial priorities as any
        other (the learner trains on the steps before the last valid one)."""
        batch = self.sequences.flush()
        return [] if batch is None else [batch]

    def held_steps(self) -> int:
        """Env steps in no sequence sent yet: a sequence holds many steps, and
        overlapping ones share steps, so the rows added do not count them. Nothing
        waits in the pending list between steps (each step's sequences are added at
        once, ``add_every`` 1)."""
        return self.sequences.held_steps


class R2D2Greedy:
    """The evaluation policy: ``policy(obs batch) -> actions``, greedy, with one
    recurrent state per row. ``episodes_started(mask)`` (called by
    :func:`algorithms.rollout.evaluate` after its reset and at every episode end)
    zeroes the rows that start an episode; a batch of another size starts afresh.
    ``rewarded(reward)``, called after each step, hands a network that takes the
    previous reward its input."""

    def __init__(self, r2d2: R2D2) -> None:
        self.r2d2 = r2d2
        self.state: dict[str, np.ndarray] | None = None

    def _rows(self) -> int:
        return -1 if self.state is None else len(next(iter(self.state.values())))

    def episodes_started(self, mask: np.ndarray) -> None:
        mask = np.asarray(mask, dtype=bool)
        if self._rows() != len(mask):
            self.state = self.r2d2.initial_state(len(mask))
        else:
            self.state = self.r2d2.reset_state(self.state, mask)

    def rewarded(self, reward: np.ndarray) -> None:
        """The rewards that followed the last actions (for a network that takes them;
        :func:`algorithms.rollout.evaluate` calls it after each step)."""
        if self.state is not None and len(np.atleast_1d(reward)) == self._rows():
            self.state = self.r2d2.last_step(self.state, reward=reward)

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        if self._rows() != len(obs):
            self.state = self.r2d2.initial_state(len(obs))
        actions, after = self.r2d2.act(obs, self.state, explore=False)
        self.state = self.r2d2.last_step(after, action=actions)
        return actions
