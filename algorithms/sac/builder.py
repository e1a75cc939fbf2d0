"""Ape-X SAC as a builder: Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic
Algorithms and Applications", arXiv:1812.05905) learning from Ape-X's prioritized
replay (Horgan et al. 2018, arXiv:1803.00933).

Each actor samples its actions from the policy it pulled (every env copy at the
policy's own standard deviation): SAC's exploration is the entropy the learned
temperature keeps, so actors need no schedule of scales of their own. Targets are
one-step by default, the paper's: Ape-X's n-step returns (``--n-step``) leave out the
entropy terms of the steps before the bootstrap and are not corrected for replayed
data from older policies, and on HalfCheetah they learned less per update late in a
run (``experiments/tuning.md``, "SAC's targets"). Until the actors
hold trained parameters they act uniformly at random (``--random-start``, as SB3's
and CleanRL's SAC start). Actions are scaled to the Box; an actor scores the
transitions it adds with its own critics; the learner's priorities are the critics'
mean ``|TD error|``.

The hyperparameters are the Ape-X job's ``learn`` section (an
:class:`~algorithms.dqn.config.ApexConfig`: lr, gamma, n-step, batch size, tau,
hidden sizes, replay ratio, the actors' and learner's pace), its ``continuous`` one
(:class:`~algorithms.td3.config.ContinuousConfig`: ``critic_lr``,
``critic_layer_norm``, ``random_start``) and its ``sac`` one, SAC's own
:class:`~algorithms.sac.config.SACConfig` (temperature, target entropy, log-std
bounds), whose other fields are derived from the first two here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from algorithms.actor_learner import Learner
from algorithms.builder import Builder, EnvSpec, Flow
from algorithms.dqn.apex import ApexDPGActor
from algorithms.dqn.builder import DQNBuilder
from algorithms.dqn.config import ApexConfig
from algorithms.params import require
from algorithms.sac.config import SACConfig
from algorithms.sac.sac import SAC
from algorithms.td3.config import ContinuousConfig

# The fields of ApexConfig the job leaves unset, for SAC: the paper's (lr 3e-4, tau
# 0.005, 256x256, batch 256, one-step targets) at TD3's replay ratio
# (algorithms.td3.config: on a small box the learner is the bound).
SAC_DEFAULTS: dict[str, float | int | tuple[int, ...]] = {
    "lr": 3e-4, "tau": 0.005, "hidden": (256, 256), "batch_size": 256,
    "n_step": 1, "updates_per_step": 0.125}


class SACBuilder(Builder):
    """Ape-X SAC on a Box action space. ``network(observation_space, action_space) ->
    (actor, critic)`` replaces the default MLPs: the actor maps observations to
    ``2 * dim(A)`` (mean, raw log-std), the critic ``cat([obs, action])`` to one value
    (the second critic is a re-initialized copy)."""

    algorithm_base, actor_base, learner_base = SAC, ApexDPGActor, Learner

    def __init__(self, *, learn: ApexConfig, continuous: ContinuousConfig, sac: SACConfig, spec: EnvSpec,
                 network: Any = None, algorithm: type | None = None, actor: type | None = None,
                 learner: type | None = None) -> None:
        from gymnasium import spaces

        if not isinstance(spec.action_space, spaces.Box):
            raise ValueError(f"sac needs a Box action space, got {spec.action_space}")
        super().__init__(spec=spec, network=network, algorithm=algorithm, actor=actor, learner=learner)
        require(learn, tuple(SAC_DEFAULTS))
        self.learn, self.apex, self.continuous, self.sac = learn, learn, continuous, sac

    @staticmethod
    def defaults(family: str) -> dict[str, Any]:
        """The values of the fields of ``learn`` the Ape-X job leaves unset (every family's)."""
        return dict(SAC_DEFAULTS)

    @property
    def flow(self) -> Flow:
        return DQNBuilder.flow_of(self.learn)

    def config(self, seed: int) -> SACConfig:
        """SAC's config: the ``sac`` section with the fields the other sections hold."""
        learn, cont = self.learn, self.continuous
        return dataclasses.replace(
            self.sac, gamma=learn.gamma, tau=learn.tau, actor_lr=learn.lr,
            critic_lr=cont.critic_lr if cont.critic_lr is not None else learn.lr, hidden=learn.hidden,
            batch_size=learn.batch_size, noise_scale=1.0, seed=seed, fast=learn.fast)

    def make_algorithm(self, *, device: Any, seed: int) -> SAC:
        from algorithms.nets import mlp
        from algorithms.td3.continuous import seeded

        obs_space, act_space = self.spec.observation_space, self.spec.action_space
        obs_dim, act_dim, config = int(obs_space.shape[0]), int(act_space.low.size), self.config(seed)
        nets: dict[str, Any] = {}
        if self.network is not None:
            made = self.network(obs_space, act_space)
            if not (isinstance(made, tuple) and len(made) == 2):
                raise TypeError(f"a sac network factory returns (actor, critic), got {type(made).__name__}")
            nets = {"actor": made[0], "critic": made[1]}
        elif self.continuous.critic_layer_norm:
            with seeded(seed):  # SAC's own seeding of its actor is left as it is
                nets = {"critic": mlp(obs_dim + act_dim, 1, hidden=config.hidden, layer_norm=True)}
        return self.algorithm_cls(obs_dim=obs_dim, action_low=act_space.low, action_high=act_space.high,
                                  config=config, device=device, **nets)

    def make_actor(self, algorithm: SAC, *, env: Any, sink: Any, params: Any, index: int, num_actors: int,
                   seed: int) -> ApexDPGActor:
        # sigma 1, alpha 0: every env copy samples at the policy's own standard deviation.
        return self.actor_cls(ddpg=algorithm, env=env, buffer=sink, params=params, index=index,
                              num_actors=num_actors, config=self.apex, sigma=1.0, sigma_alpha=0.0,
                              random_start=self.continuous.random_start, seed=seed)

    def make_learner(self, algorithm: SAC, *, source: Any, params: Any) -> Learner:
        return self.learner_cls(algorithm=algorithm, source=source, params=params,
                                batch_size=self.learn.batch_size, push_every=self.learn.push_every,
                                weighted=True)

    def network_of(self, algorithm: SAC) -> Any:
        return algorithm.actor
