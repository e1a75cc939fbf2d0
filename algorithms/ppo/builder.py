"""PPO as a synchronous data-parallel builder (Schulman et al. 2017, "Proximal Policy
Optimization Algorithms", arXiv:1707.06347; data-parallel as DD-PPO, Wijmans et al.
2020, ICLR): every member collects its own rollout and runs PPO's epochs of
minibatches on it, each minibatch's gradient averaged over the group
(:class:`algorithms.ppo.PPO`'s ``grad_hook``; ``mean_hook`` keeps a ``target_kl``
early stop the same on every member). The hyperparameters are the PPO job's ``learn``
section, a :class:`PPOConfig`."""

from __future__ import annotations

import dataclasses
from typing import Any

from algorithms.builder import EnvSpec
from algorithms.params import require
from algorithms.ppo.config import BY_FAMILY, PPOConfig
from algorithms.ppo.ppo import PPO
from algorithms.sync import Hook, SyncBuilder, SyncRunner


class PPOBuilder(SyncBuilder):
    """PPO; ``network(observation_space, action_space)`` gives the actor-critic model
    (``forward(obs) -> (policy output, value)``; default: by observation family).
    ``members x num_envs x n_steps`` env steps make one update: what the learning
    rate's annealing (given in env steps) is counted in."""

    algorithm_base = PPO

    def __init__(self, *, learn: PPOConfig, num_envs: int, members: int, spec: EnvSpec, network: Any = None,
                 algorithm: type | None = None) -> None:
        super().__init__(spec=spec, network=network, algorithm=algorithm)
        require(learn, BY_FAMILY)
        self.learn = learn
        # The annealing, given in env steps, counted in updates (every member's rollouts).
        steps = learn.lr_anneal_steps
        updates = max(1, steps // (members * num_envs * learn.n_steps)) if steps else None
        self.config = dataclasses.replace(learn, lr_anneal_updates=updates)

    @property
    def n_steps(self) -> int:
        return self.learn.n_steps

    @property
    def minibatch_steps(self) -> int:
        return self.config.minibatches

    def make_algorithm(self, *, device: Any, seed: int, sample_seed: int, grad_hook: Hook | None = None,
                       mean_hook: Hook | None = None) -> PPO:
        import torch

        with torch.random.fork_rng(devices=[]):  # a user's network: the same weights on every member
            torch.manual_seed(seed)
            model = self.network(self.spec.observation_space, self.spec.action_space) if self.network else None
        # PPO hands its hook the parameters; the program's hook averages gradients.
        params_hook = None if grad_hook is None else (lambda params: grad_hook([p.grad for p in params]))
        return self.algorithm_cls(observation_space=self.spec.observation_space,
                                  action_space=self.spec.action_space, config=self.config, model=model,
                                  device=device, seed=seed, sample_seed=sample_seed, grad_hook=params_hook,
                                  mean_hook=mean_hook)

    def make_runner(self, algorithm: PPO, *, env: Any, seed: int) -> SyncRunner:
        return SyncRunner(algorithm=algorithm, env=env, n_steps=self.n_steps, seed=seed)

    def reseed(self, algorithm: PPO, sample_seed: int) -> None:
        algorithm.generator.manual_seed(sample_seed)

    def network_of(self, algorithm: PPO) -> Any:
        return algorithm.model
