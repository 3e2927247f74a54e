"""The gpt-train command line, one module per command group, each imported only when used (`gpt_train.cli.group`)."""

from gpt_train.cli.formatting import format_value, wrong_count
from gpt_train.cli.group import CONTEXT, Aborted, CommandError, LazyCommand, cli, main

cli.lazy = {
    "eval": LazyCommand("gpt_train.cli.trained", "evaluate"),
    "export": LazyCommand("gpt_train.cli.trained", "export"),
    "inspect": LazyCommand("gpt_train.lab.inspect", "inspect_command"),
    "kernels": LazyCommand("gpt_train.cli.listing", "kernels"),
    "learn": LazyCommand("gpt_train.cli.learn", "learn"),
    "run": LazyCommand("gpt_train.cli.run", "run"),
    "sample": LazyCommand("gpt_train.cli.trained", "sample"),
    "serve": LazyCommand("gpt_train.lab.serve", "serve"),
    "tasks": LazyCommand("gpt_train.cli.listing", "tasks"),
    "verify": LazyCommand("gpt_train.cli.verification", "verify"),
}

__all__ = ["CONTEXT", "Aborted", "CommandError", "LazyCommand", "cli", "format_value", "main", "wrong_count"]
