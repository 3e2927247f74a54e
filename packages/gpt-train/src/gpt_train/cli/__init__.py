"""The gpt-train command line: run, tasks, kernels, eval, sample, verify, export, inspect, serve, learn.

One module per command group, each defining its commands: `run` trains, `trained` holds eval and sample,
`listing` the installed tasks and kernels, `verification` verify, `learn` the graded exercises of
gpt_train.learn; export comes from its own module, inspect and serve from the lab (gpt_train.lab). The group in
`gpt_train.cli.group` (which also turns every error into one line and an exit status) imports each only when it
is used, so that `gpt-train --help` answers without importing torch.
"""

from gpt_train.cli.formatting import format_value, wrong_count
from gpt_train.cli.group import CONTEXT, Aborted, CommandError, LazyCommand, cli, main

cli.lazy = {
    "eval": LazyCommand(
        "gpt_train.cli.trained",
        "evaluate",
        "Evaluate a saved run on a split (the whole split unless --limit), in float32, as the run's own evaluations "
        "were, whatever dtype it trained in.",
    ),
    "export": LazyCommand(
        "gpt_train.export", "export", "Write a trained run as a Hugging Face GPT-2 model directory OUT (new or empty)."
    ),
    "inspect": LazyCommand(
        "gpt_train.lab.inspect",
        "inspect_command",
        "Look inside a trained model: which heads it needs, where its answer appears, what it depends on.",
    ),
    "kernels": LazyCommand(
        "gpt_train.cli.listing",
        "kernels",
        "List the kernel slots, with the signature a kernel for each must have, and every installed kernel with the "
        "plugin and distribution that provide it.",
    ),
    "learn": LazyCommand(
        "gpt_train.cli.learn",
        "learn",
        "Rebuild gpt-core's kernels, then its GPT, its training step and its generation, one graded exercise at a "
        "time, then train your GPT on your own kernels.",
    ),
    "run": LazyCommand("gpt_train.cli.run", "run", "Train a model on a task and write a run directory."),
    "sample": LazyCommand(
        "gpt_train.cli.trained",
        "sample",
        "Generate text from a saved run, or with --hf from a GPT-2 directory and its tokenizer.json, one line per "
        "prompt.",
    ),
    "serve": LazyCommand(
        "gpt_train.lab.serve",
        "serve",
        "Serve the explorer on your own prompts: type one, see the model's answer, the probability of each answer "
        "token, every head's attention, the logit lens, where prompt and answer meet, and the inspect results the "
        "run holds. Ctrl-C stops it.",
    ),
    "tasks": LazyCommand(
        "gpt_train.cli.listing",
        "tasks",
        "List every installed task and the plugin and distribution that provide it.",
    ),
    "verify": LazyCommand(
        "gpt_train.cli.verification",
        "verify",
        "Check every hand-written piece against the PyTorch built-in it replaces.",
    ),
}
"""Every command, by name: where it is defined, and what `gpt-train --help` says of it."""

__all__ = ["CONTEXT", "Aborted", "CommandError", "LazyCommand", "cli", "format_value", "main", "wrong_count"]
