"""What several commands share on their command line: the device and kernel options' help, --set, and the opt-in
to a saved run's module-path kernels."""

from __future__ import annotations

import math
from pathlib import Path

import click

from gpt_train.files import is_utf8

DEVICE_HELP = "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps. An absent device is an error."
KERNEL_HELP = "Compute SLOT with kernel NAME: installed (see `gpt-train kernels`) or module:function. Repeatable."
SEED = click.IntRange(0, 2**63 - 1)  # the seeds `run --seed` takes
KERNEL_SET_HELP = (
    "The kernel set: fast (hand-derived backward passes), reference (each piece as its plain-autograd "
    "definition) or triton (hand-written GPU kernels, CUDA only, from gpt-core[triton]); --kernel replaces "
    "slots of it."
)


class KernelSetChoice(click.Choice):
    """The installed kernel sets (`gpt_core.KERNEL_SETS`); naming triton where Triton is not installed says so."""

    def __init__(self):
        from gpt_core import KERNEL_SETS

        super().__init__(list(KERNEL_SETS))

    def convert(self, value, param, ctx):
        if value == "triton" and value not in self.choices:
            from gpt_train.settings import TRITON_MISSING

            self.fail(f"{TRITON_MISSING}; use fast (the default) or reference", param, ctx)
        return super().convert(value, param, ctx)


def set_option(help: str):
    return click.option("--set", "assignments", multiple=True, metavar="KEY=VALUE", help=help)


def trust_kernels_option(opens: str = "Open a run"):
    return click.option(
        "--trust-kernels",
        is_flag=True,
        help=f"{opens} trained with module-path kernels (module:function): import them from the folder the run "
        "recorded (never the working directory) and verify them against PyTorch. Without it such a run is refused: "
        "importing a module runs its code.",
    )


TRUST_KERNELS_OPTION = trust_kernels_option()


def named_path(ctx: click.Context, param: click.Parameter, value: str | None) -> Path | None:
    """A path option's callback: an empty one (an unset shell variable, `--out "$DIR"`) refused, not the current
    directory, and one that is not UTF-8 text (a Latin-1 terminal's name), which safetensors cannot open again."""
    if value == "":
        raise click.BadParameter("is empty; name a path", ctx, param)
    if value is not None and not is_utf8(value):
        raise click.BadParameter(f"{click.format_filename(value)} is not UTF-8 text; name it in UTF-8", ctx, param)
    return None if value is None else Path(value)


def finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A float option's callback: NaN and infinity refused (no click range refuses NaN)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number", ctx, param)
    return value
