"""`gpt-train export`: a trained run as a Hugging Face GPT-2 directory that transformers loads. A run whose
architecture GPT-2 cannot express (rope or no positions, no LayerNorm, no biases, ...) is refused, naming the
settings."""

from __future__ import annotations

from pathlib import Path

import click

from gpt_tasks.text import BpeTokenizer
from gpt_train.cli.group import CONTEXT
from gpt_train.config import RunConfig
from gpt_train.hf import HFError, write_directory
from gpt_train.loading import load_run
from gpt_train.run_names import RUN

FORMATS = ("hf",)


def run_tokenizer(config: RunConfig) -> BpeTokenizer | None:
    """The BPE a text run trained with (kept in its directory), or None: a character or byte vocabulary,
    or a task's own symbols, has no Hugging Face tokenizer file."""
    if config.task_params.get("tokenizer") != "bpe" or not config.task_params.get("tokenizer_file"):
        return None
    path = Path(config.task_params["tokenizer_file"])
    try:
        return BpeTokenizer(path.read_bytes())
    except (OSError, ValueError) as error:
        raise HFError(f"cannot read the run's tokenizer {path} ({error})") from None


@click.command(context_settings=CONTEXT)
@click.argument("run_dir", metavar="RUN", type=RUN)
@click.argument("out", type=click.Path(path_type=Path))
@click.option(
    "--format",
    "format_",
    type=click.Choice(FORMATS),
    default="hf",
    show_default=True,
    help="hf: a Hugging Face GPT-2 directory (config.json, model.safetensors, tokenizer for BPE text).",
)
def export(run_dir: Path, out: Path, format_: str) -> None:
    """Write a trained run as a Hugging Face GPT-2 model directory OUT (new or empty).

    OUT holds config.json and model.safetensors: transformers.GPT2LMHeadModel.from_pretrained(OUT)
    loads it. A BPE text run also gets tokenizer.json and tokenizer_config.json, so that
    `gpt-train sample --hf OUT` samples from it. Other runs (a task's own symbols, a character or byte
    vocabulary) have no Hugging Face tokenizer: transformers runs them on token ids, and
    `gpt-train sample RUN_DIR` samples from them as text.

    \b
    Examples:
      gpt-train export sort --format hf exported/sort
      gpt-train export runs/text-bpe --format hf exported/text
    """
    saved = load_run(run_dir, "cpu", with_kernels=False)  # the weights are all an export needs
    tokenizer = run_tokenizer(saved.config)
    written = write_directory(saved.model, out, tokenizer)
    click.echo(f"wrote {', '.join(path.name for path in written)} to {out}")
    if tokenizer is None:
        click.echo(f"no tokenizer exported (not a BPE text run): sample with `gpt-train sample {run_dir}`")
