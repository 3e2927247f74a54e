"""Ours against nanoGPT's recipes for tiny-shakespeare, both scored on the same held-out characters.

    python experiments/exp_nanogpt.py --nanogpt NANOGPT --data tinyshakespeare.txt --out /tmp/nanogpt-cmp
    python experiments/exp_nanogpt.py --recipe gpu --nanogpt NANOGPT --data tinyshakespeare.txt --out /tmp/gpu-cmp

NANOGPT is a clone of karpathy/nanoGPT with its character data prepared (`python data/shakespeare_char/prepare.py`,
which reads data/shakespeare_char/input.txt when it is there). Three models are trained once each, 2,000 steps,
into `--out`/cpu:

- nanoGPT, by the command its README gives for a CPU: it trains on the first 90% of the text and validates on
  the rest (characters from int(0.9 * len(text)) on);
- ours, `gpt-train run --task shakespeare`: it holds out 1,024-character chunks of the whole text, chosen by a
  hash, so most of its training chunks surround its held-out ones, in the last 10% too;
- ours trained on the first 90% alone (`--data` a file of that part), which has seen none of the last 10%.

Each is then scored on the same characters with the same contexts, the shakespeare task's own evaluation windows
(`window_batch`: 64 characters of context from the window's start, each target once): our held-out windows in
the last 10%, and every window of the last 10% (non-overlapping, from the boundary on: nanoGPT's whole
validation part). nanoGPT's model is built by nanoGPT's own `model.py` from its `ckpt.pt` (loaded with
`weights_only=True`, no unpickling of code). Before scoring, the tokenisation is checked: nanoGPT's train.bin
and val.bin, concatenated, must equal the task's token stream, id for id (the same 65 characters, sorted, as
ids 0-64), and each of our runs must map every id to the same character.

`--recipe gpu` is nanoGPT's GPU recipe instead, `python train.py config/train_shakespeare_char.py` (6 layers, 6 heads,
384 dimensions, block 256, batch 64, dropout 0.2, 5,000 steps, bf16, compiled), against `gpt-train run --task
shakespeare --device cuda --compile` at the same settings (GPU_SETTINGS; no biases, as nanoGPT's model has none),
both compiled by torch.compile, each trained once on the first 90% into `--out`/gpu and timed whole as a user runs
it; both are scored on every window of the last 10%. On another device than CUDA neither is compiled and both
train in float32. `--quick` makes either recipe's models tiny (2 layers, 2 heads, 64 dimensions, 30 steps; into
`--out`/cpu-quick or gpu-quick), a rehearsal of the machinery on any device, not a result.

Beside each finished model its record (NAME.recipe.json) holds the command and settings that trained it and the
digest of its training text. A model whose record matches the current ones is read back, not trained again (and
printed so); one without a record (its training was cut off) is trained again; one with another record is
refused, naming `--force` (train it again) or a new `--out`.

A difference is nanoGPT's loss minus ours over the shared targets; its 95% interval comes from 10,000
bootstrap resamples of the 1,024-character chunks (the windows of one chunk are not independent), and the
chunk count says on how many chunks ours is the lower.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import io
import json
import platform
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np
import torch
import torch.nn.functional as F

import gpt_core
from gpt_core import IGNORE_INDEX
from gpt_tasks import get_task
from gpt_train.loading import load_run
from gpt_viz import HELDOUT, RunLayout, metric_key

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from common import ArgumentParser  # noqa: E402  benchmarks/common.py's: its refusals are one line
from nanogpt_wall import NANOGPT_RECIPE, timed  # noqa: E402  nanoGPT README's CPU command, and a timed run

BOUNDARY_FRACTION = 0.9  # nanoGPT's shakespeare_char split: validation from int(0.9 * len(text)) on
EVAL_BATCH = 256
BOOTSTRAP_RESAMPLES = 10_000

Logits = Callable[[torch.Tensor], torch.Tensor]  # (N, T) token ids -> (N, T, vocab) logits


def fail(message: str) -> NoReturn:
    sys.exit(f"exp_nanogpt: {message}")


GPU_SETTINGS = {
    "block_size": 256, "n_layer": 6, "n_head": 6, "n_embd": 384, "dropout": 0.2, "bias": "false", "steps": 5000,
    "batch_size": 64, "lr": 1e-3, "min_lr": 1e-4, "warmup_steps": 100, "beta2": 0.99, "weight_decay": 0.1,
    "grad_clip": 1.0, "eval_every": 250, "dtype": "bf16",
}  # fmt: skip
"""nanoGPT's config/train_shakespeare_char.py (and train.py's defaults it keeps) as `gpt-train run --set` values."""
QUICK = {"n_layer": 2, "n_head": 2, "n_embd": 64, "steps": 30, "eval_every": 10}
"""--quick, either recipe: both sides this small, to rehearse the machinery."""
NANOGPT_QUICK = ["--n_layer=2", "--n_head=2", "--n_embd=64", "--max_iters=30", "--lr_decay_iters=30",
                 "--eval_interval=10", "--eval_iters=2"]  # fmt: skip


def digest(*files: Path) -> str:
    """sha256 of the files' bytes, one after another."""
    hashed = hashlib.sha256()
    for file in files:
        hashed.update(file.read_bytes())
    return hashed.hexdigest()


def record_of(model_dir: Path) -> Path:
    """Beside a model's folder: the recipe that trained it (its command, settings and training text's digest)."""
    return model_dir.with_name(f"{model_dir.name}.recipe.json")


def read_back(model_dir: Path, finished: bool, recipe: dict, force: bool) -> bool:
    """True when `model_dir` holds a finished model trained by `recipe` (read back, not trained again); False when it
    is to be trained (`force`, nothing finished there, or no record: the record is written once training ends, so a
    model without one was cut off); refused when its record names another recipe."""
    record = record_of(model_dir)
    if force or not (finished and record.is_file()):
        return False
    recorded = json.loads(record.read_text())
    if recorded == recipe:
        return True
    differ = sorted(key for key in recipe.keys() | recorded.keys() if recipe.get(key) != recorded.get(key))
    fail(f"{model_dir} holds a model trained with another {', '.join(differ)} ({record}); pass --force to train it "
         "again, or a new --out")  # fmt: skip


def train_ours(data: Path, out: Path, settings: dict, device: str, compile: bool, force: bool) -> float | None:
    """`gpt-train run --task shakespeare` on `data` into `out`, at the task's defaults changed by `settings`, on
    `device`, compiled with `compile`; None when `out` holds a finished run of this recipe (see read_back)."""
    command = ["gpt_train", "run", "--task", "shakespeare", "--device", device]
    command += [f"--set={key}={value}" for key, value in settings.items()] + (["--compile"] if compile else [])
    recipe = {"command": command, "data_sha256": digest(data)}
    if read_back(out, RunLayout(out).final.is_file(), recipe, force):
        return None
    record_of(out).unlink(missing_ok=True)
    where = ["--data", str(data), "--out", str(out)]
    wall = timed([sys.executable, "-m", *command, *where, "--quiet", "--no-pictures", "--force"], Path.cwd())
    record_of(out).write_text(json.dumps(recipe, indent=1) + "\n")
    return wall


def train_nanogpt(nanogpt: Path, out: Path, recipe: list[str], force: bool) -> float | None:
    """nanoGPT's `recipe` (its command after `python`) into `out`; None when `out` holds a finished model of this
    recipe, trained on the same train.bin and val.bin (see read_back)."""
    folder = nanogpt / "data" / "shakespeare_char"
    record = {"command": recipe, "data_sha256": digest(folder / "train.bin", folder / "val.bin")}
    if read_back(out, (out / "ckpt.pt").is_file(), record, force):
        return None
    record_of(out).unlink(missing_ok=True)
    if out.exists():
        shutil.rmtree(out)  # nanoGPT saves a checkpoint only when its estimate improves: none of an earlier one kept
    wall = timed([sys.executable, *recipe, f"--out_dir={out}"], nanogpt)
    record_of(out).write_text(json.dumps(record, indent=1) + "\n")
    return wall


def cpu_recipes(quick: bool) -> tuple[list[str], dict]:
    """nanoGPT README's CPU command (after `python`) and our settings (the task's defaults); tiny with `quick`."""
    return (NANOGPT_RECIPE + NANOGPT_QUICK, dict(QUICK)) if quick else (list(NANOGPT_RECIPE), {})


def gpu_recipes(device: str, quick: bool) -> tuple[list[str], dict, bool]:
    """nanoGPT's GPU command (after `python`), our settings, and whether both compile, on `device`; tiny with
    `quick`. nanoGPT compiles by default (train.py's compile=True, which its config keeps) and autocasts on CUDA
    only: elsewhere neither side compiles and both train in float32."""
    nanogpt = ["train.py", "config/train_shakespeare_char.py", f"--device={device}", "--always_save_checkpoint=True"]
    ours = dict(GPU_SETTINGS)
    if quick:
        nanogpt += NANOGPT_QUICK
        ours |= QUICK
    compile = device.startswith("cuda")
    if not compile:
        nanogpt += ["--dtype=float32", "--compile=False"]
        ours["dtype"] = "fp32"
    return nanogpt, ours, compile


def nanogpt_model(nanogpt: Path, out: Path, device: str = "cpu") -> tuple[Logits, dict]:
    """nanoGPT's trained model, built by its own model.py, as a logits function; and its checkpoint's record."""
    spec = importlib.util.spec_from_file_location("nanogpt_model", nanogpt / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    checkpoint = torch.load(out / "ckpt.pt", map_location=device, weights_only=True)
    with contextlib.redirect_stdout(io.StringIO()):  # it prints its parameter count
        model = module.GPT(module.GPTConfig(**checkpoint["model_args"]))
    state = {key.removeprefix("_orig_mod."): value for key, value in checkpoint["model"].items()}
    model.load_state_dict(state)
    model.to(device).eval()
    record = {"iter_num": checkpoint["iter_num"], "best_val_loss": float(checkpoint["best_val_loss"]),
              "eval_iters": checkpoint["config"]["eval_iters"]}  # fmt: skip
    return (lambda ids: model(ids, ids.contiguous())[0]), record  # given targets, it returns every position's logits


def our_model(run_dir: Path, data: Path, device: str = "cpu") -> tuple[Logits, list[str]]:
    """A finished run's model as a logits function, and the character each of its ids stands for; refused
    unless the run was trained on `data` (its recorded corpus_sha256)."""
    loaded = load_run(run_dir, device)
    model = loaded.model
    try:
        task = get_task("shakespeare", **(loaded.config.task_params | {"data": str(data)}))
    except ValueError as error:
        fail(f"{run_dir} was not trained on {data} ({error}); remove it to train it again")
    return (lambda ids: model(ids).logits), [task.decode([i]) for i in range(task.vocab_size)]


@torch.inference_mode()
def target_losses(
    logits_of: Logits, batch_of, windows: torch.Tensor, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per window: the summed next-token cross-entropy (nats) of its scored targets, and their count."""
    sums, counts = [], []
    for part in windows.split(EVAL_BATCH):
        batch = batch_of(part)
        logits = logits_of(batch.inputs.to(device)).float().cpu()
        scored = batch.targets != IGNORE_INDEX
        loss = F.cross_entropy(
            logits.flatten(0, 1), batch.targets.flatten(), reduction="none", ignore_index=IGNORE_INDEX
        )
        sums.append(loss.view_as(scored).double().sum(dim=1))
        counts.append(scored.sum(dim=1))
    return torch.cat(sums), torch.cat(counts)


@dataclass
class Comparison:
    ours: float  # nats per character over the shared targets
    nanogpt: float
    low: float  # 95% bootstrap interval of nanoGPT - ours
    high: float
    ours_lower: int  # chunks on which ours is the lower
    chunks: int
    characters: int


def compare(ours: tuple, nano: tuple, chunk_of: torch.Tensor) -> Comparison:
    """Both models' losses on the same windows, and nanoGPT - ours by chunk, bootstrapped over the chunks."""
    (our_sums, counts), (nano_sums, nano_counts) = ours, nano
    assert torch.equal(counts, nano_counts)
    chunk_ids, chunk = torch.unique(chunk_of, return_inverse=True)
    n = len(chunk_ids)
    by_chunk = lambda values: torch.zeros(n, dtype=torch.float64).index_add_(0, chunk, values.double())
    ours_c, nano_c, count_c = by_chunk(our_sums), by_chunk(nano_sums), by_chunk(counts)
    generator = torch.Generator().manual_seed(0)
    draws = torch.randint(n, (BOOTSTRAP_RESAMPLES, n), generator=generator)
    resampled = (nano_c[draws] - ours_c[draws]).sum(dim=1) / count_c[draws].sum(dim=1)
    low, high = torch.quantile(resampled, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    total = float(count_c.sum())
    return Comparison(
        ours=float(ours_c.sum()) / total,
        nanogpt=float(nano_c.sum()) / total,
        low=low,
        high=high,
        ours_lower=int((ours_c < nano_c).sum()),
        chunks=n,
        characters=int(total),
    )


def check_tokens(task, nanogpt: Path, boundary: int) -> None:
    """nanoGPT's train.bin + val.bin must be the task's token stream, id for id, split at `boundary`."""
    folder = nanogpt / "data" / "shakespeare_char"
    train, val = (np.fromfile(folder / name, dtype=np.uint16) for name in ("train.bin", "val.bin"))
    ours = np.asarray(task.cache.tokens)
    if len(train) != boundary or not np.array_equal(np.concatenate((train, val)), ours):
        fail(f"{folder}'s train.bin and val.bin are not this text encoded as ours is; prepare them from --data")


def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nanogpt", type=Path, required=True, help="a clone of karpathy/nanoGPT, data prepared")
    parser.add_argument("--data", type=Path, required=True, help="tinyshakespeare.txt")
    parser.add_argument("--out", type=Path, required=True, help="where the models are trained")
    parser.add_argument("--recipe", choices=("cpu", "gpu"), default="cpu", help="nanoGPT's CPU or GPU recipe")
    parser.add_argument("--device", help="where the gpu recipe trains and both are scored [default: cuda]")
    parser.add_argument("--quick", action="store_true", help="either recipe, tiny: a rehearsal, not a result")
    parser.add_argument("--force", action="store_true", help="train every model again, whatever --out holds")
    args = parser.parse_args()
    gpu = args.recipe == "gpu"
    if not gpu and args.device not in (None, "cpu"):
        fail(f"--device {args.device}: the cpu recipe trains and scores on the CPU; --recipe gpu takes a device")
    device = (args.device or "cuda") if gpu else "cpu"
    nanogpt, data, out = args.nanogpt.resolve(), args.data.resolve(), args.out.resolve()
    if not (nanogpt / "model.py").is_file() or not (nanogpt / "data" / "shakespeare_char" / "train.bin").is_file():
        fail(f"{nanogpt} is not a nanoGPT clone with data/shakespeare_char/train.bin; run its prepare.py first")
    if not data.is_file():
        fail(f"{data} is not a file")
    out = out / (args.recipe + ("-quick" if args.quick else ""))  # each recipe's models in their own folder
    out.mkdir(parents=True, exist_ok=True)
    text = data.read_text(encoding="utf-8")
    boundary = int(len(text) * BOUNDARY_FRACTION)
    first90 = out / "first90.txt"
    first90.write_text(text[:boundary], encoding="utf-8")

    start = time.perf_counter()
    if gpu:
        nanogpt_recipe, settings, compile = gpu_recipes(device, args.quick)
        walls = {
            "nanoGPT": train_nanogpt(nanogpt, out / "nanogpt", nanogpt_recipe, args.force),
            "ours, first 90%": train_ours(first90, out / "ours-first90", settings, device, compile, args.force),
        }
    else:
        (nanogpt_recipe, settings), compile = cpu_recipes(args.quick), False
        walls = {
            "nanoGPT": train_nanogpt(nanogpt, out / "nanogpt", nanogpt_recipe, args.force),
            "ours": train_ours(data, out / "ours", settings, device, compile, args.force),
            "ours, first 90%": train_ours(first90, out / "ours-first90", settings, device, compile, args.force),
        }
    task = get_task("shakespeare", data=str(data), **{k: v for k, v in settings.items() if k == "block_size"})
    check_tokens(task, nanogpt, boundary)
    nano_logits, record = nanogpt_model(nanogpt, out / "nanogpt", device)
    models = {"ours, first 90%": our_model(out / "ours-first90", first90, device)}
    if not gpu:
        models["ours"] = our_model(out / "ours", data)
    vocabulary = [task.decode([i]) for i in range(task.vocab_size)]
    for name, (_, chars) in models.items():
        if chars != vocabulary:
            fail(f"the {name} run's tokenizer maps ids to other characters than the whole text's")

    heldout = task.evaluation_windows(HELDOUT, None)
    block = task.block_size
    every = torch.arange(boundary, len(task.cache.tokens) - block, block)  # one token per character (checked)
    ours_in_last_10 = ("our held-out windows in the last 10%", heldout[heldout[:, 0] >= boundary])
    every_in_last_10 = ("every window of the last 10% (nanoGPT's validation part)", torch.stack((every, 0 * every), 1))
    chunk_size = task.params.chunk_size
    rows = []
    for model_name, (label, windows) in (
        ("ours", ours_in_last_10),
        ("ours, first 90%", ours_in_last_10),
        ("ours, first 90%", every_in_last_10),
    ):
        if model_name not in models:
            continue
        nano = target_losses(nano_logits, task.window_batch, windows, device)
        ours = target_losses(models[model_name][0], task.window_batch, windows, device)
        rows.append((model_name, label, len(windows), compare(ours, nano, windows[:, 0] // chunk_size)))

    mine = "ours-first90" if gpu else "ours"
    own = json.loads(RunLayout(out / mine).final.read_text())[metric_key(HELDOUT, "loss")]
    torch_line = f"torch {torch.__version__}, Python {platform.python_version()}, {torch.get_num_threads()} threads"
    where = torch.cuda.get_device_name() if device.startswith("cuda") else device
    compiled = "both compiled" if compile else "neither compiled"
    print(f"gpt-from-scratch {gpt_core.__version__}, {torch_line}, {where}; nanoGPT's {args.recipe} recipe, {compiled}"
          + (" (--quick: not a result)" if args.quick else ""))  # fmt: skip
    print(f"text: {len(text):,} characters; boundary at character {boundary:,}; windows of {block}")
    print("tokenisation: nanoGPT's train.bin + val.bin equal our token stream, id for id; vocabularies identical")
    print(f"nanoGPT's checkpoint: iteration {record['iter_num']}, its own validation estimate "
          f"({record['eval_iters']} random batches) {record['best_val_loss']:.4f}")  # fmt: skip
    which = "first-90%" if gpu else "default"
    print(f"our {which} run's own held-out loss (every held-out window, final.json): {own:.4f}")
    for name, wall in walls.items():
        print(f"{name}: " + (f"trained in {wall:.1f} s" if wall is not None else f"read back from {out}"))
    ours_name = "ours, first 90%" if gpu else "ours"
    if walls[ours_name] is not None and walls["nanoGPT"] is not None:
        print(f"wall time, {ours_name} / nanoGPT: {walls[ours_name] / walls['nanoGPT']:.2f}")
    print()
    print("| model | shared characters | ours (nats/char) | nanoGPT (nats/char) "
          "| nanoGPT - ours, 95% interval (bootstrap over chunks) |")  # fmt: skip
    print("|---|---|---|---|---|")
    for model_name, label, n, c in rows:
        print(f"| {model_name} | {c.characters:,}: {label} ({n:,} windows, {c.chunks} chunks) | **{c.ours:.4f}** "
              f"| **{c.nanogpt:.4f}** | {c.nanogpt - c.ours:+.4f} [{c.low:+.4f}, {c.high:+.4f}]; "
              f"ours lower on {c.ours_lower} of {c.chunks} chunks |")  # fmt: skip
    print(f"\n{time.perf_counter() - start:.0f} s in all")


if __name__ == "__main__":
    main()
