"""Load a learner's file without letting anything in it take the command down: a syntax error, an exception or a
`sys.exit` while importing, a missing function or the wrong arguments, each a one-line LearnerError naming the line."""

from __future__ import annotations

import functools
import inspect
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from gpt_train.learn.steps import BY_NAME, SOLUTIONS


class LearnerError(Exception):
    """Something in the learner's file that keeps it from being graded, said in one line."""


def load_module(path: Path, source: bytes | None = None) -> types.ModuleType:
    """Import the learner's file `path` as a fresh module, from `source` (the bytes read once, so that what is graded
    is what was read) or else from the file; LearnerError if it cannot be."""
    if source is None:
        try:
            source = path.read_bytes()
        except OSError as error:
            raise LearnerError(f"{path}: cannot read it ({error.strerror or error})") from None
    if b"\0" in source:
        line = source[: source.index(b"\0")].count(b"\n") + 1
        raise LearnerError(f"{path}:{line}: a NUL byte (\\x00): a Python file holds text; save it again as text")
    try:
        code = compile(source, str(path), "exec")  # bytes, as an import reads a file: a BOM or coding line holds
    except SyntaxError as error:
        at = f"{path}:{error.lineno}" if error.lineno else str(path)
        raise LearnerError(f"{at}: syntax error: {error.msg}") from None
    except ValueError as error:  # what compile raises for bytes no Python file could hold
        raise LearnerError(f"{path}: cannot compile it ({describe(error)})") from None
    module = types.ModuleType(f"gpt_learn_{path.stem}")  # its own name: two steps' files never clash
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # dataclasses and pickling look the module up by name
    for name in BY_NAME:  # an earlier step's file it imports (`from block import Block`) is read afresh from its folder
        sys.modules.pop(name, None)
    sys.path.append(str(path.parent))  # last: a file there named like an installed module never replaces it
    try:
        exec(code, module.__dict__)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # a learner's SystemExit too: it is their code's result, not ours
        raise LearnerError(f"{where(error, path)}: importing it raised {describe(error)}") from None
    finally:
        sys.path.remove(str(path.parent))
    if not torch.is_grad_enabled():  # switched off for the whole process: the checks need it on
        torch.set_grad_enabled(True)
        raise LearnerError(
            f"{path}: importing {AUTOGRAD_OFF}; leave it on, and use torch.no_grad() only inside a with block"
        )
    return module


@functools.cache
def solution(name: str) -> types.ModuleType:
    """The shipped answer of step `name`, loaded as a learner's file is."""
    return load_module(SOLUTIONS / f"{name}.py")


def learner_function(module: types.ModuleType, path: Path, name: str, parameters: tuple[str, ...]) -> Callable:
    found = getattr(module, name, None)
    if not callable(found):
        raise LearnerError(f"{path}: no function `{name}` (the slot calls {name}({', '.join(parameters)}))")
    try:
        inspect.signature(found).bind(*parameters)
    except TypeError:
        line = getattr(getattr(found, "__code__", None), "co_firstlineno", "?")
        raise LearnerError(f"{path}:{line}: {name}{inspect.signature(found)} has the wrong signature; the slot calls "
                           f"{name}({', '.join(parameters)})") from None  # fmt: skip
    except ValueError:  # a builtin without a signature: let the calls decide
        pass
    return found


def where(error: BaseException, path: Path | None) -> str:
    """`path:line` of the deepest frame of the error's traceback in the learner's file."""
    if path is None:
        return "your kernel"
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__) if frame.filename == str(path)]
    return f"{path}:{lines[-1]}" if lines else str(path)


def describe(error: BaseException) -> str:
    """`ValueError: message`, on one line (the type alone where the learner's __str__ fails); a SystemExit's code."""
    name = getattr(type(error), "__name__", "an exception")
    if isinstance(error, SystemExit):
        return f"SystemExit({_text(repr, error.code)}): sys.exit ends the program; a kernel returns its result"
    message = " ".join(_text(str, error).split())
    if isinstance(error, ModuleNotFoundError):  # the folder is on the import path only while the file is loaded
        message += " (a module beside your file is found by an import at the top of the file, not inside a function)"
    return f"{name}: {message}" if message else name


def _text(show: Callable[[Any], str], value: Any) -> str:
    """`show(value)`, or '' where the learner's __str__ or __repr__ raises or returns something else."""
    try:
        text = show(value)
    except Exception:
        return ""
    return str.__str__(text) if isinstance(text, str) else ""  # a plain str, whatever subclass it was


def is_stub(error: BaseException) -> bool:
    """An unwritten stub's raise: NotImplementedError itself, not a subclass the learner's code meant."""
    return type(error) is NotImplementedError


def attempt(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """`call()`'s result, or the exception it raised (but Ctrl-C): a learner's SystemExit is their code's result."""
    try:
        return call(), None
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        return None, error


def guarded(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function`, with a SystemExit (any BaseException but Ctrl-C) it raises a RuntimeError: the kernel failing."""

    def call(*args: Any) -> Any:
        try:
            return function(*args)
        except (Exception, KeyboardInterrupt):
            raise
        except BaseException as error:
            raise RuntimeError(describe(error)) from error

    return call


AUTOGRAD_OFF = "it switched autograd off (torch.set_grad_enabled(False) or no_grad left on): the checks need gradients"
