"""Text task: how fast a corpus is prepared (tokenized into the token cache), with how much memory, and
what training reads from the memmap costs against the same tokens held in memory.

    python benchmarks/text_prepare.py                        # corpora of 10 and 100 MB (20-30 minutes, 2 busy cores)
    python benchmarks/text_prepare.py --parts speed memory   # only the second and third tables
    python benchmarks/text_prepare.py --quick                # 1 and 4 MB: a smoke test of the machinery

The corpora are copies of tiny-shakespeare (char-rnn's input.txt, 1,115,394 bytes: --data PATH, else the file
$GPT_DATA names, else the shakespeare task's downloaded copy in the user cache) concatenated whole until the
size is reached (9 copies: 10.0 MB; 90 copies: 100.4 MB), written under --workdir (default
/tmp/gpt-text-bench), never into the repository. Each measurement that needs its
own memory figures runs in a fresh child process of this script.

1. Preparation, per tokenizer (char, byte, BPE of 1,024 tokens): a child builds the text task on a
   cold cache (hash pass, tokenizer learned from the training chunks, every chunk tokenized into
   the cache), then again on the warm cache. MB/s is corpus bytes over the cold build's seconds;
   memory is the child's peak resident set (ru_maxrss) and how far it rose above the resident set
   after the imports.
2. Training speed, memmap vs memory: one process builds the task twice on the largest corpus, once
   reading windows from the memmap and once from a copy in memory (`in_memory=true`), and the two
   take turns, round by round, at full training steps of the default text model (4 layers, 128
   dims, block 64, batch 12, AdamW) and at drawing batches alone. Tokens/s and the per-round
   ratio: median and range. Torch runs --threads threads (default 1: on a shared machine two threads
   that wait for each other make every timing noise).
3. Memory while training, 10 vs 100 MB: a child per corpus trains the default model for --steps
   steps reading the memmap (and, for contrast, the largest corpus in memory) and reports its peak
   resident set, and at the end its anonymous memory (what the process allocated; "rise": since
   before the task was built) and the memmap's pages mapped into it ("memmap": page cache, shared and
   dropped under memory pressure; the kernel maps a block of neighbouring cached pages on each fault,
   so it grows with the steps, up to the cache file's size). Anonymous memory is the figure that must
   not grow with the corpus.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import (  # noqa: E402
    ArgumentParser,
    Spread,
    given_or_default,
    interleaved_rounds,
    peak_rss_mib,
    positive_float,
    positive_int,
    print_table,
    progress,
    ratio_spread,
)

ROOT = Path(__file__).resolve().parents[1]
TOKENIZERS = {"char": {}, "byte": {}, "bpe 1024": {"tokenizer": "bpe", "vocab_size": 1024}}
MB = 1e6
PARTS = ("prepare", "speed", "memory")
DEFAULTS = {"sizes": [10, 100], "rounds": 9, "calls": 10, "steps": 100}
QUICK_DEFAULTS = {"sizes": [1, 4], "rounds": 2, "calls": 2, "steps": 20}
"""--sizes, --rounds, --calls and --steps when not given, without and with --quick."""


# corpora -------------------------------------------------------------------------------------------
def default_source() -> Path:
    """tiny-shakespeare: the file $GPT_DATA names, else the shakespeare task's copy in the user cache."""
    from gpt_tasks.builtin.shakespeare import cache_path

    return Path(os.environ.get("GPT_DATA") or cache_path())


def build_corpus(workdir: Path, megabytes: float, source_path: Path) -> Path:
    """Copies of tiny-shakespeare, concatenated whole until `megabytes` is reached (reused if present)."""
    source = source_path.read_bytes()
    copies = max(1, -(-int(megabytes * MB) // len(source)))
    path = workdir / f"corpus-{copies}x.txt"
    if not path.is_file() or path.stat().st_size != copies * len(source):
        workdir.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            for _ in range(copies):
                out.write(source)
    return path


# what a child process measures ---------------------------------------------------------------------
def memory_now() -> dict[str, float]:
    """In MiB (Linux): the resident set (VmRSS), its peak (VmHWM), its anonymous part (RssAnon), and the
    resident pages of the token cache's memmap ("memmap": the Rss of every mapping of a tokens.bin)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon"):
            fields[key] = int(value.split()[0]) / 1024
    fields["memmap"], in_cache = 0.0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if "-" in line.split(" ", 1)[0]:  # a mapping's header line: address range, ..., path
            in_cache = line.rstrip().endswith("/tokens.bin")
        elif in_cache and line.startswith("Rss:"):
            fields["memmap"] += int(line.split()[1]) / 1024
    return fields


def child_prepare(corpus: Path, cache_dir: Path, params: dict) -> dict:
    from gpt_tasks import get_task

    base = memory_now()["VmRSS"]
    start = time.perf_counter()
    task = get_task("text", data=str(corpus), cache_dir=str(cache_dir), **params)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    get_task("text", **dataclasses.asdict(task.params))
    warm = time.perf_counter() - start
    tokens = int(task.cache.offsets[-1])
    return {"cold_s": cold, "warm_s": warm, "tokens": tokens, "base_mib": base, "peak_mib": peak_rss_mib()}


def training_setup(corpus: Path, cache_dir: Path, in_memory: bool):
    """The default text task, model and optimiser on `corpus` (its cache already prepared)."""
    import torch

    from gpt_core import GPT
    from gpt_tasks import get_task
    from gpt_train.config import train_settings
    from gpt_train.trainer import make_optimizer

    task = get_task("text", data=str(corpus), cache_dir=str(cache_dir), in_memory=in_memory)
    defaults = task.defaults()
    train = train_settings(task.name, defaults.train)
    torch.manual_seed(0)
    model = GPT(defaults.model)
    return task, model, make_optimizer(model, train), train.batch_size


def make_step(task, model, optimizer, batch_size: int, seed: int):
    import torch

    generator = torch.Generator().manual_seed(seed)

    def step() -> None:
        batch = task.batch(batch_size, generator)
        loss = model(batch.inputs, batch.targets).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def child_train(corpus: Path, cache_dir: Path, in_memory: bool, steps: int) -> dict:
    base = memory_now()
    task, model, optimizer, batch_size = training_setup(corpus, cache_dir, in_memory)
    step = make_step(task, model, optimizer, batch_size, seed=0)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    seconds = time.perf_counter() - start
    end = memory_now()
    return {
        "tokens_per_s": steps * batch_size * task.block_size / seconds,
        "base_anon_mib": base["RssAnon"],
        "anon_mib": end["RssAnon"],
        "memmap_mib": end["memmap"],
        "peak_mib": end["VmHWM"],
        "corpus_tokens": int(task.cache.offsets[-1]),
    }


def in_child(*args: str) -> dict:
    """Run this script as `--child ARGS...` in a fresh process and return the JSON it prints."""
    done = subprocess.run([sys.executable, __file__, "--child", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"child {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# the parent: three tables ------------------------------------------------------------------------
def preparation_table(corpora: dict[float, Path], workdir: Path) -> None:
    rows = []
    for corpus in corpora.values():
        for name, params in TOKENIZERS.items():
            cache_dir = workdir / f"cache-prepare-{corpus.stem}-{name.replace(' ', '')}"
            shutil.rmtree(cache_dir, ignore_errors=True)
            progress(f"preparing {corpus.name} ({corpus.stat().st_size / MB:.1f} MB) with {name} ...")
            got = in_child("prepare", str(corpus), str(cache_dir), json.dumps(params))
            mb = corpus.stat().st_size / MB
            rows.append([
                f"{mb:.1f}", name, f"{got['tokens']:,}", f"{got['cold_s']:.1f}", f"{mb / got['cold_s']:.2f}",
                f"{got['warm_s']:.2f}", f"{got['peak_mib']:.0f}", f"{got['peak_mib'] - got['base_mib']:.0f}",
            ])  # fmt: skip
            shutil.rmtree(cache_dir, ignore_errors=True)
    print("\nPreparation (cold cache: hash, learn the tokenizer, tokenize every chunk; then a warm start):\n")
    header = ["corpus MB", "tokenizer", "tokens", "cold s", "MB/s", "warm s", "peak RSS MiB", "rise MiB"]
    print_table(header, rows)


def drawer(task, batch_size: int):
    """A function drawing one training batch of `task` after another."""
    import torch

    generator = torch.Generator().manual_seed(2)
    return lambda: task.batch(batch_size, generator)


def speed_table(corpus: Path, workdir: Path, rounds: int, calls: int) -> None:
    cache_dir = workdir / "cache-train"
    progress(f"training speed on {corpus.name}: preparing its char cache if needed ...")
    sides = {
        "memmap": training_setup(corpus, cache_dir, in_memory=False),
        "memory": training_setup(corpus, cache_dir, in_memory=True),
    }
    batch_size, block = sides["memmap"][3], sides["memmap"][0].block_size
    rows = []
    steps = [make_step(*side, seed=1) for side in sides.values()]
    draws = [drawer(side[0], batch_size) for side in sides.values()]
    for what, fns, n_calls in (("training step", steps, calls), ("batch drawn alone", draws, calls * 20)):
        progress(f"{what}: {rounds} rounds of {n_calls} calls per side ...")
        times = interleaved_rounds(fns, rounds=rounds, calls=n_calls, warmup=3)
        tokens = batch_size * block
        speed = [Spread.of([tokens / s for s in side]) for side in times]
        ratio = ratio_spread(times[1], times[0])  # memory seconds / memmap seconds: memmap speed relative to memory
        rows.append([what, f"{speed[0].median:,.0f}", f"{speed[1].median:,.0f}", ratio.plain(3)])
    print(f"\nTraining from the memmap vs from memory ({corpus.stat().st_size / MB:.1f} MB corpus, char tokens,")
    print(f"batch {batch_size} x {block} tokens, {rounds} interleaved rounds; ratio = memmap speed / memory speed):\n")
    print_table(["measure", "memmap tokens/s", "memory tokens/s", "ratio median (range)"], rows)


def memory_table(corpora: dict[float, Path], workdir: Path, steps: int) -> None:
    rows = []
    largest = max(corpora)
    runs = [(size, False) for size in corpora] + [(largest, True)]
    for size, in_memory in runs:
        corpus = corpora[size]
        progress(f"training {steps} steps on {corpus.name} ({'in memory' if in_memory else 'memmap'}) ...")
        cache_dir = workdir / "cache-train"
        in_child("prepare", str(corpus), str(cache_dir), "{}")  # the cache, built once, outside the measurement
        got = in_child("train", str(corpus), str(cache_dir), str(in_memory), str(steps))
        rows.append([
            f"{corpus.stat().st_size / MB:.1f}", f"{got['corpus_tokens']:,}", "memory" if in_memory else "memmap",
            f"{got['tokens_per_s']:,.0f}", f"{got['peak_mib']:.0f}", f"{got['anon_mib']:.0f}",
            f"{got['anon_mib'] - got['base_anon_mib']:.0f}", f"{got['memmap_mib']:.1f}",
        ])  # fmt: skip
    print(f"\nMemory while training ({steps} steps of the default text model, char tokens, one child each):\n")
    header = ["corpus MB", "tokens", "reads", "tokens/s", "peak RSS MiB", "anon MiB", "anon rise MiB", "memmap MiB"]
    print_table(header, rows)


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=positive_float, nargs="+", help="corpus sizes in MB (default: 10 100)")
    parser.add_argument("--data", type=Path, help="tiny-shakespeare [default: $GPT_DATA, else the task's cached copy]")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/gpt-text-bench"), help="corpora and caches")
    parser.add_argument("--rounds", type=positive_int, help="interleaved rounds of the speed comparison (default 9)")
    parser.add_argument("--calls", type=positive_int, help="training steps per side per round (default 10)")
    parser.add_argument("--steps", type=positive_int, help="training steps of each memory measurement (default 100)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads, here and in the children")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS), help="which tables to measure")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: 1 and 4 MB, 2 rounds of 2 calls, 20 steps, each unless given")  # fmt: skip
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, corpus, cache_dir, *rest = args.child
        if kind == "prepare":
            print(json.dumps(child_prepare(Path(corpus), Path(cache_dir), json.loads(rest[0]))))
        else:
            print(json.dumps(child_train(Path(corpus), Path(cache_dir), rest[0] == "True", int(rest[1]))))
        return
    given_or_default(args, QUICK_DEFAULTS if args.quick else DEFAULTS)
    source = args.data or default_source()
    if not source.is_file():
        sys.exit(
            f"text_prepare: no corpus at {source}: pass --data PATH (char-rnn's tiny-shakespeare input.txt), "
            "or train `gpt-train run --task shakespeare` once to download it"
        )
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # for the children
    import torch

    torch.set_num_threads(args.threads)
    corpora = {size: build_corpus(args.workdir, size, source) for size in sorted(args.sizes)}
    print(f"torch {torch.__version__}, {args.threads} threads; corpora: copies of {source.name} in {args.workdir}")
    if "prepare" in args.parts:
        preparation_table(corpora, args.workdir)
    if "speed" in args.parts:
        speed_table(corpora[max(corpora)], args.workdir, args.rounds, args.calls)
    if "memory" in args.parts:
        memory_table(corpora, args.workdir, args.steps)


if __name__ == "__main__":
    main()
