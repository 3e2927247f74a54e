"""Load a learner's file without letting anything in it take the command down.

A syntax error, an exception or a `sys.exit` while importing, a missing function or one with the wrong
arguments: each becomes a LearnerError, one line that names the file and the line.
"""

from __future__ import annotations

import inspect
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any


class LearnerError(Exception):
    """Something in the learner's file that keeps it from being graded, said in one line."""


def module_name(path: Path) -> str:
    """The name a learner's file is imported under: its own, so two steps' files never clash."""
    return f"gpt_learn_{path.stem}"


def load_module(path: Path) -> types.ModuleType:
    """Import the learner's file `path` as a fresh module; LearnerError if it cannot be."""
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise LearnerError(f"{path}: cannot read it ({error})") from None
    try:
        code = compile(source, str(path), "exec")
    except SyntaxError as error:
        raise LearnerError(f"{path}:{error.lineno}: syntax error: {error.msg}") from None
    module = types.ModuleType(module_name(path))
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # dataclasses and pickling look the module up by name
    try:
        exec(code, module.__dict__)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # a learner's SystemExit too: it is their code's result, not ours
        raise LearnerError(f"{where(error, path)}: importing it raised {describe(error)}") from None
    return module


def learner_function(module: types.ModuleType, path: Path, name: str, parameters: tuple[str, ...]) -> Callable:
    """The function `name` of the learner's module, checked to take the slot's arguments."""
    found = getattr(module, name, None)
    if not callable(found):
        raise LearnerError(f"{path}: no function `{name}` (the slot calls {name}({', '.join(parameters)}))")
    try:
        inspect.signature(found).bind(*parameters)
    except TypeError:
        line = getattr(getattr(found, "__code__", None), "co_firstlineno", "?")
        raise LearnerError(
            f"{path}:{line}: {name}{inspect.signature(found)} has the wrong signature; the slot calls "
            f"{name}({', '.join(parameters)})"
        ) from None
    except ValueError:  # a builtin without a signature: let the calls decide
        pass
    return found


def where(error: BaseException, path: Path | None) -> str:
    """`path:line` of the deepest frame of the error's traceback in the learner's file (the file alone if none)."""
    if path is None:
        return "your kernel"
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == str(path)]
    return f"{path}:{lines[-1]}" if lines else str(path)


def describe(error: BaseException) -> str:
    """`ValueError: message`, on one line; a SystemExit says its code."""
    if isinstance(error, SystemExit):
        return f"SystemExit({error.code!r}): sys.exit ends the program; a kernel returns its result"
    message = " ".join(str(error).split())
    return f"{type(error).__name__}: {message}" if message else type(error).__name__


def is_stub(error: BaseException) -> bool:
    return type(error) is NotImplementedError


def guarded(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, with a SystemExit (or any BaseException but Ctrl-C) it raises turned into a RuntimeError,
    so that the checks, which catch exceptions, see it as the kernel failing."""

    def call(*args: Any) -> Any:
        try:
            return function(*args)
        except (Exception, KeyboardInterrupt):
            raise
        except BaseException as error:
            raise RuntimeError(describe(error)) from error

    return call
