"""The command group, and the one place where errors (a stray `sys.exit` too) become what a user sees:
`gpt-train: error: <one line>` and a non-zero exit."""

from __future__ import annotations

import ast
import importlib
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from gpt_train.errors import TrainError, message_of
from gpt_train.guard import exit_origin
from gpt_train.heap import keep_freed_memory
from gpt_train.signals import ctrl_c_interrupts, stop_when_the_reader_goes

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def out_of_memory(error: RuntimeError) -> str | None:
    """The first words of `error` where it says an allocation failed (torch.OutOfMemoryError, the CPU allocator's
    own), else None."""
    words = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if "out of memory" not in words.lower() and "can't allocate memory" not in words:
        return None
    return words[:160]


class CommandError(click.ClickException):
    """What the user sees of any failure: one line on stderr, `gpt-train: error: ...`, and an exit status."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: object = None) -> None:
        rank = other_rank()
        label = f"[rank {rank}] " if rank else ""  # each rank's error, which may be its own
        click.echo(f"gpt-train: error: {label}{' '.join(self.format_message().split())}", err=True)


class Aborted(CommandError):
    """Ctrl-C or SIGTERM outside the training loop (which stops cleanly by itself): `gpt-train: aborted`, exit 130."""

    def __init__(self) -> None:
        super().__init__("aborted", exit_code=130)

    def show(self, file: object = None) -> None:
        if not other_rank():  # Ctrl-C reaches every rank
            click.echo("gpt-train: aborted", err=True)


def other_rank() -> int:
    """This process's rank under torchrun, or 0 (rank 0, or no torchrun): warnings come from rank 0 alone. Read
    from the environment here, where an error is shown, without `Rank.from_env`'s checks or its torch import."""
    rank, world = os.environ.get("RANK", "0").strip(), os.environ.get("WORLD_SIZE", "1").strip()
    return int(rank) if rank.isdigit() and world.isdigit() and int(world) > 1 else 0


@dataclass(frozen=True)
class LazyCommand:
    """A command imported only when used: `gpt-train --help` reads its docstring from its source, without torch."""

    module: str
    attribute: str

    def short_help(self, limit: int) -> str:
        path = Path(__file__).parents[1].joinpath(*self.module.split(".")[1:]).with_suffix(".py")
        tree = ast.parse(path.read_text(encoding="utf-8"))
        function = next(node for node in tree.body if getattr(node, "name", None) == self.attribute)
        return click.Command(self.attribute, help=ast.get_docstring(function)).get_short_help_str(limit)


class _Group(click.Group):
    """Turns every layer's errors into a CommandError; imports each `lazy` command when it is first looked up."""

    lazy: dict[str, LazyCommand] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in self.lazy:
            entry = self.lazy[name]
            self.add_command(getattr(importlib.import_module(entry.module), entry.attribute), name)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        helps = {name: entry.short_help for name, entry in self.lazy.items()}
        helps |= {name: command.get_short_help_str for name, command in self.commands.items()}
        with formatter.section("Commands"):
            formatter.write_dl([(name, helps[name](limit)) for name in names])

    def make_context(self, info_name, args, parent=None, **extra) -> click.Context:
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.exceptions.NoArgsIsHelpError:  # `gpt-train` alone: the help, laid out as --help lays it out
            raise
        except click.UsageError as error:
            raise CommandError(error.format_message()) from None
        except KeyboardInterrupt:
            raise Aborted() from None

    def invoke(self, ctx: click.Context) -> Any:
        with ctrl_c_interrupts():  # SIGTERM too: `timeout`, a scheduler; a file being written is then not left half
            return self._invoke(ctx)

    def _invoke(self, ctx: click.Context) -> Any:
        try:
            import numpy  # noqa: F401  before torch, which swallows a Ctrl-C inside its own import of numpy

            from gpt_tasks import ParamError, TaskError  # a command runs: torch is needed now
            from gpt_viz import VizError
        except KeyboardInterrupt:  # Ctrl-C while torch imports, the first second or two of every command
            raise Aborted() from None
        except RuntimeError as error:  # one inside a class's __set_name__ comes wrapped ("Error calling __set_name__")
            if not isinstance(error.__cause__, KeyboardInterrupt):
                raise
            raise Aborted() from None
        try:
            return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:  # `gpt-train inspect` alone: its help
            raise
        except click.UsageError as error:
            raise CommandError(error.format_message()) from None
        except (TaskError, ParamError, VizError, TrainError) as error:
            raise CommandError(message_of(error)) from None
        except KeyboardInterrupt:
            raise Aborted() from None
        except RuntimeError as error:  # torch.OutOfMemoryError included
            if (words := out_of_memory(error)) is None:
                raise
            raise CommandError(
                f"out of memory ({words}); a smaller batch_size, block_size or model needs less", exit_code=1
            ) from None
        except SystemExit as exit_:  # click's own exits are click.exceptions.Exit, not SystemExit
            origin = exit_origin(exit_)
            raise CommandError(
                f"{origin} called sys.exit({exit_.code!r}) (a kernel or plugin fails by raising, not by exiting)"
            ) from None
        except Exception as error:  # Triton's own (a kernel needing more shared memory than the GPU has, say)
            if type(error).__module__.split(".")[0] != "triton":
                raise
            words = " ".join(str(error).split())[:200]
            raise CommandError(
                f"Triton failed ({type(error).__name__}: {words}); use --kernels fast, and please report it"
            ) from None


@click.group(cls=_Group, context_settings=CONTEXT)
@click.version_option(package_name="gpt-train")
def cli() -> None:
    """Train, evaluate and sample hand-written GPTs on pluggable tasks.

    \b
    Start here:
      gpt-train verify                 # every hand-written piece vs PyTorch's own
      gpt-train tasks                  # the installed tasks
      gpt-train kernels                # the kernel slots and the installed kernels
      gpt-train run --task sort        # train with the task's defaults
    """


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    if not other_rank():
        click.echo(f"gpt-train: warning: {' '.join(str(message).split())}", err=True)


def main(argv: list[str] | None = None) -> None:
    """The `gpt-train` program, with warnings shown as one line each, on a heap that keeps what a step frees."""
    try:
        warnings.showwarning = _show_warning
        keep_freed_memory()
        with stop_when_the_reader_goes():
            cli.main(args=argv, prog_name="gpt-train")
    except KeyboardInterrupt:  # before the command line is read, where click would not see it
        Aborted().show()
        sys.exit(Aborted().exit_code)
