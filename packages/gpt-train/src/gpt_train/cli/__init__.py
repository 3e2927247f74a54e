"""The gpt-train command line: run, tasks, kernels, eval, sample, verify, export, inspect, serve, learn.

One module per command group, each adding its commands to the group in `gpt_train.cli.group` (which
also turns every error into one line and an exit status): `run` trains, `trained` holds eval and
sample, `listing` the installed tasks and kernels, `verification` verify, `learn` the graded exercises
of gpt_train.learn; export, inspect and serve come from their own modules. Importing this package
assembles the whole command.
"""

from gpt_train.cli import listing, run, trained, verification  # noqa: F401  (each registers its commands)
from gpt_train.cli.formatting import format_value, wrong_count
from gpt_train.cli.group import CONTEXT, Aborted, CommandError, cli, main
from gpt_train.cli.learn import learn
from gpt_train.export import export
from gpt_train.inspect_cli import inspect_command
from gpt_train.serve import serve

cli.command(context_settings=CONTEXT)(export)
cli.add_command(inspect_command)  # gpt-train inspect RUN heads|logit-lens|patch|reads|report
cli.add_command(serve)  # gpt-train serve RUN
cli.add_command(learn)  # gpt-train learn list|start|check|train

__all__ = ["Aborted", "CommandError", "cli", "format_value", "main", "wrong_count"]
