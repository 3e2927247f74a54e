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


def coerce(key: str, value: Any, annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin is Literal:
        choices = typing.get_args(annotation)
        if value not in choices:
            raise ParamError(f"{key} must be one of {', '.join(map(str, choices))}, got {value!r}")
        return value
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
    if annotation not in (int, float):
        raise ParamError(f"{key}: unsupported parameter type {annotation!r}")
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
