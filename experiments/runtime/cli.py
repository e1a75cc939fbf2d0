"""Typed configs on the command line: a (nested) dataclass becomes flat flags.

A job's config is a dataclass whose fields are sections (``run``, ``env``,
``replay``, ``algo`` ...), themselves dataclasses of plain fields. Every plain field
becomes one flag named after it (``replay.capacity`` -> ``--replay-capacity`` is
spelled by the field's own name, ``replay_capacity``): flag names are unique across
sections, which keeps one flag name per concept in every job. Each field's help is
its ``metadata["help"]``; ``Literal`` choices are listed; booleans get
``--x/--no-x``; a ``tuple[int, ...]`` is spelled ``64,64`` (and saved so). A field
marked ``internal`` (:mod:`algorithms.params`: an algorithm's config is its job's
``learn`` section) is no flag, and is saved only when it differs from its default.

``--config FILE`` starts from a saved ``config.json`` (a run directory's) and the
flags given on the command line override it; so does ``--resume DIR`` (a job's
``run.resume``), from ``DIR/config.json``. A per-launch field (``per_launch``
metadata: ``resume``) directs one launch and is not part of a run's config: no
``config.json`` holds it and one read ignores it (files written before this rule
did hold it), so ``--config`` of any run, a resumed one too, starts a new run
rather than continuing the old one in place. After parsing, every section's
``validate()`` runs, so a bad value is reported with its flag's name, exit 2,
before any process starts. NaN is refused in every float flag, and so is an
infinity unless the field's metadata says ``allow_inf``.

Why not tyro: it is what CleanRL uses, but importing it costs more than this
whole module (measured in the runtime issue's note), it spells nested fields
``--section.field`` where we want one flat name per concept, and the errors we
need (naming the flag, NaN, cross-field checks) are ours to write either way.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import types
import typing
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar

from algorithms.params import is_flag

T = TypeVar("T")

CONFIG_FLAG = "--config"
RESUME = "resume"  # the field (``RunConfig.resume``) whose run directory a job continues


def flag(name: str) -> str:
    """The command-line spelling of a config field."""
    return "--" + name.replace("_", "-")


def field(default: Any = dataclasses.MISSING, *, help: str, default_factory: Any = dataclasses.MISSING,
          allow_inf: bool = False, per_launch: bool = False) -> Any:
    """A config field with its help text (every flag has help). ``per_launch``: a
    directive of this launch, never saved in (and ignored when read from) a config file."""
    metadata = {"help": help, "allow_inf": allow_inf, "per_launch": per_launch}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def layer_sizes(text: str, *, name: str) -> tuple[int, ...]:
    """``"128,128"`` -> ``(128, 128)``; ValueError naming the flag otherwise."""
    try:
        sizes = tuple(int(h) for h in text.split(",") if h.strip())
    except ValueError:
        raise ValueError(f"{flag(name)} must be comma-separated ints, got {text!r}") from None
    if not sizes or any(h < 1 for h in sizes):
        raise ValueError(f"{flag(name)} must be positive ints, got {text!r}")
    return sizes


def section(factory: Any) -> Any:
    """A nested config section (a dataclass instance with job-specific defaults)."""
    return dataclasses.field(default_factory=factory)


def leaves(config: Any) -> Iterator[tuple[Any, dataclasses.Field, Any]]:
    """``(owner, field, type)`` for every plain field of a possibly nested config that
    is a flag (not the library's ``internal`` ones)."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from leaves(value)
        elif is_flag(f):
            yield config, f, hints[f.name]


def parse_config(config_cls: type[T], argv: Sequence[str] | None = None, *, description: str = "") -> T:
    """Parse ``argv`` into ``config_cls``; exits with status 2 and a message naming
    the flag on bad input."""
    parser = build_parser(config_cls, description=description)
    namespace = vars(parser.parse_args(argv))
    path = namespace.pop("config", None)
    resume = namespace.get(RESUME)
    if path and resume:
        parser.error(f"{CONFIG_FLAG} and {flag(RESUME)}: give one ({flag(RESUME)} goes on with "
                     "the run's own config.json; flags given with it override that)")
    try:
        if resume:  # a resumed run goes on with its own config
            config = load_run_config(config_cls, resume)
        else:
            config = load_config(config_cls, path) if path else config_cls()
        apply_overrides(config, namespace)
        validate(config)
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    return config


def build_parser(config_cls: type, *, description: str = "") -> argparse.ArgumentParser:
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"{config_cls!r} is not a dataclass")
    parser = argparse.ArgumentParser(
        description=description or (config_cls.__doc__ or "").strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    parser.add_argument(CONFIG_FLAG, metavar="FILE", default=None, help=(
        "start a new run from a saved config.json (e.g. runs/<run>/config.json); flags given here "
        "override it"))
    seen: dict[str, str] = {}
    for owner, f, hint in leaves(config_cls()):
        if f.name in seen:
            raise TypeError(f"config field {f.name!r} appears in two sections "
                            f"({seen[f.name]} and {type(owner).__name__}); flag names must be unique")
        seen[f.name] = type(owner).__name__
        default = getattr(owner, f.name)
        help_text = f.metadata.get("help")
        if not help_text:
            raise TypeError(f"config field {type(owner).__name__}.{f.name} has no help text")
        help_text = f"{help_text} (default: {_show(default)})"
        kind, optional = _unwrap_optional(hint)
        # SUPPRESS: only flags given on the command line reach the namespace, so they
        # override a --config file field by field.
        common = {"dest": f.name, "default": argparse.SUPPRESS, "help": help_text}
        if kind is bool:
            parser.add_argument(flag(f.name), action=argparse.BooleanOptionalAction, **common)
            continue
        if _is_sizes(kind):  # "64,64"; STR as it was when jobs kept the text
            parser.add_argument(flag(f.name), type=_sizes_parser(f.name, optional), metavar="STR", **common)
            continue
        choices = None
        if typing.get_origin(kind) is typing.Literal:
            choices = list(typing.get_args(kind))
            kind = type(choices[0])
        if kind not in (int, float, str):
            raise TypeError(f"config field {f.name!r} has unsupported type {hint!r}")
        metavar = "{" + ",".join(map(str, choices)) + "}" if choices else kind.__name__.upper()
        parser.add_argument(flag(f.name), type=_parser_for(kind, optional), choices=choices,
                            metavar=metavar, **common)
    return parser


def apply_overrides(config: Any, values: dict[str, Any]) -> None:
    """Set plain fields by name wherever they live in the nested config."""
    owners = {f.name: (owner, hint) for owner, f, hint in leaves(config)}
    for name, value in values.items():
        if name not in owners:
            raise ValueError(f"unknown config field {name!r}")
        owner, hint = owners[name]
        if _is_sizes(_unwrap_optional(hint)[0]) and value is not None:
            value = _sizes(value, name)
        setattr(owner, name, value)


def validate(config: Any) -> None:
    """Type and finiteness checks on every field, then each section's ``validate()``."""
    for owner, f, hint in leaves(config):
        value = getattr(owner, f.name)
        kind, optional = _unwrap_optional(hint)
        if value is None:
            if not optional:
                raise ValueError(f"{flag(f.name)} may not be none")
            continue
        if _is_sizes(kind):
            setattr(owner, f.name, _sizes(value, f.name))
            continue
        if typing.get_origin(kind) is typing.Literal:
            if value not in typing.get_args(kind):
                raise ValueError(f"{flag(f.name)} must be one of {list(typing.get_args(kind))}, got {value!r}")
            continue
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
            setattr(owner, f.name, value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ValueError(f"{flag(f.name)} must be {kind.__name__}, got {value!r}")
        if kind is float and (math.isnan(value) or (math.isinf(value) and not f.metadata.get("allow_inf"))):
            raise ValueError(f"{flag(f.name)} must be a finite number, got {value}")
    for sub in _sections(config):
        check = getattr(sub, "validate", None)
        if check is not None:
            try:
                check()
            except ValueError as exc:  # an algorithm's config names its fields: say the flags
                names = {f.name for f in dataclasses.fields(sub)}
                first = str(exc).split(maxsplit=1)[0] if str(exc) else ""
                if first.rstrip(":,") not in names:
                    raise
                raise ValueError(flag(first) + _flags_in(str(exc)[len(first):], names)) from None


def changed_fields(config: Any, reference: Any) -> dict[str, Any]:
    """The plain fields of ``config`` whose value differs from ``reference``'s (a config
    of the same class), by name: what ``apply_overrides`` would carry over."""
    ours = {f.name: getattr(owner, f.name) for owner, f, _ in leaves(config)}
    theirs = {f.name: getattr(owner, f.name) for owner, f, _ in leaves(reference)}
    return {name: value for name, value in ours.items() if value != theirs[name]}


def config_to_dict(config: Any) -> dict[str, Any]:
    return dataclasses.asdict(config)


def save_config(config: Any, path: str) -> None:
    """``config`` as JSON, without its per-launch fields (a re-run never inherits them)."""
    with open(path, "w") as f:
        json.dump(_saved(config), f, indent=2, sort_keys=True)
        f.write("\n")


def load_config(config_cls: type[T], path: str, *, source: str = CONFIG_FLAG) -> T:
    """A config from a saved ``config.json``; unknown keys are errors (naming ``source``,
    the flag that named the file), missing ones keep their defaults, per-launch ones
    are ignored."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as exc:
        raise ValueError(f"{source}: cannot read {path!r} ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{source}: {path!r} is not JSON ({exc})") from None
    return from_dict(config_cls, data, where=path, source=source)


def load_run_config(config_cls: type[T], run_dir: str) -> T:
    """The config a run directory was run with (``--resume DIR``); errors name ``--resume``."""
    if not os.path.isdir(run_dir):
        raise ValueError(f"{flag(RESUME)} {run_dir!r}: no such directory")
    path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(path):
        raise ValueError(f"{flag(RESUME)} {run_dir!r} is not a run directory (it has no config.json)")
    try:
        return load_config(config_cls, path, source=flag(RESUME))
    except ValueError as exc:
        job = _job_of(run_dir)
        if job is None:
            raise
        raise ValueError(f"{exc} (the run was made by experiments.{job}: `python -m experiments.{job} "
                         f"{flag(RESUME)} {run_dir}` resumes it)") from None


def _job_of(run_dir: str) -> str | None:
    """The job that made a run directory, by its summary (None if it has none)."""
    try:
        with open(os.path.join(run_dir, "summary.json")) as f:
            job = json.load(f).get("job")
    except (OSError, ValueError, AttributeError):
        return None
    return job if isinstance(job, str) and job.isidentifier() else None


def from_dict(config_cls: type[T], data: Any, *, where: str, source: str = CONFIG_FLAG,
              start: Any = None) -> T:
    """``start`` (default: ``config_cls()``) with ``data``'s fields: a section starts from
    its job's defaults (an algorithm's config as its job's section differs from its own)."""
    if not isinstance(data, dict):
        raise ValueError(f"{source}: {where}: expected an object for {config_cls.__name__}")
    config = config_cls() if start is None else start
    known = {f.name: f for f in dataclasses.fields(config_cls)}
    hints = typing.get_type_hints(config_cls)
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ValueError(f"{source}: {where}: unknown field(s) {unknown} for {config_cls.__name__}")
    for name, value in data.items():
        if known[name].metadata.get("per_launch"):  # a file written before they were left out
            continue
        current = getattr(config, name)
        if dataclasses.is_dataclass(current):
            value = from_dict(type(current), value, where=f"{where}:{name}", source=source, start=current)
        elif _is_sizes(_unwrap_optional(hints[name])[0]) and value is not None:
            value = _sizes(value, name)
        setattr(config, name, value)
    return config


def _saved(config: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    defaults = None
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            out[f.name] = _saved(value)
        elif f.metadata.get("per_launch"):
            continue
        elif not is_flag(f):  # a library user's setting survives a resume; no key otherwise
            defaults = defaults or type(config)()
            if value != getattr(defaults, f.name):
                out[f.name] = value
        else:  # plain fields hold immutable values; sizes as their flag spells them
            out[f.name] = _show(value) if isinstance(value, tuple) else value
    return out


def _sections(config: Any) -> Iterator[Any]:
    """Sections before the config that holds them: a job's cross-section checks
    run on sections already known to be valid."""
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            yield from _sections(value)
    yield config


def _flags_in(text: str, names: set[str]) -> str:
    """``text`` with the snake_case ``names`` in it spelled as flags (not prose words)."""
    return re.sub(r"\b[a-z]+(?:_[a-z0-9]+)+\b", lambda m: flag(m.group()) if m.group() in names else m.group(), text)


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return "none" if value is None else str(value)


def _is_sizes(kind: Any) -> bool:
    return typing.get_origin(kind) is tuple and typing.get_args(kind) == (int, ...)


def _sizes(value: Any, name: str) -> tuple[int, ...]:
    """Layer sizes from their text (``"64,64"``: a flag, a config.json) or a sequence."""
    if isinstance(value, str):
        return layer_sizes(value, name=name)
    if not isinstance(value, (tuple, list)) or not value or any(
            isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in value):
        raise ValueError(f"{flag(name)} must be positive ints, got {value!r}")
    return tuple(value)


def _sizes_parser(name: str, optional: bool):
    def parse(text: str) -> tuple[int, ...] | None:
        if optional and text.lower() == "none":  # filled by the job, as if not given
            return None
        try:
            return layer_sizes(text, name=name)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _unwrap_optional(kind: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return kind, False


def _parser_for(kind: type, optional: bool):
    def parse(text: str) -> Any:
        if optional and text.lower() == "none":
            return None
        return kind(text)

    parse.__name__ = kind.__name__  # argparse names the type in its error message
    return parse
