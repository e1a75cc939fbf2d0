"""The user's own pieces of a job: env factory, network factory, algorithm and role
classes. They are shipped (cloudpickled) to every rank, so a subclass or factory
defined in the user's module runs in every process of the job."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import warnings
from collections.abc import Callable
from typing import Any

from algorithms.builder import check_algorithm

# In a run directory: which parts the run was made with, each by its qualified name.
PARTS_FILE = "parts.json"
# The parts that shape a run's data and state: a resume or an evaluation needs them
# again. Class parts may change (a subclass that only acts differently, e.g. one that
# injects a fault, leaves the state as it was).
SHAPING = ("env", "network", "builder")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Parts:
    """``env``: zero-argument env factory (replaces ``--env-id``). ``network``:
    ``network(observation_space, action_space) -> torch.nn.Module`` (the Q network of
    DQN, the actor-critic model of A2C). ``algorithm``: a subclass of the job's
    algorithm class (DQN, A2C, MADDPG). ``actor`` / ``learner``: subclasses of the
    job's role classes (Ape-X: ApexActor, ApexLearner). ``builder``: for a job on the
    actor-learner program (Ape-X, IMPALA), ``builder(config, parts, spec) ->
    algorithms.builder.Builder``, the user's algorithm in place of the job's own (it
    gets the job's config, these parts and the env's spaces; see docs/extending.md)."""

    env: Callable[[], Any] | None = None
    network: Callable[[Any, Any], Any] | None = None
    algorithm: type | None = None
    actor: type | None = None
    learner: type | None = None
    builder: Callable[[Any, Any, Any], Any] | None = None

    def check(self, *, algorithm: type, actor: type | None = None, learner: type | None = None,
              why: str = "") -> None:
        """TypeError naming the part that does not fit the job (``why``: why the job
        wants these classes, added in parentheses). With a ``builder`` of the user's,
        the classes are that builder's to take and check against its own bases
        (:class:`algorithms.builder.Builder` does), not the job's default builder's."""
        for name, value in (("env", self.env), ("network", self.network), ("builder", self.builder)):
            if value is not None and not callable(value):
                raise TypeError(f"{name} must be a callable factory, got {value!r}")
        if self.builder is not None:
            return
        for name, given, base in (("algorithm", self.algorithm, algorithm), ("actor", self.actor, actor),
                                  ("learner", self.learner, learner)):
            if given is None:
                continue
            if base is None:
                raise TypeError(f"this job has no {name} class to replace (got {given!r})")
            if not (isinstance(given, type) and issubclass(given, base)):
                raise TypeError(f"{name} must be a subclass of {base.__module__}.{base.__qualname__}, "
                                f"got {given!r}" + (f" ({why})" if why else ""))

    def make_builder(self, default: Callable[[Any, Any, Any], Any], config: Any, spec: Any, base: type) -> Any:
        """The user's builder (``builder``) or the job's (``default``), made as
        ``make(config, parts, spec)`` and checked to be a ``base`` instance: a factory
        that cannot be called so, or that returns anything else (the builder's class
        itself included), gets a TypeError that says what it should be."""
        make = self.builder or default
        what = f"a factory make(config, parts, spec) -> {base.__module__}.{base.__qualname__}"
        try:
            inspect.signature(make).bind(config, self, spec)
        except TypeError as exc:
            raise TypeError(f"the builder factory {make!r} cannot be called as make(config, parts, spec) "
                            f"({exc}); Parts(builder=...) takes {what}") from None
        except ValueError:  # no signature to read (a builtin): the call below tells
            pass
        builder = make(config, self, spec)
        if isinstance(builder, type):
            raise TypeError(f"the builder factory {make!r} returned the class {builder.__qualname__}, not "
                            f"an instance of it (return {builder.__qualname__}(...)); Parts(builder=...) "
                            f"takes {what}")
        if not isinstance(builder, base):
            raise TypeError(f"the builder factory {make!r} returned {type(builder).__name__}, "
                            f"not an {base.__module__}.{base.__qualname__}")
        self.check_forwarded(builder, make)
        check_algorithm(builder)
        return builder

    def check_forwarded(self, builder: Any, make: Any) -> None:
        """TypeError when ``builder`` lacks a part given here: a factory that does not
        pass ``Parts(algorithm=...)`` (or ``actor``, ``learner``, ``network``) on would
        run the builder's own in its place, silently. A builder holds them as
        ``algorithm_cls``, ``actor_cls``, ``learner_cls`` (the given class or a
        subclass of it) and ``network``."""
        dropped = []
        for name in ("algorithm", "actor", "learner"):
            given, held = getattr(self, name), getattr(builder, f"{name}_cls", None)
            if given is not None and not (isinstance(held, type) and issubclass(held, given)):
                dropped.append(f"{name}={given.__qualname__} (it has {getattr(held, '__qualname__', None)})")
        if self.network is not None and getattr(builder, "network", None) is None:
            dropped.append(f"network={getattr(self.network, '__qualname__', repr(self.network))} (it has none)")
        if dropped:
            kind = type(builder).__name__
            raise TypeError(f"the builder factory {make!r} made a {kind} without Parts({', '.join(dropped)}), "
                            f"which would not run: pass each on, as {kind}(..., "
                            + ", ".join(f"{name}=parts.{name}" for name in ("network", "algorithm", "actor", "learner")
                                        if getattr(self, name) is not None) + ")")

    def names(self) -> dict[str, str]:
        """The parts given, each by its qualified name (what :data:`PARTS_FILE` holds)."""
        named = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None:
                named[field.name] = f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}"
        return named

    def save(self, run_dir: str) -> None:
        """Write :data:`PARTS_FILE` in ``run_dir`` when any part was given."""
        named = self.names()
        if not named:
            return
        with open(os.path.join(run_dir, PARTS_FILE), "w") as f:
            json.dump(named, f, indent=2, sort_keys=True)
            f.write("\n")

    def check_given(self, run_dir: str, *, doing: str, how: str) -> None:
        """ValueError when the run in ``run_dir`` was made with one of the parts in
        :data:`SHAPING` (its :data:`PARTS_FILE` says so) and this ``Parts`` lacks it: without
        its env a run would be resumed or evaluated on ``--env-id``'s, which it never
        saw. ``doing``: what was asked ("resume"); ``how``: the call that does it."""
        saved = saved_parts(run_dir)
        missing = [name for name in SHAPING if name in saved and getattr(self, name) is None]
        if missing:
            made = ", ".join(f"{name}={saved[name]}" for name in missing)
            raise ValueError(f"{run_dir!r} was run with Parts({made}); to {doing} it, give the same parts: {how}")
        # Another name may still be the same part (moved, renamed): said, not refused.
        names = self.names()
        for name in SHAPING:
            if name in saved and name in names and names[name] != saved[name]:
                warnings.warn(f"{run_dir!r} was run with Parts({name}={saved[name]}); you {doing} it with "
                              f"{names[name]}", stacklevel=3)


def tell_filled(parts: Parts, before: Any, after: Any, *, job: str) -> None:
    """With a builder of the user's, a warning naming each ``learn`` field the job's
    ``env_defaults`` filled (unset in ``before``, set in ``after``: the configs
    around it) and its value: the job's defaults are its own algorithm's (Ape-X's
    DQN's or TD3's, by the action space and the observations), and a builder of
    another algorithm would read them as its own without notice."""
    learn, was = getattr(after, "learn", None), getattr(before, "learn", None)
    if parts.builder is None or not dataclasses.is_dataclass(learn) or was is None:
        return
    filled = {f.name: getattr(learn, f.name) for f in dataclasses.fields(learn)
              if getattr(was, f.name, None) is None and getattr(learn, f.name) is not None}
    if not filled:
        return
    algorithm = getattr(after, "algorithm", None)
    whose = f"its --algorithm {algorithm}" if isinstance(algorithm, str) else "its own algorithm"
    warnings.warn(f"Parts(builder={getattr(parts.builder, '__qualname__', repr(parts.builder))}) gets config.learn "
                  f"with the {job} job's defaults for {whose} on this env in the fields left unset: "
                  + ", ".join(f"{name}={value!r}" for name, value in filled.items())
                  + "; set them in config.learn (or by flag) to choose", stacklevel=4)


def checked(made: Any, base: type, maker: Any, *, given: type | None = None, part: str = "") -> Any:
    """``made`` if it is a ``base`` and, where the user gave that part
    (``Parts(<part>=given)``), a ``given``; else TypeError naming the builder method
    that made it (``maker``, a bound method), before a role calls anything on it."""
    name = f"{type(maker.__self__).__name__}.{maker.__name__}"
    if not isinstance(made, base):
        raise TypeError(f"{name} returned {type(made).__name__}, not an {base.__module__}.{base.__qualname__}")
    if given is not None and not isinstance(made, given):
        raise TypeError(f"{name} returned {type(made).__name__}, not the Parts({part}={given.__qualname__}) "
                        f"given: it makes its own class instead of the builder's {part}_cls")
    return made


def saved_parts(run_dir: str) -> dict[str, str]:
    """The parts a run directory's :data:`PARTS_FILE` names ({} for a run made without
    any, or before the file was written)."""
    try:
        with open(os.path.join(run_dir, PARTS_FILE)) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        return {}
    return saved if isinstance(saved, dict) else {}
