"""Kernel plugins (the `gpt_kernels` entry-point group, as examples/gpt-kernel-flash declares one) and module-path
kernels, named as `--kernel SLOT=NAME`, pinned against PyTorch, and turned into a model's `gpt_core.Kernels`."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.machinery
import inspect
import os
import re
import sys
import warnings
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache, wraps
from importlib.metadata import EntryPoint, version
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from gpt_core import DEFAULT_KERNELS, KERNEL_SETS, KERNEL_SLOTS, Kernels
from gpt_core import plugins as core_plugins
from gpt_core.testing import Row, kernel_report, second_derivative_report
from gpt_train.compiling import compile_off
from gpt_train.errors import TrainError
from gpt_train.guard import guarded
from gpt_train.verify import BF16_TOLERANCE, FP32_TOLERANCE, TORCH_LABELS, torch_references

ENTRY_POINT_GROUP = "gpt_kernels"
HOOK = "register_kernels"
BUILTIN = "gpt-core"  # gpt-core's own kernel in every slot
TOLERANCE = 1e-12  # the largest |difference| from PyTorch (float64) a kernel may show to train with


class KernelError(TrainError):
    """A kernel that is unknown, ambiguous, not importable, or fails verification."""


class KernelPluginWarning(core_plugins.PluginWarning):
    """A kernel plugin that could not be loaded or could not register its kernels."""


class UnverifiedKernelWarning(UserWarning):
    """A kernel that fails verification, used anyway because the run says --unverified."""


@dataclass(frozen=True)
class KernelInfo:
    slot: str
    name: str
    function: Callable[..., Any]
    plugin: str
    distribution: str
    version: str

    @property
    def description(self) -> str:
        """The docstring's first paragraph, on one line (its first line may end mid-sentence)."""
        doc = inspect.cleandoc(getattr(self.function, "__doc__", None) or "")
        return " ".join(re.split(r"\n\s*\n", doc)[0].split())  # a blank line may keep its indentation

    @property
    def source(self) -> str:
        return f"plugin {self.plugin!r} ({self.distribution} {self.version})"

    @property
    def key(self) -> tuple[str, str]:
        return (self.slot, self.name)

    @property
    def label(self) -> str:
        return f"kernel {self.slot}={self.name}"


def _accept(origin: core_plugins.Origin, slot: Any, name: Any, function: Any) -> KernelInfo:
    if slot not in KERNEL_SLOTS:
        raise ValueError(f"register() takes a slot among {', '.join(KERNEL_SLOTS)}, got {slot!r}")
    if not isinstance(name, str) or not name or any(c in ":=" or c.isspace() for c in name) or name == BUILTIN:
        raise ValueError(f"a kernel name has no ':', '=' or whitespace and is not {BUILTIN!r}, got {name!r}")
    if not callable(function):
        raise TypeError(f"register() takes a callable kernel, got {function!r}")
    return KernelInfo(slot, name, function, origin.plugin, origin.distribution, origin.version)


KERNEL_PLUGINS = core_plugins.PluginKind("kernel", ENTRY_POINT_GROUP, HOOK, _accept, KernelPluginWarning)


class KernelRegistry:
    """gpt-core's own kernels and those of a set of plugins (by default, every installed entry point)."""

    def __init__(self, plugins: Iterable[EntryPoint] | None = None):
        own = version("gpt-core")
        builtins = [
            KernelInfo(s, BUILTIN, getattr(DEFAULT_KERNELS, s), "builtin", "gpt-core", own) for s in KERNEL_SLOTS
        ]
        self._table = core_plugins.PluginTable(KERNEL_PLUGINS, plugins, builtins=builtins)

    def kernels(self) -> list[KernelInfo]:
        order = {slot: i for i, slot in enumerate(KERNEL_SLOTS)}
        return sorted(self._table.items(), key=lambda i: (order[i.slot], i.name != BUILTIN, i.name))

    def info(self, slot: str, name: str) -> KernelInfo:
        installed = ", ".join(sorted(i.name for i in self._table.items() if i.slot == slot))
        where = "a module path is module:function"
        unknown = f"no kernel {name!r} for {slot} is installed (installed: {installed}; {where})"
        return self._table.find((slot, name), KernelError, unknown)


@lru_cache(maxsize=1)
def default_kernel_registry() -> KernelRegistry:
    return KernelRegistry()


TRITON_CAPABILITY = (8, 0)  # the triton set's kernels are compiled and checked for sm_80 and sm_90 (and fit their
# shared memory: a T4's 64 KiB is too little for the 16-bit dQ kernel at head dim 128, 72 KiB)


def default_kernel_set(device: torch.device) -> str:
    """The kernel set a run computes with unless told: triton on a CUDA GPU it is made for (compute capability 8.0
    or later: A100, H100 and after) where Triton is installed, else fast."""
    return "triton" if device.type == "cuda" and "triton" in KERNEL_SETS and triton_runs_on(device) else "fast"


def triton_runs_on(device: torch.device) -> bool:
    """Whether the triton set can take tensors on `device`: a CUDA GPU of compute capability 8.0 or later, or the
    CPU in Triton's interpreter."""
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device) >= TRITON_CAPABILITY
    return os.environ.get("TRITON_INTERPRET") == "1"


def check_kernel_set(name: str, device: torch.device) -> None:
    """KernelError, in one line, if a new run asks for a kernel set that cannot run on its device."""
    if name == "triton" and device.type == "cuda" and not triton_runs_on(device):
        major, minor = torch.cuda.get_device_capability(device)
        raise KernelError(
            f"--kernels triton is made for GPUs of compute capability 8.0 or later (compiled and checked for sm_80 "
            f"and sm_90), and {torch.cuda.get_device_name(device)} is {major}.{minor}; use the fast set (its default)"
        )
    if name == "triton" and not triton_runs_on(device):
        raise KernelError(
            f"--kernels triton runs on CUDA (Triton compiles its kernels for the GPU), not {device.type}; use the "
            "fast set there (the default), `gpt-train verify --kernels triton` to check the kernels in Triton's "
            "interpreter, or TRITON_INTERPRET=1 to train with them there (far slower: a few tiny steps, such as "
            "--steps 5 --batch-size 8 --set eval_limit=16 --set final_eval_limit=16)"
        )


def check_compilable(name: str, device: torch.device, resumed: bool = False) -> None:
    """KernelError, in one line, for --compile with the triton set in Triton's interpreter, which the compiler
    cannot trace (it fails deep inside, with a page of text)."""
    if name == "triton" and device.type != "cuda" and triton_runs_on(device):
        raise KernelError(
            "--compile cannot trace the triton set in Triton's interpreter (TRITON_INTERPRET=1); "
            + compile_off(resumed)
        )


def kernel_set_for(name: str, device: torch.device | str | None) -> Kernels:
    """The set `name` on `device`: the fast set stands in for triton where Triton cannot run."""
    if name == "triton" and device is not None and not triton_runs_on(torch.device(device)):
        return KERNEL_SETS["fast"]
    return KERNEL_SETS[name]


def parse_kernel_choices(pairs: Iterable[str]) -> dict[str, str]:
    """['attention=flash', ...] -> {slot: name}, each slot once; naming gpt-core's own kernel is the default."""
    choices: dict[str, str] = {}
    for pair in pairs:
        slot, sep, name = (part.strip() for part in pair.partition("="))
        if not sep or not name:
            raise KernelError(f"--kernel expects SLOT=NAME, got {pair!r}; slots: {', '.join(KERNEL_SLOTS)}")
        if slot not in KERNEL_SLOTS:
            raise KernelError(f"unknown kernel slot {slot!r}; slots: {', '.join(KERNEL_SLOTS)}")
        if slot in choices:
            raise KernelError(f"--kernel names slot {slot} twice ({choices[slot]} and {name})")
        choices[slot] = name
    return {slot: name for slot, name in choices.items() if name != BUILTIN}


def is_module_path(name: str) -> bool:
    return ":" in name


def resolve_kernel(slot: str, name: str, saved: bool = False, folder: Path | None = None) -> Callable[..., Any]:
    """The kernel NAME for `slot`: a registered one, or `module:function` imported from the current directory, or
    for a `saved` run from `folder` or the installed modules, never from the working directory."""
    if not is_module_path(name):
        return default_kernel_registry().info(slot, name).function
    cwd = os.getcwd()
    before = sys.path[:]
    if saved:
        kept = [p for p in before if os.path.abspath(p or os.curdir) != cwd]
        sys.path[:] = [str(folder)] * (folder is not None) + kept
        importlib.invalidate_caches()
    elif cwd not in sys.path:
        sys.path.insert(0, cwd)
    module_name, _, attribute = name.partition(":")
    try:
        found: Any = _imported(module_name, folder if saved else None)
        for part in attribute.split("."):
            found = getattr(found, part)
    except Exception as error:  # anything a user's module may raise while importing, or a missing name
        where = f" from {folder.resolve()}, the folder the run recorded" if saved and folder is not None else ""
        raise KernelError(f"kernel {slot}={name}: cannot load it{where} ({type(error).__name__}: {error})") from None
    finally:
        if saved:
            sys.path[:] = before
    if not callable(found):
        raise KernelError(f"kernel {slot}={name} is not a function (it is {found!r:.60})")
    return found


def _imported(module_name: str, folder: Path | None) -> ModuleType:
    """`module_name` imported (sys.path set by the caller); for a saved run (`folder`, the one it recorded), imported
    afresh from `folder` where it holds the module and one of that name found elsewhere (another run's folder, the
    working directory) is imported already: importlib would hand back that one. The other stays in sys.modules."""
    top = module_name.split(".")[0]
    loaded = sys.modules.get(top)
    if folder is None or loaded is None or _module_folder(loaded) == folder.resolve():
        return importlib.import_module(module_name)
    if importlib.machinery.PathFinder.find_spec(top, [str(folder)]) is None:  # not there: found as a new process would
        return importlib.import_module(module_name)

    def named(key: str) -> bool:
        return key == top or key.startswith(f"{top}.")

    held = {key: sys.modules.pop(key) for key in list(sys.modules) if named(key)}
    try:
        return importlib.import_module(module_name)
    finally:
        for key in [key for key in sys.modules if named(key)]:
            del sys.modules[key]
        sys.modules.update(held)


def _module_folder(module: ModuleType | None) -> Path | None:
    """The folder a module (or package) was found in, else None."""
    package = list(getattr(module, "__path__", None) or [])
    where = package[0] if package else getattr(module, "__file__", None)
    return Path(where).resolve().parent if where else None


def kernel_folder(name: str) -> Path | None:
    """The folder an imported module-path kernel's module (or package) was found in, else None."""
    if not is_module_path(name):
        return None
    return _module_folder(sys.modules.get(name.partition(":")[0].split(".")[0]))


def kernel_versions(choices: Mapping[str, str]) -> dict[str, str]:
    found = {}
    for slot, name in choices.items():
        if is_module_path(name):  # a module path belongs to no distribution
            continue
        with contextlib.suppress(KernelError):  # not installed: checked_kernels refuses it, in its own words
            info = default_kernel_registry().info(slot, name)
            found[info.distribution] = info.version
    return found


def output_checked(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """`kernel`, raising a TypeError when its output is not a plain dense tensor on its inputs' device, so the
    kernel fails rather than the comparison with PyTorch's output."""

    @wraps(kernel)
    def checked_kernel(*args: Any, **kwargs: Any) -> Any:
        output = kernel(*args, **kwargs)
        device = next((arg.device for arg in args if isinstance(arg, torch.Tensor)), None)
        if not isinstance(output, torch.Tensor):
            problem = f"is a {type(output).__name__}, not a tensor"
        elif type(output) not in (torch.Tensor, torch.nn.Parameter):
            problem = f"is a {type(output).__name__}, a tensor subclass"
        elif output.is_nested:
            problem = "is a nested tensor"
        elif output.layout != torch.strided:
            problem = f"is a sparse tensor ({output.layout})"
        elif device is not None and output.device != device:
            problem = f"is on device {output.device}, not {device}"
        else:
            return output
        raise TypeError(f"its output {problem}; a kernel returns a dense torch.Tensor on its inputs' device")

    return checked_kernel


def verify_kernel(
    slot: str, kernel: Callable[..., Any], seed: int | None = None, dtype: torch.dtype = torch.float64
) -> list[Row]:
    return kernel_report(slot, output_checked(kernel), torch_references(), dtype, seed=seed, labels=TORCH_LABELS)


def verify_second_derivatives(
    slot: str, kernel: Callable[..., Any], seed: int | None = None, dtype: torch.dtype = torch.float64
) -> list[Row]:
    """A second derivative through `kernel` against PyTorch's (`gpt_core.testing.second_derivative_report`)."""
    kernels = dataclasses.replace(DEFAULT_KERNELS, **{slot: output_checked(kernel)})
    return second_derivative_report(torch_references(), kernels, seed, TORCH_LABELS, slots=(slot,), dtype=dtype)


def first_failure(rows: Iterable[Row], tolerance: float = TOLERANCE) -> str | None:
    return next((message for row in rows if (message := row.failure(tolerance)) is not None), None)


KERNEL_CHECKS = ((torch.float64, TOLERANCE, ""), (torch.float32, FP32_TOLERANCE, " in float32"))
"""Where a chosen kernel is verified, and to what tolerance: float64, then float32, the dtype a model computes in (a
kernel with a float64 path of its own must not pass on that path alone)."""

SIXTEEN_BIT_CHECKS = {
    "bf16": (torch.bfloat16, BF16_TOLERANCE, " in bfloat16"),
    "fp16": (torch.float16, BF16_TOLERANCE, " in float16"),
}
"""The check KERNEL_CHECKS gain for a run training in a 16-bit dtype (`--set dtype=bf16` or `fp16`) in the slots
autocast hands 16-bit inputs: `verify --dtype bf16`'s, relative to the reference's scale (a kernel with a 16-bit
path of its own must not pass on its float paths alone)."""

SIXTEEN_BIT_SLOTS = ("attention", "attention_weights", "gelu", "cross_entropy", "dropout")
"""The slots a 16-bit training step computes in 16 bits; autocast runs LayerNorm in float32, and sampling (an
evaluation's, generation's) is float32."""


def kernel_checks(dtype: str = "fp32", slot: str | None = None) -> tuple[tuple[torch.dtype, float, str], ...]:
    """The checks a chosen kernel in `slot` (None: any) of a run training in `dtype` (fp32, bf16, fp16) must pass,
    in order."""
    sixteen = dtype in SIXTEEN_BIT_CHECKS and (slot is None or slot in SIXTEEN_BIT_SLOTS)
    return KERNEL_CHECKS + ((SIXTEEN_BIT_CHECKS[dtype],) if sixteen else ())


def kernel_failure(slot: str, kernel: Callable[..., Any], seed: int | None, dtype: str = "fp32") -> str | None:
    """The first case, in `kernel_checks(dtype, slot)`'s order, where `kernel` is not PyTorch's own."""
    for check_dtype, tolerance, label in kernel_checks(dtype, slot):
        if (found := first_failure(verify_kernel(slot, kernel, seed, check_dtype), tolerance)) is not None:
            return f"{label.strip()}: {found}" if label else found
    return None


def checked_kernels(
    choices: Mapping[str, str],
    dropout: float,
    seed: int,
    verify: bool | Collection[str] = True,
    unverified: Iterable[str] = (),
    base: Kernels = DEFAULT_KERNELS,
    saved: Mapping[str, Path] | None = None,
    dtype: str = "fp32",
) -> Kernels:
    """The set `base` with each chosen kernel found, guarded and, with `verify` (True, or slots), pinned against
    PyTorch (a KernelError, or a warning for a slot in `unverified`) in the checks of a run computing in `dtype`;
    `saved` (slot -> folder): a saved run's."""
    opened, folders = saved is not None, saved or {}
    found = {slot: resolve_kernel(slot, name, opened, folders.get(slot)) for slot, name in choices.items()}
    kernels = dataclasses.replace(
        base, **{slot: guarded(slot, choices[slot], kernel) for slot, kernel in found.items()}
    )
    try:
        kernels.check_dropout(dropout)
    except ValueError as error:
        raise KernelError(f"kernel attention={choices['attention']}: {error}") from None
    checked = set(choices) if verify is True else set(verify or ())
    for slot, name in choices.items():
        # a saved run's kernel is checked for being the one it trained with: eval, sample, serve compute in float32
        computed = "fp32" if opened else dtype
        failure = kernel_failure(slot, getattr(kernels, slot), seed, computed) if slot in checked else None
        if failure is None:
            continue
        said = f"kernel {slot}={name} fails verification, {failure}"
        if slot in unverified:
            anyway = (
                "using it anyway (trained with --unverified)" if opened else "training with it anyway (--unverified)"
            )
            warnings.warn(f"{said}; {anyway}", UnverifiedKernelWarning, stacklevel=2)
        elif opened:
            raise KernelError(f"{said}: it does not compute what the run was trained with (edited since?)")
        else:
            shown = " --dtype bf16" if failure.startswith("in bfloat16:") else ""  # verify has no fp16
            raise KernelError(
                f"{said}; see `gpt-train verify --kernel {slot}={name}{shown}`, or train anyway with --unverified"
            )
    return kernels
