"""IMPALA as a builder (Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL
with Importance Weighted Actor-Learner Architectures", ICML, arXiv:1802.01561): actors
sample from the policy they last pulled and send unrolls with the behaviour
log-probs to a FIFO queue; the learner batches unrolls and corrects for the lag with
V-trace (:class:`algorithms.impala.IMPALA`). The hyperparameters are the IMPALA job's
``learn`` section, an :class:`IMPALAConfig`."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from algorithms.actor_learner import Actor, Learner
from algorithms.builder import Batch, Builder, EnvSpec, Flow
from algorithms.impala.config import BY_FAMILY, IMPALAConfig
from algorithms.impala.impala import IMPALA
from algorithms.impala.unroll import UnrollItems
from algorithms.params import require


class IMPALABuilder(Builder):
    """IMPALA; ``network(observation_space, action_space)`` gives the actor-critic
    model (``forward(obs) -> (policy output, value)``; default: A2C's by observation
    family)."""

    algorithm_base, actor_base, learner_base = IMPALA, Actor, Learner

    def __init__(self, *, learn: IMPALAConfig, num_envs: int, spec: EnvSpec, learners: int = 1, network: Any = None,
                 algorithm: type | None = None, actor: type | None = None, learner: type | None = None) -> None:
        super().__init__(spec=spec, network=network, algorithm=algorithm, actor=actor, learner=learner)
        self.learn, self.num_envs, self.learners = learn, num_envs, learners

    @property
    def config(self) -> IMPALAConfig:
        """The algorithm's config: the job's, with the annealing given in env steps
        counted in updates (one takes ``batch_size`` unrolls of ``unroll_length`` steps
        of every env, on each learner)."""
        learn = self.learn
        require(learn, BY_FAMILY)
        steps = learn.lr_anneal_steps
        per_update = self.learners * learn.batch_size * learn.unroll_length * self.num_envs
        return dataclasses.replace(learn, lr_anneal_updates=max(1, steps // per_update) if steps else None)

    @property
    def flow(self) -> Flow:
        learn = self.learn
        return Flow(data="queue", batch_size=learn.batch_size, push_every=learn.push_every,
                    pull_every=learn.pull_every or learn.unroll_length * self.num_envs,
                    held_steps=learn.unroll_length)

    def make_algorithm(self, *, device: Any, seed: int) -> IMPALA:
        import torch

        torch.manual_seed(seed)
        model = self.network(self.spec.observation_space, self.spec.action_space) if self.network else None
        return self.algorithm_cls(observation_space=self.spec.observation_space,
                                  action_space=self.spec.action_space, config=self.config,
                                  model=model, device=device)

    def make_actor(self, algorithm: IMPALA, *, env: Any, sink: Any, params: Any, index: int, num_actors: int,
                   seed: int) -> Actor:
        def behave(obs: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray]]:
            actions, log_probs = algorithm.sample_actions(obs)
            return algorithm.to_env(actions), {"action": actions, "behaviour_log_prob": log_probs}

        flow = self.flow
        return self.actor_cls(acting=algorithm, behave=behave, env=env, sink=sink, params=params,
                              adder=UnrollItems(unroll_length=self.learn.unroll_length, num_envs=env.num_envs),
                              add_every=1, pull_every=flow.pull_every, prioritized=False, seed=seed)

    def make_learner(self, algorithm: IMPALA, *, source: Any, params: Any) -> Learner:
        return self.learner_cls(algorithm=algorithm, source=source, params=params,
                                batch_size=self.learn.batch_size, push_every=self.learn.push_every,
                                weighted=False)

    def collate(self, items: Sequence[Batch]) -> Batch:
        from algorithms.impala.unroll import collate_unrolls

        return collate_unrolls(items)

    def network_of(self, algorithm: IMPALA) -> Any:
        return algorithm.model
