"""Typed parameters (frozen dataclasses) from Python values or command-line strings: an unknown key or a value of
the wrong type (`--set lenght=8`, `--set length=eight`) fails naming the key instead of training the wrong thing."""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, TypeVar

T = TypeVar("T")

_BOOLS = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}


class ParamError(ValueError):
    """A parameter name or value that does not fit the declaration."""


def field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


SUPPORTED_TYPES = "int, float, bool, str, a Literal of those, or one of them | None"
"""The parameter types `coerce` reads a command-line string as (the registry refuses a task's Params of any other)."""


def supported_type(annotation: Any) -> bool:
    """Whether `coerce` can read a command-line string as `annotation` (one of SUPPORTED_TYPES)."""
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return all(choice is None or isinstance(choice, str | int | float) for choice in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        others = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(others) == 1 and supported_type(others[0])  # X | None; `int | str` would be read as int alone
    return annotation in (bool, str, int, float)


def type_name(annotation: Any) -> str:
    """`annotation` as written in code: `int`, `tuple[int, ...]`, `typing.Literal[1, 2]`."""
    plain = typing.get_origin(annotation) is None and isinstance(annotation, type)
    return annotation.__name__ if plain else repr(annotation)


def _names(choice: Any, text: str) -> bool:
    """Whether command-line `text` names Literal choice `choice`, read as the choice's type ("4" names 4)."""
    if choice is None:
        return text.lower() in ("none", "null")
    if isinstance(choice, bool):
        return _BOOLS.get(text.lower()) is choice
    if isinstance(choice, str):
        return text == choice
    try:
        return (int(text, 10) if isinstance(choice, int) else float(text)) == choice
    except ValueError:
        return False


def _is(choice: Any, value: Any) -> bool:
    """Whether Python `value` is Literal choice `choice`: True is not 1, and an int is a float choice's number."""
    if isinstance(choice, bool) or isinstance(value, bool):
        return value is choice
    if isinstance(choice, float) and isinstance(value, int):
        return value == choice
    return type(value) is type(choice) and value == choice


def _literal(key: str, value: Any, choices: tuple[Any, ...]) -> Any:
    """The choice `value` is, or names as a command-line string; a string choice spelt exactly comes first."""
    if isinstance(value, str):
        matched = [c for c in choices if isinstance(c, str) and c == value] or [c for c in choices if _names(c, value)]
    else:
        matched = [c for c in choices if _is(c, value)]
    if not matched:
        raise ParamError(f"{key} must be one of {', '.join(map(str, choices))}, got {value!r}")
    return matched[0]


def coerce(key: str, value: Any, annotation: Any) -> Any:
    if not supported_type(annotation):
        raise ParamError(f"{key}: unsupported parameter type {type_name(annotation)}; a parameter is {SUPPORTED_TYPES}")
    origin = typing.get_origin(annotation)
    if origin is Literal:
        return _literal(key, value, typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        return coerce(key, value, next(a for a in typing.get_args(annotation) if a is not type(None)))
    if annotation is bool:
        if isinstance(value, bool) or (isinstance(value, str) and value.lower() in _BOOLS):
            return value if isinstance(value, bool) else _BOOLS[value.lower()]
        raise ParamError(f"{key} must be true or false, got {value!r}")
    if annotation is str:
        return str(value)
    if isinstance(value, bool):
        raise ParamError(f"{key} must be {annotation.__name__}, got {value!r}")
    wanted = "an integer" if annotation is int else "a number"
    try:
        if isinstance(value, str):
            value = float(value) if annotation is float else int(value, 10)
    except ValueError:
        raise ParamError(f"{key} must be {wanted}, got {value!r}") from None
    if not isinstance(value, int if annotation is int else int | float):
        raise ParamError(f"{key} must be {wanted}, got {value!r}")
    return annotation(value)


def build_params(cls: type[T], overrides: dict[str, Any], what: str = "parameter") -> T:
    """Instantiate dataclass `cls` from `overrides`, coercing each value to its declared type."""
    types_by_name = field_types(cls)
    unknown = sorted(set(overrides) - set(types_by_name))
    if unknown:
        known = ", ".join(sorted(types_by_name)) or "none"
        raise ParamError(f"unknown {what} {', '.join(map(repr, unknown))}; known: {known}")
    values = {key: coerce(key, value, types_by_name[key]) for key, value in overrides.items()}
    try:
        return cls(**values)
    except (TypeError, ValueError) as error:
        raise ParamError(str(error)) from None


def check_between(name: str, value: float, low: float, high: float, why: str = "") -> None:
    """A Params check: low <= value <= high, else a ValueError (`why` explains the bounds)."""
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}{why}, got {value}")


def check_fraction(name: str, value: float) -> None:
    """A Params check: 0 < value < 1, else a ValueError."""
    if not 0.0 < value < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {value}")
