"""What the actor-learner program needs from an algorithm: its builder.

The idea is Acme's (Hoffman et al. 2020, "Acme: A Research Framework for Distributed
Reinforcement Learning", arXiv:2006.00979): an agent says how to make its pieces, and
one distributed program wires any agent. Here a :class:`Builder` makes

- the algorithm (networks, optimizer): the learner's, and each actor's acting copy;
- the :class:`~algorithms.actor_learner.Actor` around an acting copy: its
  exploration for actor ``index`` of ``num_actors``, its adder (n-step transitions,
  or unrolls), whether what it sends carries priorities;
- the :class:`~algorithms.actor_learner.Learner` around the learner's algorithm;
- the evaluation policy (:meth:`greedy`) and, for a queue, how unrolls become one
  learner batch (:meth:`collate`);

and says in :attr:`flow` how data moves (replay or queue, batch size, the replay
ratio), which the program sizes its parts and pacing by. A builder imports no
transport: the program (``experiments/roles/actor_learner/``) hands it local or
remote parts through the small protocols of :mod:`rlpar.protocols`. What a
checkpoint holds is the algorithm's ``state_dict()``; what ``policy.pt`` holds,
and what actors pull, its ``policy_state()``.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import numpy as np

from algorithms.actor_learner import Actor, Learner

Batch = dict[str, np.ndarray]


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """The spaces of one env (a gymnasium ``Space`` each)."""

    observation_space: Any
    action_space: Any


@dataclasses.dataclass(frozen=True)
class Flow:
    """How data moves between an algorithm's roles.

    ``data``: ``"replay"`` (prioritized transitions, sampled many times),
    ``"queue"`` (unrolls, each used once, in order) or ``"gradients"`` (A3C's: actors
    push gradients to a server in learner 0's process, which applies them; nothing to
    sample). ``batch_size``: what one update
    takes (transitions, or unrolls). ``learning_starts``: transitions the replay holds
    before the first update (0 for a queue). ``updates_per_step``: the replay ratio
    the program paces actors and learner to (None for a queue, whose bound paces).
    ``held_steps``: vector steps an actor holds back before they reach the data path
    (n-step window plus add buffer; an unroll), so pacing leaves room for them.
    ``push_every``: learner updates between publications; ``pull_every``: actor env
    steps between pulls. ``n_step``: how many steps a transition's ``next_obs`` is
    after its ``obs`` (a replay of frame stacks stores their overlap once). ``items``:
    what one replay item is, ``"transitions"`` or ``"sequences"`` (R2D2's: fixed-length
    stretches of steps, :func:`rlpar.buffers.sequence_spec`); ``batch_size`` and
    ``learning_starts`` count items. ``start_steps``: the env steps pacing counts
    before learning starts (None: ``learning_starts``, one transition per env step);
    sequences give it in env steps, with ``learning_starts`` items that fewer of
    them surely make, or the actors would stop, paced, before the learner starts.
    ``steps_per_item``: the env steps one item adds to the replay (1 for transitions,
    R2D2's ``period`` for its overlapping sequences): the replay holds
    ``--replay-capacity / steps_per_item`` items, so that the flag counts env steps
    for every algorithm."""

    data: Literal["replay", "queue", "gradients"]
    batch_size: int
    push_every: int
    pull_every: int
    held_steps: int
    learning_starts: int = 0
    updates_per_step: float | None = None
    n_step: int = 1
    items: Literal["transitions", "sequences"] = "transitions"
    start_steps: int | None = None
    steps_per_item: int = 1

    def __post_init__(self) -> None:
        if self.data not in ("replay", "queue", "gradients"):
            raise ValueError(f"data must be 'replay', 'queue' or 'gradients', got {self.data!r}")
        if self.items not in ("transitions", "sequences"):
            raise ValueError(f"items must be 'transitions' or 'sequences', got {self.items!r}")
        for name in ("batch_size", "push_every", "pull_every", "held_steps", "n_step", "steps_per_item"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.learning_starts < 0 or (self.start_steps or 0) < 0:
            raise ValueError(f"learning_starts and start_steps must be >= 0, got {self.learning_starts}, "
                             f"{self.start_steps}")
        if self.data == "replay" and not (self.updates_per_step or 0) > 0:
            raise ValueError(f"a replay needs updates_per_step > 0, got {self.updates_per_step}")


class Builder(abc.ABC):
    """One algorithm as the actor-learner program runs it (see the module docstring).

    ``algorithm``, ``actor``, ``learner``: the user's subclasses of
    :attr:`algorithm_base`, :attr:`actor_base`, :attr:`learner_base` (None: the
    builder's own); ``network``: ``network(observation_space, action_space) ->
    nn.Module`` replacing the default one, as the algorithm's docs say."""

    algorithm_base: ClassVar[type]
    actor_base: ClassVar[type] = Actor
    learner_base: ClassVar[type] = Learner
    # The env steps its replay holds when the job's --replay-capacity is not given.
    replay_steps: ClassVar[int] = 100_000
    # The key of the algorithm's state in a checkpoint (Ape-X DQN's are "dqn").
    state_key: ClassVar[str] = "algorithm"

    def __init__(self, *, spec: EnvSpec, network: Callable[[Any, Any], Any] | None = None,
                 algorithm: type | None = None, actor: type | None = None,
                 learner: type | None = None) -> None:
        for name, given, base in (("algorithm", algorithm, self.algorithm_base),
                                  ("actor", actor, self.actor_base), ("learner", learner, self.learner_base)):
            if given is not None and not (isinstance(given, type) and issubclass(given, base)):
                raise TypeError(f"{name} must be a subclass of {base.__module__}.{base.__qualname__}, "
                                f"got {given!r}")
        if network is not None and not callable(network):
            raise TypeError(f"network must be a callable factory, got {network!r}")
        self.spec, self.network = spec, network
        self.algorithm_cls = algorithm or self.algorithm_base
        self.actor_cls, self.learner_cls = actor or self.actor_base, learner or self.learner_base

    @property
    @abc.abstractmethod
    def flow(self) -> Flow:
        """How data moves (see :class:`Flow`)."""

    @abc.abstractmethod
    def make_algorithm(self, *, device: Any, seed: int) -> Any:
        """The algorithm on ``device`` (the learner's; an actor's copy on the CPU)."""

    @abc.abstractmethod
    def make_actor(self, algorithm: Any, *, env: Any, sink: Any, params: Any, index: int,
                   num_actors: int, seed: int) -> Actor:
        """Actor ``index`` of ``num_actors`` around the acting copy ``algorithm``."""

    @abc.abstractmethod
    def make_learner(self, algorithm: Any, *, source: Any, params: Any) -> Learner:
        """The learner around the learner's ``algorithm``."""

    def set_grad_hook(self, algorithm: Any, hook: Callable[[Sequence[Any]], None]) -> None:
        """Make the learner's ``algorithm`` one member of a learner group (``--learners
        K`` > 1): ``hook(parameters)`` replaces each ``.grad`` by the group's mean, and
        the algorithm must call it between backward and its optimizer step
        (``algorithms.base.GradHook``). By default it is set as ``algorithm.grad_hook``,
        which DQN, DDPG/TD3 and IMPALA (and their subclasses) call; an algorithm that
        has none cannot keep its members' parameters identical, so it is refused."""
        if not hasattr(algorithm, "grad_hook"):
            raise TypeError(f"{type(algorithm).__name__} has no grad_hook, which several learners "
                            "(--learners > 1) need to average gradients (algorithms.base.GradHook); "
                            f"give it one or override {type(self).__name__}.set_grad_hook")
        algorithm.grad_hook = hook

    def greedy(self, algorithm: Any) -> Callable[[np.ndarray], np.ndarray]:
        """The evaluation policy: ``act(obs batch) -> actions`` without exploration."""
        return functools.partial(algorithm.act, explore=False)

    def make_vector_env(self, env_fn: Callable[[], Any], **options: Any) -> Any:
        """The vector env an actor steps and the evaluator plays (``options``:
        ``envs.make_vector_env``'s keywords: ``num_envs``, ``num_workers``,
        ``autoreset_mode``, ``seed``, the restart and timeout options). An algorithm
        whose env is not a gymnasium one (MADDPG's PettingZoo envs) makes its own here."""
        from envs import make_vector_env

        return make_vector_env(env_fn, **options)

    def play(self, act: Callable[[Any], Any], envs: Any, *, episodes: int, seed: int) -> np.ndarray:
        """The returns of ``episodes`` episodes of ``act`` (:meth:`greedy`'s) on ``envs``
        (one env per episode, each env's first episode counts)."""
        from algorithms.rollout import evaluate

        return evaluate(act, envs, episodes=episodes, seed=seed)

    def evaluation_episodes(self, algorithm: Any, envs: Any, *, episodes: int,
                            seed: int) -> np.ndarray | tuple[np.ndarray, dict[str, float]]:
        """A greedy evaluation of ``algorithm``: :meth:`play` of :meth:`greedy`'s policy,
        the returns; a builder with measures of its own returns ``(returns, measures)``,
        each measure logged as ``eval/<name>`` beside ``eval/return``."""
        return self.play(self.greedy(algorithm), envs, episodes=episodes, seed=seed)

    def episode_layout(self) -> dict[str, Any]:
        """What the coordinator is told of the episodes' returns besides their sum:
        ``agent_names`` and ``teams`` (team -> agent indices) for per-agent and
        per-team curves of a multi-agent algorithm (none here)."""
        return {}

    def summary(self, algorithm: Any) -> dict[str, Any]:
        """The job summary's entries of the learner's ``algorithm`` (none here)."""
        return {}

    def network_of(self, algorithm: Any) -> Any:
        """The module the evaluation policy runs (its ReLUs are watched for dead units)."""
        return algorithm.network

    def collate(self, items: Sequence[Batch]) -> Batch:
        """A queue's items (unrolls) as one learner batch; replay builders have none."""
        raise NotImplementedError(f"{type(self).__name__} learns from a replay: it has no collate")

    def algorithm_calls(self) -> dict[str, str]:
        """What the program calls on this builder's algorithm (the learner's, and each
        actor's acting copy): method name -> its signature and caller. A hook that a
        role class of the user's replaces (its own ``initial_priorities`` or ``learn``)
        no longer calls the algorithm's, nor does a :meth:`greedy` of the builder's own.
        :func:`check_algorithm` refuses a class that lacks one before any rank starts."""
        calls = {
            "policy_state": "policy_state() -> dict of tensors: what the learner publishes to the actors "
                            "and policy.pt holds",
            "load_policy_state": "load_policy_state(state): each actor's pull, experiments.evaluate",
            "state_dict": "state_dict(): the checkpoint",
            "load_state_dict": "load_state_dict(state): a resume, and learners 1..K-1 taking learner 0's state",
        }
        if calls_algorithm(self.learner_cls, "learn"):
            calls["learn"] = "learn(batch) -> algorithms.base.Learned(metrics, priorities): the learner's update"
        if self.flow.data == "replay" and calls_algorithm(self.actor_cls, "initial_priorities"):
            calls["initial_priorities"] = ("initial_priorities(batch) -> np.ndarray: each actor's priorities of "
                                           "the transitions it adds to the replay (a replay flow)")
        if type(self).greedy is Builder.greedy:
            calls["act"] = "act(obs, explore=False) -> actions: the evaluation policy (Builder.greedy)"
        return calls


def calls_algorithm(role: type, hook: str) -> bool:
    """Whether ``role``'s ``hook`` is the library's (``algorithms.*``: Actor's, Learner's,
    ApexActor's), each of which calls the algorithm's method of that name; a hook of the
    user's own may do without it."""
    owner = next((cls for cls in role.__mro__ if hook in vars(cls)), None)
    return owner is None or owner.__module__.split(".")[0] == "algorithms"


def check_algorithm(builder: Any) -> None:
    """TypeError naming each method the program calls on ``builder``'s algorithm
    (``builder.algorithm_calls()``) that its algorithm class (``algorithm_cls``) lacks,
    and that class: made in the launching process, a builder fails here and not as an
    AttributeError in a rank after launch."""
    cls = getattr(builder, "algorithm_cls", None)
    calls = getattr(builder, "algorithm_calls", None)
    if not isinstance(cls, type) or calls is None:
        return
    needed = calls()
    missing = [name for name in needed if not callable(getattr(cls, name, None))]
    if missing:
        raise TypeError(f"{type(builder).__name__}'s algorithm class {cls.__module__}.{cls.__qualname__} has no "
                        + "; no ".join(f"{name} ({needed[name]})" for name in missing))
