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

import math
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from algorithms.a2c.a2c import A2C, make_optimizer
from algorithms.a2c.a3c import A3C
from algorithms.a2c.config import BY_FAMILY, A2CConfig
from algorithms.actor_learner import Actor, Learner
from algorithms.builder import Builder, EnvSpec, Flow
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


class GradientHost(Protocol):
    """What the ``gradients`` data path gives learner 0 (the program's, transport
    included): ``host(model=, optimizer_factory=, ready=, **server_args)`` makes the
    gradient server (:class:`rlpar.servers.GradServer`'s keywords; a
    :class:`~rlpar.protocols.GradientSink` with ``version``, ``metrics()``,
    ``state_dict()`` and ``load_state_dict()``) where the actors reach it, and returns
    it; ``ready()`` then tells the program's loop when the learner has a step to take."""

    def host(self, *, model: Any, optimizer_factory: Callable[[Any], Any], ready: Callable[[], bool],
             **server_args: Any) -> Any: ...


class A3CActor(Actor):
    """One A3C worker (Mnih et al. 2016, Algorithm S3) as an actor of the program: a
    :meth:`step` collects a rollout of ``n_steps`` vector steps with the acting copy,
    pushes its gradient to ``sink`` (the gradient server) and loads the newest
    parameters (:class:`~algorithms.a2c.a3c.A3C`). Every reported step is in a pushed
    gradient, so an actor that dies loses none. The loss metrics are summed for the
    actor's reports (:meth:`drain_metrics`)."""

    def __init__(self, *, acting: A2C, env: Any, sink: Any, n_steps: int, seed: int | None = None) -> None:
        from algorithms.rollout import RolloutCollector

        # No Actor.__init__: the collector steps the env (and resets it), no adder.
        self.acting, self.env, self.sink, self.params = acting, env, sink, sink
        self.worker = A3C(agent=acting, sink=sink)
        self.collector = RolloutCollector(env=env, sample_actions=self.worker.sample_actions, n_steps=n_steps,
                                          seed=seed)
        self.version = -1
        self.env_steps = self.transitions_added = 0
        self.finished_episodes: list[tuple[float, int]] = []
        self._sums: dict[str, float] = {}
        self._count = 0

    @property
    def dropped_episodes(self) -> int:
        """Episodes cut by an env worker's death (the collector drops them)."""
        return self.collector.dropped_episodes

    @property
    def waiting(self) -> bool:
        return False

    def step(self) -> int:
        """One rollout, its gradient pushed, the newest parameters pulled; the env
        steps it took."""
        metrics = self.worker.update(self.collector.collect())
        for key, value in metrics.items():
            self._sums[key] = self._sums.get(key, 0.0) + value
        self._count += 1
        self.version = self.worker.version
        steps = self.collector.env_steps - self.env_steps
        self.env_steps, self.transitions_added = self.collector.env_steps, self.transitions_added + steps
        returns, lengths = self.collector.drain_episodes()
        self.finished_episodes.extend((float(r), int(n)) for r, n in zip(returns, lengths))
        return steps

    def sync(self) -> bool:
        loaded = self.worker.sync()
        self.version = self.worker.version
        return loaded

    def flush(self) -> None:
        """Nothing is held back: each gradient was pushed whole."""

    def drain_metrics(self) -> tuple[dict[str, float], int]:
        """The sums of the rollouts' metrics since the last call, and how many."""
        sums, count, self._sums, self._count = self._sums, self._count, {}, 0
        return sums, count


class A3CLearner(Learner):
    """Learner 0 of A3C: it hosts the gradient server (``source.host``), which owns a
    network and the optimizer the config names (its statistics shared by every actor's
    gradients: the paper's shared RMSProp), and samples nothing. Its algorithm holds
    what the server holds (model, optimizer, version as ``updates``), so checkpoints,
    ``policy.pt`` and the summary do too:

    - ``serial`` (every actor in this thread, pushing in turn): the server owns the
      algorithm's own network and optimizer; a :meth:`step` takes its version;
    - otherwise the server applies gradients on RPC threads, so it owns a copy, and a
      :meth:`step` (when the server made a new version, at most every ``follow_s``
      seconds) loads the server's state taken under its lock: a checkpoint never holds
      a half-applied step.

    A restored algorithm (a resumed run) is pushed to the server (:meth:`publish`)."""

    def __init__(self, *, algorithm: A2C, source: GradientHost, server_args: Mapping[str, Any],
                 num_envs: int, serial: bool = False, follow_s: float = 0.05) -> None:
        import copy

        self.algorithm, self.source, self.num_envs = algorithm, source, num_envs
        self.serial, self.follow_s = serial, 0.0 if serial else follow_s
        self.params = None
        self.batch_size, self.push_every, self.weighted = 1, 1, False
        self.sample_seconds = self.update_seconds = 0.0
        self.priorities_sent = 0
        self.initial = {k: v.detach().clone() for k, v in algorithm.model.state_dict().items()}
        config = algorithm.config
        if serial:
            model, optimizer_factory = algorithm.model, (lambda params: algorithm.optimizer)
        else:
            model, optimizer_factory = copy.deepcopy(algorithm.model), (lambda params: make_optimizer(params, config))
        self.server = source.host(model=model, optimizer_factory=optimizer_factory, ready=self.ready,
                                  **server_args)
        self._last = 0.0  # when the algorithm last followed the server

    @property
    def updates(self) -> int:
        return self.algorithm.updates

    def ready(self) -> bool:
        """Whether the server has a version the algorithm has not followed yet."""
        return (self.server.version > self.algorithm.updates
                and time.monotonic() - self._last >= self.follow_s)

    def step(self) -> dict[str, float]:
        """Follow the server: its state into the algorithm (no sampling, no update here)."""
        t0 = time.perf_counter()
        self.follow()
        self.update_seconds += time.perf_counter() - t0
        return {}

    def follow(self) -> None:
        if self.serial:  # the server's network and optimizer are the algorithm's
            self.algorithm.updates = self.server.version
            return
        state = self.server.state_dict()
        self.algorithm.load_state_dict({"model": state["model"], "optimizer": state["optimizer"],
                                        "updates": int(state["counters"]["version"])})
        self._last = time.monotonic()

    def publish(self) -> int:
        """A restored algorithm (a resumed run) into the server: its model, optimizer
        statistics and version."""
        state = self.server.state_dict()
        algorithm = self.algorithm
        state["model"] = algorithm.model.state_dict()
        state["optimizer"] = algorithm.optimizer.state_dict()
        state["counters"]["version"] = algorithm.updates
        self.server.load_state_dict(state)
        return algorithm.updates

    def scalars(self) -> dict[str, float]:
        """The server's curves (``server/...``)."""
        server = self.server.metrics()
        return {"server/staleness_mean": server["mean_staleness"], "server/applied": server["applied"],
                "server/dropped": server["dropped"]}

    def settle(self) -> None:
        """Follow the server's last version (the actors have stopped pushing)."""
        if self.server.version != self.algorithm.updates:
            self.follow()

    def figures(self) -> dict[str, Any]:
        """The summary's server figures (of the version the algorithm followed last)."""
        server = self.server.metrics()
        final = self.algorithm.model.state_dict()
        change = math.sqrt(sum(float((final[k].cpu() - v.cpu()).float().pow(2).sum())
                               for k, v in self.initial.items()))
        return {"applied": int(server["applied"]), "dropped": int(server["dropped"]),
                "received": int(server["received"]), "version": int(server["version"]),
                "mean_staleness": float(server["mean_staleness"]), "pending": int(server["pending"]),
                "param_change": change, "num_envs": self.num_envs}


class A3CBuilder(Builder):
    """A3C on the actor-learner program's ``gradients`` data path (see the module
    docstring); ``network(observation_space, action_space)`` gives the actor-critic
    model (default: by observation family). ``server_args``: the gradient server's
    staleness rule (``max_staleness``, ``staleness_policy``); ``serial``: every role in
    one thread (:class:`A3CLearner`'s server then owns the learner's own network);
    ``follow_s``: otherwise, how often at most learner 0's algorithm follows the server."""

    algorithm_base, actor_base, learner_base = A2C, A3CActor, A3CLearner

    def __init__(self, *, learn: A2CConfig, num_envs: int, spec: EnvSpec, server_args: Mapping[str, Any],
                 serial: bool = False, follow_s: float = 0.05, network: Any = None, algorithm: type | None = None,
                 actor: type | None = None, learner: type | None = None) -> None:
        super().__init__(spec=spec, network=network, algorithm=algorithm, actor=actor, learner=learner)
        require(learn, BY_FAMILY)
        self.learn, self.num_envs = learn, num_envs
        self.server_args, self.serial, self.follow_s = dict(server_args), serial, follow_s

    @property
    def flow(self) -> Flow:
        n_steps = int(self.learn.n_steps)
        return Flow(data="gradients", batch_size=1, push_every=1, pull_every=n_steps * self.num_envs,
                    held_steps=n_steps)

    def make_algorithm(self, *, device: Any, seed: int) -> A2C:
        import torch

        # The acting copy samples from torch's global generator: an actor's own
        # stream (as IMPALA's; the learner's copy never samples).
        torch.manual_seed(seed)
        return _make_a2c(self.algorithm_cls, self.spec, self.network, self.learn, device=device, seed=seed)

    def make_actor(self, algorithm: A2C, *, env: Any, sink: Any, params: Any, index: int, num_actors: int,
                   seed: int) -> Actor:
        return self.actor_cls(acting=algorithm, env=env, sink=sink, n_steps=int(self.learn.n_steps), seed=seed)

    def make_learner(self, algorithm: A2C, *, source: Any, params: Any) -> Learner:
        return self.learner_cls(algorithm=algorithm, source=source, server_args=self.server_args,
                                num_envs=self.num_envs, serial=self.serial, follow_s=self.follow_s)

    def network_of(self, algorithm: A2C) -> Any:
        return algorithm.model

    def algorithm_calls(self) -> dict[str, str]:
        calls = {k: v for k, v in super().algorithm_calls().items() if k != "learn"}
        calls["compute_gradients"] = ("compute_gradients(rollout) -> (grads, metrics): each actor's gradient "
                                      "(algorithms.a2c.A3C)")
        calls["sample_actions"] = "sample_actions(obs) -> (actions, env_actions): each actor's rollouts"
        return calls
