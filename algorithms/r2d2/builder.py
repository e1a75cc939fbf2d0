"""R2D2 as a builder (Kapturowski et al. 2019, "Recurrent Experience Replay in
Distributed Reinforcement Learning", ICLR): Ape-X's program with recurrent actors
(:class:`~algorithms.r2d2.actor.R2D2Actor`) that add fixed-length, overlapping
sequences with their start state and initial priorities to the prioritized replay
(each sequence one replay item, :func:`rlpar.buffers.sequence_spec`'s layout), and an
:class:`~algorithms.r2d2.R2D2` learner (burn-in, n-step double-Q under value
rescaling, eta-mixed sequence priorities).

The hyperparameters are the Ape-X job's ``learn`` section (an
:class:`~algorithms.dqn.config.ApexConfig`: lr, gamma, n-step, batch size in
sequences, the replay ratio in batches per env step, the actors' epsilons and pace)
and its ``r2d2`` one, R2D2's own :class:`~algorithms.r2d2.R2D2Config` (burn-in,
unroll, period, LSTM size ...), whose other fields are derived from ``learn`` here.
``--replay-capacity`` counts env steps too: the replay holds ``replay_capacity / period``
sequences (each adds ``period`` new steps; the paper's 4M observations were 100K
sequences of 80 starting every 40), 800K steps unless given (:attr:`replay_steps`).
``--learning-starts`` stays in env steps (pacing's); the learner starts once the
replay holds ``learning_starts / (2 period)`` sequences: an episode makes one sequence
per ``period`` steps, or one per episode where episodes are shorter (down to
``burn_in + 1`` steps; one step where an episode's first sequence is trained from its
first step, ``train_episode_starts``). Where most episodes are shorter still,
pacing's steps make fewer, and the actors step past pacing until the replay holds them
(the runtime's filling, :mod:`experiments.roles.actor_learner.filling`); where every
episode is, none is ever made, and the actors end the run with an error naming
``--burn-in`` (:class:`~algorithms.r2d2.actor.SequenceItems`) instead of waiting.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from algorithms.actor_learner import Learner
from algorithms.builder import Builder, EnvSpec, Flow
from algorithms.dqn.config import ApexConfig
from algorithms.params import require
from algorithms.r2d2.actor import R2D2Actor, R2D2Greedy
from algorithms.r2d2.config import R2D2Config
from algorithms.r2d2.r2d2 import R2D2

# The fields of ApexConfig the job leaves unset, for R2D2 (every family's): the
# paper's Adam rate is for Atari's 1e-4 with a batch of 64 sequences of 80 steps; small
# envs learn faster at 1e-3. A batch is 32 sequences (unroll 20 trained steps each by
# the job's r2d2 section: 640 steps), so 0.05 batches per env step replays each step
# about 32 times, Ape-X DQN's ratio for vectors (0.25 x 128).
R2D2_DEFAULTS: dict[str, Any] = {"lr": 1e-3, "n_step": 5, "batch_size": 32, "tau": 1.0, "hidden": (64,),
                                 "updates_per_step": 0.05, "eps_alpha": 7.0, "eps": 0.4}


class R2D2Builder(Builder):
    """R2D2 on a Discrete action space; ``network(observation_space, action_space)``
    replaces :func:`~algorithms.r2d2.network.recurrent_q_network` (it must have
    ``initial_state(batch, device)``: see :class:`~algorithms.r2d2.R2D2`)."""

    algorithm_base, actor_base, learner_base = R2D2, R2D2Actor, Learner
    # 800K env steps (100,000 sequences of period 8): on BreakoutNoTrail, 100K steps
    # (Ape-X DQN's span) trailed or tied it at every report time from 600 s on, on both
    # seeds, with half the memory (experiments/tuning.md, "R2D2").
    replay_steps = 800_000

    def __init__(self, *, learn: ApexConfig, r2d2: R2D2Config, spec: EnvSpec, network: Any = None,
                 algorithm: type | None = None, actor: type | None = None, learner: type | None = None) -> None:
        from gymnasium import spaces

        if not isinstance(spec.action_space, spaces.Discrete):
            raise ValueError(f"r2d2 needs a Discrete action space, got {spec.action_space}")
        super().__init__(spec=spec, network=network, algorithm=algorithm, actor=actor, learner=learner)
        require(learn, tuple(R2D2_DEFAULTS))
        require(r2d2, ("lr_anneal_steps",))  # the job fills it by family (r2d2.config.DEFAULTS_BY_FAMILY)
        self.learn = self.apex = learn
        # Several learners update in step (one update of each per due update), so each
        # counts the run's env steps times the replay ratio.
        anneal = max(1, round(r2d2.lr_anneal_steps * learn.updates_per_step)) if r2d2.lr_anneal_steps else None
        self.r2d2 = dataclasses.replace(
            r2d2, gamma=learn.gamma, n_step=learn.n_step, lr=learn.lr, adam_eps=learn.adam_eps,
            target_update_interval=learn.target_update, hidden=learn.hidden, cnn=learn.cnn,
            dueling=learn.dueling, lr_anneal_updates=anneal)

    @staticmethod
    def defaults(family: str) -> dict[str, Any]:
        """The values of the fields of ``learn`` the Ape-X job leaves unset (every family's)."""
        return dict(R2D2_DEFAULTS)

    @property
    def flow(self) -> Flow:
        learn, cfg = self.learn, self.r2d2
        return Flow(data="replay", batch_size=learn.batch_size, push_every=learn.push_every,
                    pull_every=learn.pull_every, held_steps=cfg.sequence_length + 1,
                    learning_starts=-(-learn.learning_starts // (2 * cfg.period)),
                    updates_per_step=learn.updates_per_step, n_step=learn.n_step, items="sequences",
                    start_steps=learn.learning_starts, steps_per_item=cfg.period)

    def make_algorithm(self, *, device: Any, seed: int) -> R2D2:
        import torch

        from algorithms.r2d2.network import recurrent_q_network

        obs_space, act_space = self.spec.observation_space, self.spec.action_space
        torch.manual_seed(seed)
        cfg = self.r2d2
        if self.network is not None:
            net = self.network(obs_space, act_space)
        else:
            net = recurrent_q_network(obs_space.shape, int(act_space.n), lstm_size=cfg.lstm_size, hidden=cfg.hidden,
                                      dueling=cfg.dueling, last_action_reward=cfg.last_action_reward, cnn=cfg.cnn)
        return self.algorithm_cls(network=net, num_actions=int(act_space.n), config=cfg, device=device, seed=seed)

    def make_actor(self, algorithm: R2D2, *, env: Any, sink: Any, params: Any, index: int, num_actors: int,
                   seed: int) -> R2D2Actor:
        return self.actor_cls(r2d2=algorithm, env=env, buffer=sink, params=params, index=index,
                              num_actors=num_actors, config=self.apex, seed=seed)

    def make_learner(self, algorithm: R2D2, *, source: Any, params: Any) -> Learner:
        return self.learner_cls(algorithm=algorithm, source=source, params=params,
                                batch_size=self.learn.batch_size, push_every=self.learn.push_every,
                                weighted=True)

    def greedy(self, algorithm: R2D2) -> R2D2Greedy:
        """A greedy policy with its own recurrent state per episode (reset by
        ``episodes_started``, which :func:`algorithms.rollout.evaluate` calls)."""
        return R2D2Greedy(algorithm)
