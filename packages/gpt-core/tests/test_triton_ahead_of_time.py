"""Every Triton kernel of the `triton` set compiles for the NVIDIA chips it is meant for, from a CPU.

Triton builds a GPU binary without a GPU (its own ptxas): each kernel, at the dtypes, block sizes, warps and
pipeline stages the set launches it with (each module's AOT_SPECS), is compiled for sm_80 (A100) and sm_90
(H100, H200), with and without the JIT's alignment hints. It must fit the chip's shared memory per block and its
registers per block, and spill no register to local memory (cuobjdump, shipped with Triton, reads the binary's
resource use). A kernel that asks for more than the chip has fails here, in CI, instead of at a user's first
launch or as a slow loop on a user's GPU.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
from pathlib import Path

import pytest

if os.environ.get("TRITON_INTERPRET") == "1":
    reason = "compiling ahead of time needs Triton's compiler, not its interpreter (TRITON_INTERPRET=0)"
    pytest.skip(reason, allow_module_level=True)
triton = pytest.importorskip("triton")
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402
from triton.runtime.jit import JITFunction  # noqa: E402

MODULES = ("attention", "layer_norm", "cross_entropy", "gelu", "softmax", "dropout")
SHARED_MEMORY = {80: 166_912, 90: 232_448}  # bytes of shared memory one block may use (A100: 163 KiB, H100: 227 KiB)
REGISTERS_PER_BLOCK = 65_536  # 32-bit registers one block may use, on both chips (at most 255 a thread)
CUOBJDUMP = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"


def specs():
    for name in MODULES:
        module = importlib.import_module(f"gpt_core.kernels.triton.{name}")
        for kernel, signature, constexprs, options in module.AOT_SPECS:  # options: the launch's warps and stages
            label = ",".join(f"{k}={v}" for k, v in constexprs.items())
            dtypes = sorted({t for t in signature.values() if t.startswith("*")})
            case = f"{name}.{kernel.fn.__name__}[{label};{'/'.join(dtypes)}]"
            yield pytest.param(kernel, signature, constexprs, options, id=case)


SPECS = list(specs())


def alignment_hints(kernel: JITFunction, signature: dict[str, str], hinted: str) -> dict[tuple[int], list]:
    """What the JIT tells the compiler of a launch's arguments: pointers aligned to 16 bytes, and integers that are
    multiples of 16 (a stride of a 64-wide head, T = 256). Which integers are depends on the shapes: none, the
    strides only, or all of them bracket what a launch gets."""
    if hinted == "none":
        return {}
    named = [name for name, ty in signature.items() if ty.startswith("*") or (ty == "i32" and hinted == "all")]
    named += [name for name, ty in signature.items() if ty == "i32" and hinted == "strides" and "stride" in name]
    return {(kernel.arg_names.index(name),): [["tt.divisibility", 16]] for name in named}


@pytest.mark.parametrize("hinted", ["none", "strides", "all"])
@pytest.mark.parametrize("capability", sorted(SHARED_MEMORY))
@pytest.mark.parametrize(("kernel", "signature", "constexprs", "options"), SPECS)
def test_every_triton_kernel_compiles_for_the_chip_within_its_memory_and_registers_without_spilling(
    kernel, signature, constexprs, options, capability, hinted, tmp_path
):
    if not isinstance(kernel, JITFunction):  # imported under TRITON_INTERPRET=1: the interpreter's wrapper
        kernel = JITFunction(kernel.fn)
    hints = alignment_hints(kernel, signature, hinted)
    compiled = triton.compile(
        ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=hints),
        target=GPUTarget("cuda", capability, 32),
        options=options,
    )
    assert compiled.asm["cubin"], "no binary was built"
    shared = compiled.metadata.shared
    limit = SHARED_MEMORY[capability]
    assert shared <= limit, f"needs {shared} bytes of shared memory, sm_{capability} has {limit}"
    registers, spilled = resource_use(compiled.asm["cubin"], tmp_path)
    threads = 32 * compiled.metadata.num_warps
    assert registers * threads <= REGISTERS_PER_BLOCK, f"{registers} registers x {threads} threads do not fit a block"
    assert spilled == 0, f"spills {spilled} bytes a thread to local memory ({registers} registers): smaller tiles"


def resource_use(cubin: bytes, folder: Path) -> tuple[int, int]:
    """(registers a thread, bytes of stack a thread: the spills) of a compiled kernel, from `cuobjdump -res-usage`."""
    path = folder / "kernel.cubin"
    path.write_bytes(cubin)
    report = subprocess.run([CUOBJDUMP, "-res-usage", path], capture_output=True, text=True, check=True).stdout
    registers, stack = re.search(r"REG:(\d+) STACK:(\d+)", report).groups()
    return int(registers), int(stack)


def test_every_module_of_the_set_names_kernels_to_compile():
    modules = {name: importlib.import_module(f"gpt_core.kernels.triton.{name}") for name in MODULES}
    assert all(module.AOT_SPECS for module in modules.values())
