"""Ape-X DQN as a builder (Horgan et al. 2018, "Distributed Prioritized Experience
Replay", ICLR, arXiv:1803.00933): epsilon-greedy actors at rates eps_i, n-step
transitions with initial priorities into a prioritized replay, a DQN learner whose new
priorities go back to it. The hyperparameters are the Ape-X job's ``learn`` section, an
:class:`~algorithms.dqn.config.ApexConfig`, and its ``dqn`` section, the
:class:`~algorithms.dqn.DQNConfig` whose flags are Rainbow's C51 and noisy nets
(Hessel et al. 2018: with double Q, dueling, n-step and priorities); its other fields
are derived from ``learn``."""

from __future__ import annotations

import dataclasses
from typing import Any

from algorithms.builder import Builder, EnvSpec, Flow
from algorithms.dqn.apex import ApexActor, ApexLearner
from algorithms.dqn.config import BY_FAMILY, DEFAULTS_BY_FAMILY, DQN_DEFAULTS, ApexConfig
from algorithms.dqn.dqn import DQN, DQNConfig
from algorithms.params import require


class DQNBuilder(Builder):
    """Ape-X DQN; ``network(observation_space, action_space)`` gives the Q network
    (default: by observation family, :func:`algorithms.nets.q_network`)."""

    algorithm_base, actor_base, learner_base = DQN, ApexActor, ApexLearner
    state_key = "dqn"  # what Ape-X checkpoints have always called it

    def __init__(self, *, learn: ApexConfig, spec: EnvSpec, dqn: DQNConfig | None = None, network: Any = None,
                 algorithm: type | None = None, actor: type | None = None, learner: type | None = None) -> None:
        super().__init__(spec=spec, network=network, algorithm=algorithm, actor=actor, learner=learner)
        require(learn, BY_FAMILY)
        self.learn = self.apex = learn
        self.dqn = dataclasses.replace(
            dqn if dqn is not None else DQNConfig(), gamma=learn.gamma, lr=learn.lr, double_q=learn.double_q,
            target_update_interval=learn.target_update, tau=learn.tau, adam_eps=learn.adam_eps,
            recycle_every=learn.recycle_every, recycle_tau=learn.recycle_tau, fast=learn.fast)
        if self.dqn.augment == "shift" and spec is not None:
            from algorithms.augment import check_shift

            try:
                check_shift(tuple(spec.observation_space.shape), self.dqn.shift_pad)
            except ValueError as e:
                raise ValueError(f"--augment shift: {e}") from None
        if algorithm is None and self.dqn.distributional and self.algorithm_cls is DQN:
            from algorithms.dqn.c51 import CategoricalDQN

            self.algorithm_cls = CategoricalDQN  # C51's hooks; a subclass of the user's stays theirs

    @staticmethod
    def defaults(family: str) -> dict[str, Any]:
        """The values of the fields the Ape-X job leaves unset, for observations of ``family``."""
        return {**DEFAULTS_BY_FAMILY[family], **DQN_DEFAULTS}

    @property
    def flow(self) -> Flow:
        return self.flow_of(self.learn)

    @staticmethod
    def flow_of(learn: ApexConfig) -> Flow:
        """The flow of the Ape-X job's ``learn`` section (TD3/DDPG's too; its fields the job
        fills by family given)."""
        require(learn, ("n_step", "updates_per_step", "batch_size"))
        return Flow(data="replay", batch_size=learn.batch_size, push_every=learn.push_every,
                    pull_every=learn.pull_every, held_steps=learn.add_every + learn.n_step,
                    learning_starts=learn.learning_starts, updates_per_step=learn.updates_per_step,
                    n_step=learn.n_step)

    def make_algorithm(self, *, device: Any, seed: int) -> DQN:
        import torch

        from algorithms.nets import q_network

        obs_space, act_space = self.spec.observation_space, self.spec.action_space
        torch.manual_seed(seed)
        if self.network is not None:
            net = self.network(obs_space, act_space)
        else:
            dqn = self.dqn
            net = q_network(obs_space.shape, int(act_space.n), hidden=self.learn.hidden,
                            dueling=self.learn.dueling, n_atoms=dqn.n_atoms if dqn.distributional else 1,
                            noisy=dqn.noisy, noisy_sigma0=dqn.noisy_sigma0, cnn=self.learn.cnn)
        return self.algorithm_cls(network=net, num_actions=int(act_space.n), config=self.dqn, device=device,
                                  seed=seed)

    def make_actor(self, algorithm: DQN, *, env: Any, sink: Any, params: Any, index: int, num_actors: int,
                   seed: int) -> ApexActor:
        return self.actor_cls(dqn=algorithm, env=env, buffer=sink, params=params, index=index,
                              num_actors=num_actors, config=self.apex, seed=seed)

    def make_learner(self, algorithm: DQN, *, source: Any, params: Any) -> ApexLearner:
        return self.learner_cls(dqn=algorithm, buffer=source, params=params, config=self.apex)
