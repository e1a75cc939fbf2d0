"""A2C and A3C as builders of the two programs (Mnih et al. 2016, "Asynchronous Methods
for Deep Reinforcement Learning", arXiv:1602.01783).

- :class:`A2CBuilder` (synchronous A2C, the synchronous data-parallel program): every
  member of the learner group collects its own rollout and takes one A2C step on it,
  its gradient averaged over the group (:class:`~algorithms.a2c.A2C`'s ``grad_hook``),
  so the parameters stay identical on every member. ``python -m experiments.a2c``.
- :class:`A3CBuilder` (the actor-learner program's ``gradients`` data path): each actor
  collects a rollout with its acting copy, pushes the rollout's A2C gradient to the
  gradient server that learner 0 hosts (which owns the model and the optimizer: the
  paper's shared RMSProp) and pulls the newest parameters
  (:class:`~algorithms.a2c.a3c.A3C` against a :class:`~rlpar.protocols.GradientSink`).
  The learner has nothing to sample: :class:`A3CLearner` follows the server.
  ``python -m experiments.a3c``.

The hyperparameters are the job's ``learn`` section, an :class:`A2CConfig`. Nothing
here imports transport: the server reaches the roles through small protocols.
"""

from __future__ import annotations

from typing import Any

from algorithms.a2c.a2c import A2C
from algorithms.a2c.config import BY_FAMILY, A2CConfig
from algorithms.builder import EnvSpec
from algorithms.params import require
from algorithms.sync import Hook, SyncBuilder, SyncRunner


def _make_a2c(cls: type, spec: EnvSpec, network: Any, config: A2CConfig, *, device: Any, seed: int,
              grad_hook: Any = None) -> A2C:
    """``cls`` (A2C or the user's subclass) with initial weights from ``seed`` (torch's
    global generator left as it was)."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = network(spec.observation_space, spec.action_space) if network else None
        kwargs = {} if grad_hook is None else {"grad_hook": grad_hook}
        return cls(observation_space=spec.observation_space, action_space=spec.action_space, config=config,
                   model=model, device=device, **kwargs)


class A2CBuilder(SyncBuilder):
    """Synchronous A2C; ``network(observation_space, action_space)`` gives the
    actor-critic model (``forward(obs) -> (policy output, value)``; default: by
    observation family). One update per rollout of every member (one gradient step)."""

    algorithm_base = A2C

    def __init__(self, *, learn: A2CConfig, spec: EnvSpec, network: Any = None,
                 algorithm: type | None = None) -> None:
        super().__init__(spec=spec, network=network, algorithm=algorithm)
        require(learn, BY_FAMILY)
        self.learn = self.config = learn

    @property
    def n_steps(self) -> int:
        return int(self.learn.n_steps)

    def make_algorithm(self, *, device: Any, seed: int, sample_seed: int, grad_hook: Hook | None = None,
                       mean_hook: Hook | None = None) -> A2C:
        import torch

        # A2C hands its hook the parameters; the program's hook averages gradients.
        params_hook = None if grad_hook is None else (lambda params: grad_hook([p.grad for p in params]))
        algorithm = _make_a2c(self.algorithm_cls, self.spec, self.network, self.config, device=device,
                              seed=seed, grad_hook=params_hook)
        # A2C samples from torch's global generator: each member is a process of its own
        # (or the one serial member), so its stream is this process's.
        torch.manual_seed(sample_seed)
        return algorithm

    def make_runner(self, algorithm: A2C, *, env: Any, seed: int) -> SyncRunner:
        return SyncRunner(algorithm=algorithm, env=env, n_steps=self.n_steps, seed=seed)

    def reseed(self, algorithm: A2C, sample_seed: int) -> None:
        import torch

        torch.manual_seed(sample_seed)

    def network_of(self, algorithm: A2C) -> Any:
        return algorithm.model
