"""Hook points' cost: the step-time benchmark's training step, and cached decoding, with every name hooked, with
no hook set, and (given `--before`) in a tree before the hook points.

    python benchmarks/hooks_overhead.py                  # no hooks against every name hooked
    git archive <commit before the hooks> packages/gpt-core/src | tar -x -C /tmp/before
    python benchmarks/hooks_overhead.py --before /tmp/before/packages/gpt-core/src
    python benchmarks/hooks_overhead.py --before ... --after /tmp/after/packages/gpt-core/src  # two commits

The sides, with the same initial weights, take turns in every round (the order running through every
permutation, round after round): gpt-core from `--before` when given (an earlier tree, imported beside the
installed one), gpt-core with hook points (`--after`, another tree, or by default the installed one)
with no hook set, and the same with an identity hook (returning None) on every hook name. `--after`
at the hooks' own commit keeps later changes out of the comparison. The claim to check is that a
model with no hook set is as fast as before; the hooked column shows what hooking everything costs
(the pattern hook puts attention on its plain, autograd-differentiated path). The training step is
`step_time.py`'s (AdamW, eager); decoding is `generate` with the KV cache, greedy, batch 1. Ratios:
the median over rounds and the range.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import itertools
import statistics
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import ModuleType

import torch

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    ArgumentParser,
    interleaved_rounds,
    positive_int,
    print_table,
    progress,
    ratio_spread,
    require_package,
)
from step_time import CONFIGS, make_step  # noqa: E402

import gpt_core  # noqa: E402

DECODE_TOKENS = 32


def import_tree(src: Path) -> ModuleType:
    """The gpt_core package under `src` (checked to be there: `common.require_package`), imported beside the
    installed one: the installed modules are set aside while it imports (its own `from gpt_core.x import y` lines
    then bind to it), and put back after."""
    ours = {name: module for name, module in sys.modules.items() if name.split(".")[0] == "gpt_core"}
    for name in ours:
        del sys.modules[name]
    sys.path.insert(0, str(src))
    try:
        before = importlib.import_module("gpt_core")
    finally:
        sys.path.remove(str(src))
        for name in [n for n in sys.modules if n.split(".")[0] == "gpt_core"]:
            del sys.modules[name]
        sys.modules.update(ours)
    if Path(before.__file__).resolve().parent.parent != src.resolve():  # an import hook chose another copy
        raise SystemExit(f"hooks_overhead.py: gpt_core came from {Path(before.__file__).parent}, not from {src}")
    return before


def three_models(
    before: ModuleType | None, after: ModuleType, config: gpt_core.GPTConfig, stack: ExitStack
) -> list[torch.nn.Module]:
    """Before (when given), after, and after with an identity hook on every name (set while `stack` lasts)."""
    torch.manual_seed(0)
    plain = after.GPT(after.GPTConfig(**config.to_dict()))
    hooked = after.GPT(plain.config)
    hooked.load_state_dict(plain.state_dict())
    stack.enter_context(hooked.hooks(dict.fromkeys(hooked.hook_names(), lambda activation, name: None)))
    if before is None:
        return [plain, hooked]
    known = {field.name for field in dataclasses.fields(before.GPTConfig)}  # an earlier tree has fewer switches
    old = before.GPT(before.GPTConfig(**{k: v for k, v in config.to_dict().items() if k in known}))
    old.load_state_dict(plain.state_dict())
    return [old, plain, hooked]


def rotated_rounds(fns: Sequence[Callable[[], object]], rounds: int, calls: int, warmup: int) -> list[list[float]]:
    """`common.interleaved_rounds`, with the sides' order running through every permutation in turn:
    on a loaded machine the place in a round (first, after the slowest side, ...) biases a time, and
    alternating two orders leaves the middle side always in the middle."""
    interleaved_rounds(fns, 0, warmup=warmup)
    orders = list(itertools.permutations(range(len(fns))))
    times: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = orders[r % len(orders)]
        seconds = interleaved_rounds([fns[i] for i in order], 1, calls=calls)
        for i, (second,) in zip(order, seconds, strict=True):
            times[i].append(second)
    return times


def row(label: str, times: list[list[float]], unit: float) -> list[str]:
    """Median times and the per-round ratios; with a before side, the ratios to it and the ratio of the fastest
    rounds (the least disturbed by a shared machine's load)."""
    ms = [f"{statistics.median(t) * unit:.2f}" for t in times]
    if len(times) == 2:
        return [label, *ms, ratio_spread(times[1], times[0]).plain()]
    before, after, hooked = times
    ratios = [ratio_spread(after, before).plain(), ratio_spread(hooked, before).plain()]
    return [label, *ms, *ratios, f"{min(after) / min(before):.3f}"]


def training_row(before: ModuleType | None, after: ModuleType, name: str, rounds: int, per_round: int) -> list[str]:
    config, batch = CONFIGS[name]
    with ExitStack() as stack:
        models = three_models(before, after, config, stack)
        steps = [make_step(m, batch, config.block_size, config.vocab_size, False) for m in models]
        times = rotated_rounds(steps, rounds, calls=per_round, warmup=3)
    return row(f"{name}: training step (batch {batch})", times, 1e3)


def decoding_row(before: ModuleType | None, after: ModuleType, name: str, rounds: int, per_round: int) -> list[str]:
    config, _ = CONFIGS[name]
    prompt = torch.randint(config.vocab_size, (1, 1), generator=torch.Generator().manual_seed(1))
    n_new = min(DECODE_TOKENS, config.block_size)
    with ExitStack() as stack:
        models = [m.eval() for m in three_models(before, after, config, stack)]
        makers = ([before.generate] if before else []) + [after.generate, after.generate]
        calls = [lambda m=m, g=g: g(m, prompt, n_new, temperature=0.0) for m, g in zip(models, makers, strict=True)]
        times = rotated_rounds(calls, rounds, calls=per_round, warmup=2)
    return row(f"{name}: cached greedy decoding, {n_new} tokens (batch 1), per token", times, 1e3 / n_new)


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="an earlier tree's packages/gpt-core/src (default: none)")
    parser.add_argument("--after", type=Path, help="a tree with hook points (default: the installed gpt_core)")
    parser.add_argument(
        "--rounds", type=positive_int, default=24, help="rounds, best a multiple of 6 orders (default 24)"
    )
    parser.add_argument(
        "--steps-per-round", type=positive_int, default=5, help="calls of each side per round (default 5)"
    )
    parser.add_argument("--configs", nargs="+", choices=list(CONFIGS), default=list(CONFIGS))
    args = parser.parse_args()
    for src in (args.before, args.after):
        if src is not None:
            require_package(parser, src, "gpt_core")
    before = import_tree(args.before) if args.before else None
    after = import_tree(args.after) if args.after else gpt_core
    if not hasattr(after.GPT, "hook_names"):
        raise SystemExit(f"hooks_overhead.py: {Path(after.__file__).parent} has no hook points")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"before: {Path(before.__file__).parent if before else '-'}\nafter: {Path(after.__file__).parent}")
    rows = []
    for name in args.configs:
        rows.append(training_row(before, after, name, args.rounds, args.steps_per_round))
        progress(f"{name}: training step done")
        rows.append(decoding_row(before, after, name, args.rounds, args.steps_per_round))
        progress(f"{name}: decoding done")
    print(f"{args.rounds} rounds of {args.steps_per_round} calls of each side; ratio: median over rounds (range)\n")
    header = ["what", "before ms", "no hooks ms", "every name hooked ms", "no hooks / before", "hooked / before",
              "no hooks / before, fastest rounds"] if before else ["what", "no hooks ms", "every name hooked ms",
              "hooked / no hooks"]  # fmt: skip
    print_table(header, rows)


if __name__ == "__main__":
    main()
