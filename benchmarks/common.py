"""Shared by the benchmarks: their argument parser (bad input is one line and exit 2) with its number types and
device check, interleaved rounds and the spread of a ratio, peak memory, a matmul peak, and a table printer.

The machine these run on is shared and noisy, so a ratio between two timings is never taken from
one measurement of each side: the sides take turns within each round (in alternating order, so
neither always runs first), every round gives its own ratio, and the table prints the median of
those ratios and their spread (lowest-highest).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

HEAPS = ("gpt-train", "glibc")


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, whose refusals are one line (`script.py: error: ...`) and exit 2, no usage block."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (rounds, steps, batches, tokens, lengths)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is below 1")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a number above 0 (sizes)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number above 0")
    return value


def given_or_default(args: argparse.Namespace, defaults: dict[str, typing.Any]) -> None:
    """Each option of `defaults` left unset (None) takes its default there: a --quick's smaller defaults never
    override a value given."""
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def checked_device(parser: argparse.ArgumentParser, name: str) -> torch.device:
    """The device `name` (auto, cpu, cuda, cuda:N or mps) as gpt-train resolves it, when this machine has it; else
    one line naming the devices it has, and exit 2, before anything is built."""
    from gpt_train.devices import DeviceError, resolve_device

    try:
        return resolve_device(name)
    except DeviceError as error:
        parser.error(f"--device: {error}")


def require_package(parser: argparse.ArgumentParser, src: Path, module: str) -> None:
    """One line and exit 2 unless the folder `src` holds the package `module` (src/module/__init__.py): a tree
    given to compare against must be a tree, not a path that imports whatever is installed instead."""
    if not (src / module / "__init__.py").is_file():
        what = "no such folder" if not src.is_dir() else f"no {module}/__init__.py in it"
        parser.error(f"{src} holds no {module} package ({what})")


def add_heap_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--heap", choices=HEAPS, default="gpt-train",
                        help="gpt-train's heap, which keeps what a step frees for the next (gpt_train.heap), or "
                        "glibc's own thresholds (default: gpt-train)")  # fmt: skip


def use_heap(name: str) -> str:
    """Put this process on the heap `name` (one of HEAPS); the words for a table's first line."""
    from gpt_train.heap import keep_freed_memory

    if name == "gpt-train" and keep_freed_memory():
        return "heap: gpt-train's (freed memory kept)"
    return "heap: the C library's own"


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far, in MiB."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024 if sys.platform != "darwin" else kib / 2**20


def matmul_peak_gflops(n: int = 1024, repeats: int = 20) -> float:
    """fp32 GFLOP/s of a large square matmul: the machine's practical ceiling for model FLOPs."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n**3 * repeats / (time.perf_counter() - start) / 1e9


def synchronize(device: torch.device | str = "cpu") -> None:
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_rounds(
    fns: Sequence[Callable[[], object]],
    rounds: int,
    calls: int = 1,
    warmup: int = 0,
    device: torch.device | str = "cpu",
    after_round: Callable[[int, list[float]], None] | None = None,
) -> list[list[float]]:
    """Seconds per call of each function in each round: times[i][r] is function i in round r.

    In every round each function runs `calls` times in a row (the round's time is their mean), the
    functions taking turns, forwards in even rounds and backwards in odd ones. `warmup` calls of each
    come first, untimed. `after_round(r, seconds)` is called after each round (progress lines)."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    synchronize(device)
    times: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        this_round = [0.0] * len(fns)
        for i in order:
            start = time.perf_counter()
            for _ in range(calls):
                fns[i]()
            synchronize(device)
            this_round[i] = (time.perf_counter() - start) / calls
            times[i].append(this_round[i])
        if after_round is not None:
            after_round(r, this_round)
    return times


@dataclass(frozen=True)
class Spread:
    """The median of some per-round values and their range."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values), len(values))

    def ratio(self, digits: int = 1) -> str:
        """'13.2x (11.1-13.5)': the median ratio and the lowest and highest round's."""
        return f"{self.median:.{digits}f}x ({self.low:.{digits}f}-{self.high:.{digits}f})"

    def plain(self, digits: int = 3) -> str:
        """'1.035 (1.012 to 1.061)': for values that may be negative."""
        return f"{self.median:.{digits}f} ({self.low:.{digits}f} to {self.high:.{digits}f})"


def ratio_spread(numerators: Sequence[float], denominators: Sequence[float]) -> Spread:
    """Median and range of the per-round ratios numerators[r] / denominators[r]."""
    return Spread.of([a / b for a, b in zip(numerators, denominators, strict=True)])


def progress(message: str) -> None:
    """A progress line on stderr (the table goes to stdout)."""
    print(message, file=sys.stderr, flush=True)


def print_table(header: list[str], rows: list[list[str]]) -> None:
    """A markdown table, each column as wide as its widest cell."""
    table = StreamedTable(header, [max(len(str(r[i])) for r in rows) if rows else 0 for i in range(len(header))])
    for row in rows:
        table.row(row)


class StreamedTable:
    """print_table's markdown table, printed a row at a time: the header and its rule at once, then each row as it
    comes, flushed. Each column is as wide as its header or its given width, or a wider cell."""

    def __init__(self, header: list[str], widths: list[int]) -> None:
        self.widths = [max(len(name), width) for name, width in zip(header, widths, strict=True)]
        self.row(header)
        print("|" + "|".join("-" * (w + 2) for w in self.widths) + "|", flush=True)

    def row(self, cells: list[object]) -> None:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, self.widths, strict=True)) + " |", flush=True)
