"""Run directories (gpt_viz.RunLayout): building a run once, new or resumed, and a saved run's kernels. A training
process locks its directory, so a second `run` on it refuses to start rather than interleave two runs' metrics."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import warnings
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from gpt_core import Kernels
from gpt_tasks import Task
from gpt_train.checkpoint import check_fits_checkpoint
from gpt_train.config import ConfigError, RunConfig, resolve_run_config
from gpt_train.devices import check_memory
from gpt_train.distributed import Rank
from gpt_train.errors import TrainError
from gpt_train.files import stale_temporaries, write_bytes_atomically
from gpt_train.guard import failures_named
from gpt_train.hf import read_weights
from gpt_train.kernels import (
    KernelError,
    check_compilable,
    check_kernel_set,
    checked_kernels,
    is_module_path,
    kernel_folder,
    kernel_set_for,
)
from gpt_train.precision import check_precision
from gpt_viz import RunLayout

try:
    import fcntl
except ImportError:  # Windows: no advisory locks; runs are unguarded there
    fcntl = None


class RunDirError(TrainError):
    """A run directory that cannot be used: absent, busy, already holding a run, or unwritable."""


class RunWarning(UserWarning):
    """Something the user should know about a run directory that does not stop the run."""


def describe(error: OSError) -> str:
    return error.strerror or str(error)


class RunLock:
    """An exclusive flock on the run directory itself: no lock file, and a killed process's lock is released."""

    def __init__(self, root: Path):
        self.root = root
        self.fd: int | None = None

    def acquire(self) -> RunLock:
        if fcntl is None:
            return self
        try:
            self.fd = os.open(self.root, os.O_RDONLY)
        except OSError as error:
            raise RunDirError(f"cannot use {self.root} as a run directory: {describe(error)}") from None
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self.release()
            raise RunDirError(
                f"{self.root} is in use by another gpt-train process; wait for it to finish or use another --out"
            ) from None
        return self

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing the descriptor releases the lock
            self.fd = None


@dataclass
class Run:
    """Everything a training process needs, built once by the CLI and handed to `gpt_train.trainer.train`."""

    config: RunConfig
    task: Task
    layout: RunLayout
    device: torch.device
    rank: Rank
    resume: bool  # from a checkpoint
    lock: RunLock | None = None  # held by rank 0 only, which alone writes the directory
    kernels: Kernels | None = None  # found and verified as the run was built; None: the trainer finds them
    continuing: bool = False  # opened by --resume, a checkpoint or not: what a hint to the user says to type

    def close(self) -> None:
        if self.lock is not None:
            self.lock.release()


def new_run(
    task_name: str,
    values: dict[str, Any],
    out: Path | None,
    force: bool,
    device: torch.device,
    rank: Rank,
    kernels: dict[str, str] | None = None,
    unverified: bool = False,
    init_from: Path | None = None,
) -> Run:
    """Resolve the configuration and check its kernels, then lay out the run directory (rank 0, every rank waiting
    for its verdict) and write config.json: nothing is written until the configuration is known to be valid."""
    config, task = resolve_run_config(task_name, values, kernels, unverified, init_from)
    check_memory(config.model, device)
    check_kernel_set(config.train.kernels, device)
    if config.train.compile:
        check_compilable(config.train.kernels, device)
    found = run_kernels(config, verify=True, device=device)
    check_precision(config.train.dtype, device)
    if init_from is not None:  # read once here to check them, before --force removes the run they would replace
        read_weights(init_from, config.model)
    layout = RunLayout(out if out is not None else _unused_run_dir(task_name, rank.is_main))
    config = dataclasses.replace(config, kernel_folders=recorded_folders(config.kernels, layout.root))
    lock = rank.on_main(lambda: _prepare_directory(layout, config, force, task), device)
    return Run(config, task, layout, device, rank, resume=False, lock=lock, kernels=found)


def _unused_run_dir(task_name: str, make: bool) -> Path:
    """runs/<task>-<timestamp>, made here (rank 0) so that runs started in the same second, as a sweep's `&` starts
    them, each get their own: the later ones -2, -3, ..."""
    stem = Path("runs") / f"{task_name}-{datetime.now():%Y%m%d-%H%M%S}"
    for number in range(1, 1000):
        path = stem.with_name(f"{stem.name}-{number}") if number > 1 else stem
        if not make:
            return path
        try:
            path.mkdir(parents=True)
        except FileExistsError:
            continue
        except OSError:
            pass  # _prepare_directory says why it cannot be used
        return path
    return stem


def _prepare_directory(layout: RunLayout, config: RunConfig, force: bool, task: Task) -> RunLock:
    """Create and lock a new run's directory and write its task files and config.json: one holding run files is
    refused unless `force` (which removes them) or it holds this same configuration's run stopped before its first
    checkpoint (nothing to keep)."""
    root = layout.root
    if root.exists() and not root.is_dir():
        raise RunDirError(f"--out {root} exists and is not a directory")
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunDirError(f"cannot use {root} as a run directory: {describe(error)}") from None
    lock = RunLock(layout.root).acquire()
    try:
        existing = layout.existing()
        kept = bool(existing) and not _is_unstarted_run_of(layout, config)  # files that are not ours to reuse
        if kept and (why := _not_a_run(layout, existing)):
            names = ", ".join(path.name for path in existing)
            raise RunDirError(
                f"{root} holds {names}, and they are not a run's ({why}): move them, or train into another "
                "directory (--force replaces only a run)"
            )
        if kept and not force:
            go_on = "" if layout.final.exists() else f"continue it with --resume {shlex.quote(str(root))} or "
            raise RunDirError(
                f"{root} already holds a {'finished ' * (not go_on)}run ({existing[0].name}); {go_on}replace it "
                "with --force"
            )
        for path in existing:
            path.unlink()
        _tidy(layout, config)
        for name, data in task.files().items():
            write_bytes_atomically(layout.task_file(name), data)
        config.save(layout.root)
    except BaseException as error:
        lock.release()
        if isinstance(error, OSError):
            raise RunDirError(f"cannot use {root} as a run directory: {describe(error)}") from None
        raise
    return lock


def _tidy(layout: RunLayout, config: RunConfig) -> None:
    """Remove what a killed process left half-written, and make snapshots/ as a run that keeps snapshots starts, so
    that a problem stops it before its first step."""
    for path in stale_temporaries(layout.root, layout.root / RunLayout.SNAPSHOTS):
        path.unlink(missing_ok=True)
    folder = layout.root / RunLayout.SNAPSHOTS
    if not config.train.snapshot_every:
        return
    if folder.exists() and not folder.is_dir():
        raise RunDirError(f"{folder} is a file, where this run keeps its snapshots (snapshot_every): move it")
    try:
        folder.mkdir(exist_ok=True)
    except OSError as error:
        raise RunDirError(f"cannot create {folder} ({describe(error)})") from None


RUN_KEYS = ("task", "model", "train")  # what any version's config.json holds: a run's, if not one this version loads


def _not_a_run(layout: RunLayout, existing: list[Path]) -> str | None:
    """Why files named as a run's are not one (None: they are, or a run's task files laid out before its config):
    a config.json that is no run's (not JSON, or without a task, model and train), or none beside other files (a
    project's own curves.png, say). Another version's run, which this one may not load, is a run."""
    if not layout.config.exists():
        task_files = set(layout.root.glob(layout.task_file_name("*")))
        return f"no {layout.config.name}" if set(existing) - task_files else None
    try:
        data = json.loads(layout.config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return f"{layout.config} is not a run configuration: {error}"
    if not isinstance(data, dict) or not set(RUN_KEYS) <= data.keys():
        return f"{layout.config} is not a run configuration: it has no {', '.join(RUN_KEYS)}"
    return None


def _is_unstarted_run_of(layout: RunLayout, config: RunConfig) -> bool:
    """Whether the directory holds a run of `config` (library versions and --compile aside) that never wrote a
    checkpoint."""
    if layout.checkpoint.exists() or layout.final.exists():
        return False
    return is_run_of(layout.root, config)


def is_run_of(run_dir: Path, config: RunConfig) -> bool:
    """Whether `run_dir`'s config.json is `config`, library versions and --compile aside ("drop --compile" after a
    compiled first step disagreed is the same run)."""
    try:
        saved = RunConfig.load(run_dir)
    except ConfigError:
        return False
    same = lambda c: dataclasses.replace(c, versions={}, train=dataclasses.replace(c.train, compile=False))
    return same(saved) == same(config)


def resumed_run(
    run_dir: Path,
    task_name: str | None,
    device: torch.device,
    rank: Rank,
    trust_kernels: bool = False,
    compile_now: bool | None = None,
) -> Run:
    """The run saved in `run_dir`, locked (rank 0, every rank waiting for its verdict), with any half-written file a
    killed process left removed, and its kernels found and verified (`saved_kernels`); `compile_now`, where given,
    compiles it from here on or not (config.json keeps how the run started)."""
    if not run_dir.is_dir():
        missing = "is not a directory" if run_dir.exists() else "does not exist"
        raise RunDirError(f"cannot resume: run directory {run_dir} {missing}")
    layout = RunLayout(run_dir)
    config = RunConfig.load(run_dir)
    if compile_now is not None:
        config = dataclasses.replace(config, train=dataclasses.replace(config.train, compile=compile_now))
    if config.train.compile:
        check_compilable(config.train.kernels, device, resumed=True)
    if task_name is not None and task_name != config.task:
        raise ConfigError(f"cannot resume: {run_dir} is a run of task {config.task!r}, not {task_name!r}")
    if layout.checkpoint.exists():
        check_fits_checkpoint(config.model, layout.checkpoint)  # before the trainer builds the model
    kernels = saved_kernels(config, run_dir, trust_kernels, verify_all=True, device=device)
    check_precision(config.train.dtype, device)
    lock = rank.on_main(lambda: _locked_and_tidied(layout, config), device)
    try:
        has_checkpoint = layout.checkpoint.exists()
        if not has_checkpoint:
            warnings.warn(
                f"{run_dir} stopped before its first checkpoint; starting it again from step 0 with its saved "
                "configuration",
                RunWarning,
                stacklevel=2,
            )
        task = config.build_task()
    except BaseException:
        if lock is not None:
            lock.release()
        rank.shutdown()
        raise
    return Run(config, task, layout, device, rank, has_checkpoint, lock=lock, kernels=kernels, continuing=True)


def _locked_and_tidied(layout: RunLayout, config: RunConfig) -> RunLock:
    """A resumed run's directory locked, refused if it finished without a checkpoint to go on from, and cleared of
    what a killed process left half-written."""
    lock = RunLock(layout.root).acquire()
    try:
        if not layout.checkpoint.exists() and layout.final.exists():
            raise RunDirError(f"cannot resume: no checkpoint at {layout.checkpoint}")
        _tidy(layout, config)
    except BaseException:
        lock.release()
        raise
    return lock


def opening_flags(config: RunConfig) -> str:
    """What a command opening a run of `config` must be given: " --trust-kernels" for module-path kernels, else ""."""
    return " --trust-kernels" if any(is_module_path(name) for name in config.kernels.values()) else ""


def saved_kernels(
    config: RunConfig, run_dir: Path, trust: bool, verify_all: bool = False, device: torch.device | str | None = None
) -> Kernels:
    """The kernels a saved run computes with, to open it or (`verify_all`) resume it, each pinned against PyTorch
    (edited or upgraded since: refused). A module-path kernel is refused unless `trust`, then imported from the
    folder the run recorded."""
    modules = {slot: name for slot, name in config.kernels.items() if is_module_path(name)}
    if modules and not trust:
        raise KernelError(
            f"{run_dir} was trained with module-path kernels {_named(modules)}; opening it would import and run "
            "that code: pass --trust-kernels if you trust it (load_run(..., trust_kernels=True) in Python), "
            "and they are verified against PyTorch first"
        )
    kernels = run_kernels(config, verify=True, run_dir=run_dir, device=device)
    if verify_all:  # resuming: the trainer names a failing kernel itself
        return kernels
    named = {slot: failures_named(slot, name, getattr(kernels, slot)) for slot, name in config.kernels.items()}
    return dataclasses.replace(kernels, **named)


def recorded_folders(kernels: dict[str, str], run_dir: Path) -> dict[str, str]:
    """For each module-path kernel (imported by now), the folder its module was found in, relative to the run."""
    found = {slot: kernel_folder(name) for slot, name in kernels.items()}
    return {slot: _relative(folder, run_dir.resolve()) for slot, folder in found.items() if folder is not None}


def _relative(folder: Path, start: Path) -> str:
    try:
        return os.path.relpath(folder, start)
    except ValueError:  # Windows: another drive
        return str(folder)


def run_kernels(
    config: RunConfig,
    verify: bool | Collection[str] = False,
    run_dir: Path | None = None,
    device: torch.device | str | None = None,
) -> Kernels:
    """The kernels a run computes with on `device`, found and with `verify` (True, or slots) checked;
    a saved run's (`run_dir`) are opened from the folders it recorded."""
    saved = None if run_dir is None else {slot: run_dir / folder for slot, folder in config.kernel_folders.items()}
    try:
        base = kernel_set_for(config.train.kernels, device)
        return checked_kernels(
            config.kernels,
            config.model.dropout,
            config.train.seed,
            verify,
            config.unverified_kernels,
            base,
            saved,
            config.train.dtype,
        )
    except KernelError as error:
        if run_dir is None:
            raise
        raise KernelError(f"{run_dir} was trained with kernels {_named(config.kernels)}; {error}") from None


def _named(kernels: dict[str, str]) -> str:
    return ", ".join(f"{slot}={name}" for slot, name in kernels.items())
