"""Typed configs on the command line: a dataclass becomes an argparse parser.

Each field is a flag (``learning_rate`` -> ``--learning-rate``) whose help is the
field's ``metadata["help"]``. After parsing, the config's ``validate()`` (if it
has one) runs, so an invalid value is reported, with the flag's name, before any
process starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def parse_config(config_cls: type[T], argv: Sequence[str] | None = None, *, description: str = "") -> T:
    """Parse ``argv`` into ``config_cls``; exits with status 2 and a clear message on bad input."""
    parser = build_parser(config_cls, description=description)
    namespace = parser.parse_args(argv)
    try:
        config = config_cls(**vars(namespace))
        validate = getattr(config, "validate", None)
        if validate is not None:
            validate()
    except (TypeError, ValueError) as exc:
        parser.error(str(exc))
    return config


def build_parser(config_cls: type, *, description: str = "") -> argparse.ArgumentParser:
    if not dataclasses.is_dataclass(config_cls):
        raise TypeError(f"{config_cls!r} is not a dataclass")
    parser = argparse.ArgumentParser(
        description=description or (config_cls.__doc__ or "").strip(),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        allow_abbrev=False,
    )
    hints = typing.get_type_hints(config_cls)
    for field in dataclasses.fields(config_cls):
        if not field.init:
            continue
        flag = "--" + field.name.replace("_", "-")
        help_text = field.metadata.get("help", "")
        default = _default_of(field)
        kind, optional = _unwrap_optional(hints[field.name])
        if kind is bool:
            parser.add_argument(flag, dest=field.name, action=argparse.BooleanOptionalAction,
                                default=default, help=help_text)
            continue
        choices = None
        if typing.get_origin(kind) is typing.Literal:
            choices = list(typing.get_args(kind))
            kind = type(choices[0])
        if kind not in (int, float, str):
            raise TypeError(f"config field {field.name!r} has unsupported type {hints[field.name]!r}")
        parser.add_argument(flag, dest=field.name, type=_parser_for(kind, optional), default=default,
                            choices=choices, help=help_text, metavar=kind.__name__.upper())
    return parser


def config_dict(config: Any) -> dict[str, Any]:
    """A flat dict of a config dataclass, for logging."""
    return dataclasses.asdict(config)


def _default_of(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    raise TypeError(f"config field {field.name!r} needs a default to be a command-line flag")


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
