"""What several commands share on their command line: the device option's help, the kernel choice and the
opt-in to a saved run's module-path kernels.

`kernel_choices` is the one place run and verify turn their kernel options into the kernels they
compute with (slot -> name, gpt-core's own left out), so an option choosing a whole kernel set adds
to this function alone.
"""

from __future__ import annotations

from collections.abc import Iterable

import click

from gpt_train.kernels import parse_kernel_choices

DEVICE_HELP = "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps. An absent device is an error."
KERNEL_HELP = "Compute SLOT with kernel NAME: installed (see `gpt-train kernels`) or module:function. Repeatable."
KERNEL_SET_HELP = (
    "The kernel set: fast (hand-derived backward passes), reference (each piece as its plain-autograd "
    "definition) or triton (hand-written GPU kernels, CUDA only, from gpt-core[triton]); --kernel replaces "
    "slots of it."
)

TRUST_KERNELS_OPTION = click.option(
    "--trust-kernels",
    is_flag=True,
    help="Open a run trained with module-path kernels (module:function): import them from the folder the run "
    "recorded (never the working directory) and verify them against PyTorch. Without it such a run is refused: "
    "importing a module runs its code.",
)


def kernel_choices(kernel_pairs: Iterable[str]) -> dict[str, str]:
    """The kernels a command computes with in place of gpt-core's own: `--kernel SLOT=NAME`, each slot once."""
    return parse_kernel_choices(kernel_pairs)
