"""`gpt-train verify`: every hand-written piece, or each chosen kernel, against PyTorch's built-ins."""

from __future__ import annotations

import os

import click
import torch

from gpt_core import KERNEL_SETS
from gpt_train.cli.group import CONTEXT, CommandError
from gpt_train.cli.options import KERNEL_SET_HELP, SEED, KernelSetChoice, finite
from gpt_train.guard import guarded
from gpt_train.kernels import (
    KERNEL_CHECKS,
    TOLERANCE,
    check_compilable,
    check_kernel_set,
    first_failure,
    parse_kernel_choices,
    resolve_kernel,
    verify_kernel,
    verify_second_derivatives,
)


@click.command(context_settings=CONTEXT)
@click.option("--kernel", "kernel_pairs", multiple=True, metavar="SLOT=NAME",
              help="Verify this kernel instead: an installed one (see `gpt-train kernels`) or module:function. "
              "Repeatable.")  # fmt: skip
@click.option("--kernels", "kernel_set", type=KernelSetChoice(), default="fast", show_default=True,
              help="The kernel set to check: " + KERNEL_SET_HELP.split(": ", 1)[1].split("; ")[0] + ".")  # fmt: skip
@click.option("--seed", type=SEED, help="Fix the random inputs. [default: fresh each time]")
@click.option(
    "--dtype",
    type=click.Choice(["fp64", "bf16"]),
    default="fp64",
    show_default=True,
    help="Run the kernels in this dtype. bf16: against the reference in float64 on the same values, "
    "the difference relative to the reference's largest |value| (or 1).",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(min=0),
    callback=finite,
    help=f"Largest difference accepted. [default: {TOLERANCE:.0e} in fp64, 2^-4 in bf16]",
)
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    help="Run the kernels and PyTorch's built-ins on this device (cpu, cuda, cuda:N, mps), and a whole GPT there "
    "against the same weights on the CPU.",
)
@click.option(
    "--compile",
    "compile_",
    is_flag=True,
    help="Also run each kernel and a whole GPT's training step through torch.compile against the same call eager, "
    "float32, on the device.",
)
def verify(
    kernel_pairs, kernel_set: str, seed: int | None, dtype: str, tolerance: float | None, device: str, compile_: bool
) -> None:
    """Check every hand-written piece against the PyTorch built-in it replaces.

    Runs each component (Linear, Embedding, LayerNorm, GELU, softmax, cross-entropy, attention in
    several masking and shape cases) and its PyTorch built-in (F.linear, F.embedding, F.layer_norm,
    F.gelu with approximate="tanh", torch.softmax, torch.log_softmax, F.cross_entropy,
    F.scaled_dot_product_attention) on the same random float64 inputs, and prints the largest
    difference of outputs and of gradients; also KV-cache decoding vs a full forward.
    Exits 1 if any difference exceeds the tolerance.

    --kernels reference checks the reference set instead: each piece as its plain-autograd definition
    (gpt_core.reference), the same cases, the same tolerance. --kernels triton checks the Triton set (where
    Triton is installed): on a GPU compiled, on the CPU in Triton's interpreter (TRITON_INTERPRET=1), which runs
    the same kernel code on CPU tensors in float64.

    With --kernel SLOT=NAME, checks that kernel instead, on every case of its slot, forward and
    backward, then a whole GPT computed with it against gpt-core's own kernels (and, for attention,
    cached decoding against the full forward), in float64 and again in float32, the dtype a model
    computes in; a failure says which case and output differ, by how much and where.

    With --dtype bf16, the kernels run on bf16 inputs, as under autocast, at bf16's tolerance. With --device,
    everything runs there (float32 on mps, which has no float64, at float32's tolerance); --compile's comparison
    is held to 1e-4 of the eager scale. Run it first on a new GPU, or after upgrading PyTorch.

    In float64 it then takes a second derivative through each kernel (create_graph=True: the gradient of
    <gradient, u> with respect to the inputs and the cotangent, as a Hessian-vector product uses it) on a case of
    each slot (two for attention), against the built-in's; with --kernel, in float32 too. A kernel may refuse,
    raising as the fast and triton sets' backward passes do; one that answers must answer right.

    \b
    Examples:
      gpt-train verify
      gpt-train verify --kernels reference
      gpt-train verify --kernels triton
      gpt-train verify --dtype bf16
      gpt-train verify --device cuda --compile
      gpt-train verify --kernel attention=flash          # after pip install ./examples/gpt-kernel-flash
      gpt-train verify --kernel layer_norm=mykernels:layer_norm
    """
    from gpt_core.testing import format_report, second_derivative_report, verification_report
    from gpt_train.compiling import check_compiler
    from gpt_train.devices import resolve_device
    from gpt_train.verify import BF16_TOLERANCE, DTYPES, FP32_TOLERANCE, TORCH_LABELS, torch_references

    target = resolve_device(device)
    torch_dtype = DTYPES[dtype]
    if target.type == "mps":  # MPS has no float64: the kernels run in float32, against the built-ins in float32
        if torch_dtype != torch.float64:
            raise CommandError("--dtype bf16 compares with the built-ins in float64, which MPS lacks; use --device cpu")
        torch_dtype = torch.float32
    if tolerance is None:
        tolerance = {torch.bfloat16: BF16_TOLERANCE, torch.float32: FP32_TOLERANCE}.get(torch_dtype, TOLERANCE)
    choices = parse_kernel_choices(kernel_pairs)
    if kernel_pairs and not choices:
        raise CommandError("gpt-core's own kernels are what plain `gpt-train verify` checks; run it without --kernel")
    if choices and kernel_set != "fast":
        raise CommandError("--kernel checks one kernel on its own; drop --kernels, or --kernel to check a whole set")
    if choices and (target.type != "cpu" or compile_):
        raise CommandError("--kernel is checked on the CPU; drop --device and --compile, or --kernel")
    if compile_:
        check_compiler(target)
    if not choices:
        if kernel_set == "triton" and target.type == "cpu":  # the kernels run on CPU tensors in Triton's interpreter
            os.environ.setdefault("TRITON_INTERPRET", "1")
        if kernel_set == "triton" and target.type == "cuda":  # a GPU the set is not made for: as `run` says
            check_kernel_set(kernel_set, target)
        if compile_:
            check_compilable(kernel_set, target)
        kernels = KERNEL_SETS[kernel_set]
        what = "" if kernel_set == "fast" else f"{kernel_set} kernels: "
        what += "" if target.type == "cpu" else f"on {target}: "
        rows = verification_report(
            torch_references(), torch_dtype, seed=seed, labels=TORCH_LABELS, kernels=kernels, device=target
        )
        click.echo(format_report(rows))
        _check_rows(rows, tolerance, what, torch_dtype)
        if torch_dtype == torch.float64:
            _second_derivatives(
                second_derivative_report(torch_references(), kernels, seed, TORCH_LABELS, device=target),
                tolerance,
                what,
            )
        if compile_:  # torch.compile against eager on the device, and its dropout by what holds for any draw
            from gpt_core.testing.compiled import COMPILED_TOLERANCE, compiled_report
            from gpt_core.testing.verification import dropout_report

            click.echo(
                f"\ntorch.compile against eager on {target} (float32), and its dropout against what holds for any draw:"
            )
            rows = compiled_report(kernels, target, seed)
            rows += dropout_report(kernels, torch_references(), target, seed=seed, labels=TORCH_LABELS, compile=True)
            click.echo(format_report(rows))
            _check_rows(rows, COMPILED_TOLERANCE, what, torch.float32)
        return
    for slot, name in choices.items():
        kernel = guarded(slot, name, resolve_kernel(slot, name))
        more = KERNEL_CHECKS[1:] if torch_dtype == torch.float64 else ()  # float64's: in a model's dtype too
        for check_dtype, limit, label in ((torch_dtype, tolerance, ""), *more):
            what, gap = f"kernel {slot}={name}{label}", "\n" if label else ""
            rows = verify_kernel(slot, kernel, seed, check_dtype)
            click.echo(f"{gap}{what}\n{format_report(rows)}")
            _check_rows(rows, limit, f"{what}: ", check_dtype)
        if torch_dtype == torch.float64:  # as the first derivatives: float64, then float32
            for check_dtype, limit, label in ((torch_dtype, tolerance, ""), *more):
                rows = verify_second_derivatives(slot, kernel, seed, check_dtype)
                _second_derivatives(rows, limit, f"kernel {slot}={name}{label}: ", check_dtype)


def _second_derivatives(rows, tolerance: float, what: str, dtype: torch.dtype = torch.float64) -> None:
    from gpt_core.testing import format_report

    click.echo(
        f"\nsecond derivatives (create_graph=True) in {str(dtype).removeprefix('torch.')}: d<grad, u>/d(inputs, "
        "cotangent), u random, against the built-in's; a kernel may refuse (raise), never differ"
    )
    click.echo(format_report(rows, first="2nd derivative", grad=False))
    refusals: dict[str, list[str]] = {}  # what was raised: by whom
    for row in rows:
        if row.refused:
            refusals.setdefault(row.refused, []).append(row.component)
    for refusal, components in refusals.items():
        click.echo(f"  {'; '.join(components)}: {refusal}")
    _check_rows(rows, tolerance, f"{what}second derivatives: ", dtype)


def _check_rows(rows, tolerance: float, what: str, dtype: torch.dtype) -> None:
    failure = first_failure(rows, tolerance)
    if failure is not None:
        raise CommandError(f"{what}{failure}", exit_code=1)
    answered, n_refused, parts = [r for r in rows if not r.refused], sum(bool(r.refused) for r in rows), []
    if answered:
        worst = max(max(r.forward, r.grad or 0.0) for r in answered)
        in_float32 = " in float32" if dtype == torch.float32 else ""  # float64 and bf16 are named by --dtype
        checks = "1 check" if len(answered) == 1 else f"{'all ' * (not n_refused)}{len(answered)} checks"
        parts.append(f"{checks} within {tolerance:.0e}{in_float32} (largest {worst:.1e})")
    if n_refused:
        parts.append("1 refused (it raises)" if n_refused == 1 else f"{'all ' * (not answered)}{n_refused} refused "
                     "(each raises)")  # fmt: skip
    click.echo(f"\n{what}{', '.join(parts)}")
