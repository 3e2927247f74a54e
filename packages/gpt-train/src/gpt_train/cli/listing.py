"""`gpt-train tasks` and `gpt-train kernels`: what is installed, and which plugin provides it."""

from __future__ import annotations

import json

import click

from gpt_train.cli.formatting import echo_table
from gpt_train.cli.group import CONTEXT
from gpt_train.kernels import default_kernel_registry

PROVIDER_HEADER = {key: key.upper() for key in ("plugin", "distribution", "version", "description")}


@click.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def tasks(as_json: bool) -> None:
    """List every installed task and the plugin and distribution that provide it.

    \b
    Examples:
      gpt-train tasks
      gpt-train tasks --json
    """
    from gpt_tasks import list_tasks

    rows = [{key: getattr(t, key) for key in ("name", *PROVIDER_HEADER)} for t in list_tasks()]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    echo_table({"name": "TASK"} | PROVIDER_HEADER, rows)


@click.command(context_settings=CONTEXT)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def kernels(as_json: bool) -> None:
    """List the kernel slots, with the signature a kernel for each must have, and every installed kernel
    with the plugin and distribution that provide it.

    A slot is a piece the model computes with a swappable function; `gpt-core` is gpt-core's own kernel
    in every slot. Kernel plugins register through the `gpt_kernels` entry-point group.

    \b
    Examples:
      gpt-train kernels
      gpt-train verify --kernel attention=flash     # after pip install ./examples/gpt-kernel-flash
      gpt-train run --task sort --kernel attention=flash
    """
    from gpt_core import KERNEL_SIGNATURES

    rows = [
        {key: getattr(k, key) for key in ("slot", "name", *PROVIDER_HEADER)}
        for k in default_kernel_registry().kernels()
    ]
    if as_json:
        click.echo(json.dumps({"slots": KERNEL_SIGNATURES, "kernels": rows}, indent=2))
        return
    slots = [{"slot": slot, "signature": signature} for slot, signature in KERNEL_SIGNATURES.items()]
    echo_table({"slot": "SLOT", "signature": "SIGNATURE"}, slots)
    click.echo()
    echo_table({"slot": "SLOT", "name": "KERNEL"} | PROVIDER_HEADER, rows)
