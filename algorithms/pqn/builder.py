"""PQN as a synchronous data-parallel builder (Gallici et al. 2025, "Simplifying Deep
Temporal Difference Learning", ICLR, arXiv:2407.04811): every member collects an
epsilon-greedy rollout from its own envs and runs PQN's epochs of minibatches on it,
each minibatch's gradient averaged over the group (:class:`algorithms.pqn.PQN`'s
``grad_hook``). Epsilon and the learning rate follow the *group's* env steps, so N
members decay them N times faster per rollout than one, at the same rate per env
step as the single-process schedule. The hyperparameters are the PQN job's ``learn``
section (:class:`experiments.pqn.LearnConfig`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from algorithms.builder import EnvSpec
from algorithms.params import require
from algorithms.pqn.config import BY_FAMILY, PQNConfig
from algorithms.pqn.pqn import PQN
from algorithms.sync import Hook, SyncBuilder, SyncRunner


class PQNSyncRunner(SyncRunner):
    """A member's PQN loop: epsilon from the group's env steps before each rollout;
    the acting Q values ride along as ``max_q`` (the update reuses them for its targets)."""

    algorithm: PQN

    def __init__(self, *, algorithm: PQN, env: Any, n_steps: int, seed: int | None = None) -> None:
        super().__init__(algorithm=algorithm, env=env, n_steps=n_steps, seed=seed)
        self._max_q: list[np.ndarray] = []

    def sample_actions(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        actions, max_q = self.algorithm.act_and_max_q(obs, explore=True)
        self._max_q.append(max_q)
        return actions, actions

    def before_collect(self) -> None:
        pqn = self.algorithm
        pqn.epsilon = pqn.epsilon_at(pqn.env_steps)
        self._max_q = []

    def learn(self, rollout: dict[str, np.ndarray]) -> dict[str, float]:
        rollout["max_q"] = np.stack(self._max_q)  # one row per step taken, a cut rollout too
        metrics = self.algorithm.update(rollout)
        metrics["epsilon"] = float(self.algorithm.epsilon)
        return metrics

    def set_progress(self, env_steps: int) -> None:
        # PQN counted its own steps; its schedules follow the group's.
        self.algorithm.env_steps = int(env_steps)


class PQNBuilder(SyncBuilder):
    """PQN; ``network(observation_space, action_space)`` gives the Q network
    (``forward(obs) -> Q values``; default: by observation family, with LayerNorm)."""

    algorithm_base = PQN

    def __init__(self, *, learn: PQNConfig, spec: EnvSpec, network: Any = None,
                 algorithm: type | None = None) -> None:
        super().__init__(spec=spec, network=network, algorithm=algorithm)
        require(learn, BY_FAMILY)
        learn.validate()
        self.learn = self.config = learn

    @property
    def n_steps(self) -> int:
        return self.learn.n_steps

    @property
    def minibatch_steps(self) -> int:
        return self.config.minibatches

    def make_algorithm(self, *, device: Any, seed: int, sample_seed: int, grad_hook: Hook | None = None,
                       mean_hook: Hook | None = None) -> PQN:
        import torch

        obs_space, act_space = self.spec.observation_space, self.spec.action_space
        with torch.random.fork_rng(devices=[]):  # the same initial weights on every member
            torch.manual_seed(seed)
            network = self.network(obs_space, act_space) if self.network else None
            return self.algorithm_cls(num_actions=int(act_space.n), network=network,
                                      observation_shape=None if network is not None else obs_space.shape,
                                      config=self.config, device=device, seed=sample_seed, grad_hook=grad_hook)

    def make_runner(self, algorithm: PQN, *, env: Any, seed: int) -> SyncRunner:
        return PQNSyncRunner(algorithm=algorithm, env=env, n_steps=self.n_steps, seed=seed)

    def reseed(self, algorithm: PQN, sample_seed: int) -> None:
        algorithm.reseed(sample_seed)
