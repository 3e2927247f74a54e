"""The commands on a trained model: `gpt-train eval`, `sample` (or from a GPT-2 directory) and `export` (as a
Hugging Face GPT-2 directory)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import click
import torch

from gpt_core import generate
from gpt_tasks.text.tokenizer import BpeTokenizer
from gpt_train.cli.formatting import format_metrics, sampled_note
from gpt_train.cli.group import CONTEXT, CommandError, out_of_memory
from gpt_train.cli.options import DEVICE_HELP, SEED, TRUST_KERNELS_OPTION, named_path, set_option
from gpt_train.config import RunConfig, field_types, parse_assignments, route, task_class
from gpt_train.devices import resolve_device
from gpt_train.hf import HFError, Pretrained, write_directory
from gpt_train.loading import load_run
from gpt_train.prompts import PromptError, answer_tokens, cut_answer_note, prompt_generator, untrained_prompt_note
from gpt_train.record import not_finished
from gpt_train.runs import opening_flags
from gpt_train.trainer import checked_metrics
from gpt_viz import SPLITS, RunLayout, metric_key
from gpt_viz.run_names import RUN


@click.command("eval", context_settings=CONTEXT)
@click.argument("run_dir", metavar="RUN", type=RUN)
@click.option("--split", type=click.Choice(SPLITS[::-1]), default="heldout", show_default=True)
@set_option("Override a task parameter for this evaluation, e.g. --set length=8.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    help="Score a fixed sample of this many examples. [default: all; 20,000 where the split is too large to list]",
)
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the metrics as JSON, named as the task names them (exact_match; final.json: heldout_exact_match), "
    "with the checkpoint's step; a metric that is not finite is null.",
)
@TRUST_KERNELS_OPTION
def evaluate(run_dir: Path, split: str, assignments, limit, device, as_json, trust_kernels) -> None:
    """Evaluate a saved run on a split (the whole split unless --limit; a fixed sample of 20,000 where the split is
    too large to list, as sort's at length 7 and more), in float32, as the run's own evaluations were, whatever
    dtype it trained in.

    \b
    Examples:
      gpt-train eval sort                               # the newest sort run under ./runs
      gpt-train eval runs/sort-rope --set length=8      # length generalisation
      gpt-train eval modadd --split train --json
    """
    target = resolve_device(device)
    loaded = load_run(run_dir, target, trust_kernels)
    config, model = loaded.config, loaded.model
    values, task_type = parse_assignments(assignments), task_class(config.task)
    params = field_types(task_type.Params)
    others = sorted(key for key in values if key.removeprefix("task.") not in params)
    if others:
        takes = ", ".join(sorted(set(params) - set(task_type.eval_fixed))) or "none"
        raise CommandError(f"eval --set takes the {config.task} task's parameters ({takes}), not {', '.join(others)}")
    task = config.build_task(route(values, task_type)["task"])  # built once: building can hash the whole split
    why = not_finished(RunLayout(loaded.run_dir), loaded.step)
    if why is not None:
        click.echo(f"note: {loaded.run_dir} is {why}: scoring its checkpoint of step {loaded.step:,}", err=True)
    try:
        metrics = checked_metrics(task, task.evaluate(model, split, target, limit))
    except ValueError as error:
        raise CommandError(str(error)) from None
    if limit is None and (sampled := sampled_note(task, split)):
        click.echo(f"note: the {split} split is too large to list: scored {sampled}", err=True)
    if limit is not None and metrics.get("examples", limit) < limit:
        scored = f"{int(metrics['examples']):,}"
        click.echo(f"note: scored {scored} examples, all the task evaluates on the {split} split", err=True)
    if as_json:
        unreadable = sorted(name for name, value in metrics.items() if not math.isfinite(value))
        if unreadable:
            click.echo(f"note: {', '.join(unreadable)} not finite: null in the JSON", err=True)
        metrics = {name: value if math.isfinite(value) else None for name, value in metrics.items()}
        click.echo(json.dumps({"step": loaded.step} | metrics, indent=2, allow_nan=False))
    else:
        keyed = {metric_key(split, name): value for name, value in metrics.items()}
        click.echo(f"{config.task} {split}: {format_metrics(keyed)}")


@click.command(context_settings=CONTEXT)
@click.argument("run_dir", metavar="RUN", type=RUN, required=False)
@click.option(
    "--hf", "hf_dir", type=click.Path(), callback=named_path, help="Sample from a Hugging Face GPT-2 directory instead."
)
@click.option("--prompt", multiple=True, help="Prompt text (repeatable). [default: the task's example prompts]")
@click.option(
    "--max-new-tokens",
    type=click.IntRange(min=1),
    help="Tokens to generate; past the model's positions (learned or randomized), the last half of them is the new "
    "prompt. [default: a prompt-answer task's answer (sort: one token per digit); text: fill the block, at least "
    "half a block]",
)
@click.option(
    "--temperature",
    type=click.FloatRange(min=0.0),
    default=0.0,
    show_default=True,
    help="0 is greedy; higher is more random.",
)
@click.option(
    "--top-k",
    type=click.IntRange(min=1),
    help="Sample only from the k most likely tokens (and any tied with the k-th).",
)
@click.option("--no-cache", is_flag=True, help="Re-run the whole prefix each step instead of using the KV cache.")
@click.option(
    "--seed",
    type=SEED,
    default=0,
    show_default=True,
    help="Seed for sampling (above temperature 0): a prompt's sample depends on it and on that prompt alone; a prompt "
    "given again draws another.",
)
@click.option("--device", default="auto", show_default=True, help=DEVICE_HELP)
@TRUST_KERNELS_OPTION
def sample(
    run_dir: Path, hf_dir, prompt, max_new_tokens, temperature, top_k, no_cache, seed, device, trust_kernels
) -> None:
    """Generate text from a saved run, or with --hf from a GPT-2 directory and its tokenizer.json: each
    prompt, then " -> " and what the model wrote after it.

    \b
    Examples:
      gpt-train sample sort --prompt 902714
      gpt-train sample shakespeare --prompt "ROMEO:" --max-new-tokens 300 --temperature 0.8 --top-k 20
      gpt-train sample --hf gpt2/ --prompt "Hello, I'm a language model," --max-new-tokens 40
    """
    if (run_dir is None) == (hf_dir is None):
        raise CommandError("sample takes a RUN_DIR or --hf DIR (one of them)")
    if hf_dir is not None and not prompt:
        raise CommandError("sample --hf needs --prompt")
    target = resolve_device(device)
    if hf_dir is not None:
        task = Pretrained(hf_dir, target)
        model = task.model
    else:
        loaded = load_run(run_dir, target, trust_kernels)
        task, model = loaded.config.build_sampler(), loaded.model
    if top_k is not None and temperature == 0:
        click.echo("note: --top-k has no effect at temperature 0 (greedy); give a --temperature above 0", err=True)
    try:
        prompts = prompt or task.example_prompts()
    except ValueError as error:  # a text run whose corpus is gone has no held-out text to prompt with
        raise CommandError(str(error)) from None
    seen: list[str] = []  # the prompts sampled so far: a repeated one draws anew
    for text in prompts:
        if not text:
            raise CommandError("--prompt must not be empty")
        try:
            ids = torch.tensor([task.encode(text)], device=target)
            answer = answer_tokens(task, model, ids.shape[1])  # refuses a prompt-answer prompt past the positions
        except (ValueError, PromptError) as error:
            shown = repr(text) if len(text) <= 60 else f"{text[:40]!r}... ({len(text):,} characters)"
            words = str(error) if len(str(error)) <= 300 else str(error)[:297] + "..."  # its characters, say
            raise CommandError(f"prompt {shown}: {words}") from None
        n_new = max_new_tokens or answer
        if note := untrained_prompt_note(task, ids[0].tolist()):
            click.echo(f"note: {note}", err=True)
        if not max_new_tokens and (cut := cut_answer_note(task, model, ids.shape[1], answer)):
            click.echo(f"note: {cut}", err=True)
        limit = model.config.position_limit
        if limit is not None and ids.shape[1] > limit:
            click.echo(f"note: the prompt is {ids.shape[1]} tokens; the model reads its last {limit}", err=True)
        generator = prompt_generator(target, text, seed, seen.count(text))
        seen.append(text)
        try:
            out = generate(
                model, ids, n_new, temperature, top_k, use_cache=not no_cache, generator=generator, slide=True
            )
        except ValueError as error:
            raise CommandError(str(error)) from None
        except RuntimeError as error:  # a rope or no-position model caches every token asked for
            if (words := out_of_memory(error)) is None:
                raise
            raise CommandError(f"out of memory ({words}); fewer --max-new-tokens need less", exit_code=1) from None
        click.echo(f"{text} -> {task.decode(out[0, ids.shape[1] :].tolist())}")


def run_tokenizer(config: RunConfig) -> BpeTokenizer | None:
    """The BPE a text run trained with (kept in its directory), or None: no other vocabulary has a HF file."""
    if config.task_params.get("tokenizer") != "bpe" or not config.task_params.get("tokenizer_file"):
        return None
    path = Path(config.task_params["tokenizer_file"])
    try:
        return BpeTokenizer(path.read_bytes())
    except (OSError, ValueError) as error:
        raise HFError(f"cannot read the run's tokenizer {path} ({error})") from None


LOGIT_SLOTS = ("attention", "layer_norm", "gelu")
"""The slots a GPT's logits pass through (the loss, sampling and a hooked pattern's weights do not)."""


@click.command(context_settings=CONTEXT)
@click.argument("run_dir", metavar="RUN", type=RUN)
@click.argument("out", type=click.Path(), callback=named_path)
def export(run_dir: Path, out: Path) -> None:
    """Write a trained run as a Hugging Face GPT-2 model directory OUT (new or empty).

    OUT holds config.json and model.safetensors: transformers.GPT2LMHeadModel.from_pretrained(OUT)
    loads it. A BPE text run also gets tokenizer.json and tokenizer_config.json, so that
    `gpt-train sample --hf OUT` samples from it. Other runs (a task's own symbols, a character or byte
    vocabulary) have no Hugging Face tokenizer: transformers runs them on token ids, and
    `gpt-train sample RUN_DIR` samples from them as text.

    \b
    Examples:
      gpt-train export sort exported/sort
      gpt-train export text exported/text     # the newest text run under ./runs
    """
    saved = load_run(run_dir, "cpu", with_kernels=False)  # verified kernels compute gpt-core's own to 1e-12
    unverified = [slot for slot in saved.config.unverified_kernels if slot in LOGIT_SLOTS]
    if unverified:
        chosen = ", ".join(f"{slot}={saved.config.kernels[slot]}" for slot in unverified)
        raise HFError(f"cannot export as GPT-2: the run's logits came from unverified kernels ({chosen}), not GPT-2's")
    tokenizer = run_tokenizer(saved.config)
    written = write_directory(saved.model, out, tokenizer)
    why = not_finished(RunLayout(saved.run_dir), saved.step)
    unfinished = "" if why is None else f" (the weights of step {saved.step:,}: the run is {why})"
    click.echo(f"wrote {', '.join(path.name for path in written)} to {out}{unfinished}")
    if tokenizer is None:
        sample = f"gpt-train sample {run_dir}{opening_flags(saved.config)}"
        click.echo(f"no tokenizer exported (not a BPE text run): sample with `{sample}`")
