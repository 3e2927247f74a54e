"""8. Tokenizers on tiny-shakespeare: characters vs bytes vs byte-level BPE of a few vocabulary sizes, at the
same compute, ranked by bits per character on the same held-out chunks.

    GPT_DATA=tinyshakespeare.txt python experiments/exp_text.py   # else the shakespeare task's download
    python experiments/exp_text.py --quick

Every run is `gpt-train run --task shakespeare --set tokenizer=...`: the shakespeare task's chunks and
split (salt b"shakespeare"), so every tokenizer is scored on the same held-out chunks, every token of
each but its first. Same compute: the default model (4 layers, 4 heads, 128 dims), 2,000 steps of 12
windows of 64 tokens; only the vocabulary (the embedding and output layer) differs. A BPE token
covers several characters, so the same steps show the model more text and a longer context.
"""

from __future__ import annotations

import json
import math
import time

from common import Context, context_from_args, gpt_train, markdown_table, report, shakespeare_path, train_all

import gpt_viz
from gpt_core import GPT, GPTConfig
from gpt_train.config import RunConfig
from gpt_viz import HELDOUT, metric_key

FULL = {
    "char": ["--set", "tokenizer=char"],
    "byte": ["--set", "tokenizer=byte"],
    "BPE 512": ["--set", "tokenizer=bpe", "--set", "vocab_size=512"],
    "BPE 1024": ["--set", "tokenizer=bpe", "--set", "vocab_size=1024"],
    "BPE 2048": ["--set", "tokenizer=bpe", "--set", "vocab_size=2048"],
}
QUICK = {"char": FULL["char"], "byte": FULL["byte"], "BPE 300": ["--set", "tokenizer=bpe", "--set", "vocab_size=300"]}
QUICK_SETTINGS = ["--steps", "20", "--set", "n_layer=1", "--set", "eval_every=10", "--set", "eval_limit=20"]
SAMPLE_CHARS = 240  # about this many characters of each sample, whatever the tokenizer
SAMPLING = ["--temperature", "0.8", "--top-k", "20", "--seed", "0"]


def slug(name: str) -> str:
    return "text-" + name.lower().replace(" ", "")


def key(name: str) -> str:
    return metric_key(HELDOUT, name)


QUESTION = (
    "Which tokenizer models tiny-shakespeare best for the same model and the same 2,000 steps, scored on the same "
    "held-out characters?"
)


def meaning(bits: dict[str, float], chars_per_token: dict[str, float]) -> str:
    """The table in words, with its numbers; empty unless the full set of tokenizers ran."""
    if not {"char", "byte", "BPE 2048"} <= bits.keys():
        return ""
    best = min(bits, key=bits.get)
    return (
        f"**What it means.** Per character, {best} models the text best: {bits[best]:.3f} bits/char against "
        f"char's {bits['char']:.3f}, and each step shows it {chars_per_token[best]:.2f} times as much text "
        f"({chars_per_token[best]:.2f} characters per token). char and byte are the same sequences on this ASCII "
        f"text, renumbered ({bits['char']:.3f} and {bits['byte']:.3f}): their gap is run-to-run variation.\n\n"
    )


def run(ctx: Context):
    start = time.perf_counter()
    tokenizers = QUICK if ctx.quick else FULL
    data = shakespeare_path(ctx)
    settings = QUICK_SETTINGS if ctx.quick else []
    specs = {slug(name): ["--task", "shakespeare", "--data", str(data), *flags, *settings]
             for name, flags in tokenizers.items()}  # fmt: skip
    runs = train_all(ctx, specs)
    held_out = {name: RunConfig.load(runs[slug(name)].run_dir).build_task().chunks(HELDOUT).tolist()
                for name in tokenizers}  # fmt: skip
    assert all(chunks == held_out["char"] for chunks in held_out.values()), "tokenizers held out different chunks"
    rows, samples, bits, per_token = [], [], {}, {}
    for name in tokenizers:
        result = runs[slug(name)]
        final, config = result.final, json.loads(result.layout.config.read_text())
        model = GPTConfig.from_dict(config["model"])
        chars_per_token = final[key("loss")] / math.log(2) / final[key("bits_per_char")]
        bits[name], per_token[name] = final[key("bits_per_char")], chars_per_token
        seen = final["step"] * config["train"]["batch_size"] * model.block_size
        rows.append([
            name, f"{model.vocab_size:,}", f"{GPT(model).num_parameters():,}", f"{final[key('bits_per_char')]:.4f}",
            f"{final[key('bits_per_byte')]:.4f}", f"{final[key('loss')]:.4f}", f"{chars_per_token:.3f}",
            f"{final[key('examples')]:,.0f}",
            f"{seen:,} / {seen * chars_per_token:,.0f}", f"{result.wall:.0f}",
        ])  # fmt: skip
        n_new = math.ceil(SAMPLE_CHARS / chars_per_token)
        text = gpt_train(ctx, "sample", result.run_dir, "--prompt", "ROMEO:", "--max-new-tokens", str(n_new),
                         *SAMPLING, "--device", "cpu").stdout  # fmt: skip
        samples.append(f"**{name}** ({n_new} tokens):\n\n```\n{text.strip()}\n```")
    header = ["tokenizer", "vocabulary", "parameters", "held-out bits/char", "bits/byte", "loss (nats/token)",
              "chars/token", "held-out windows", "training tokens / chars seen", "wall s"]  # fmt: skip
    body = markdown_table(header, rows)
    chunk_size = json.loads(runs[slug("char")].layout.config.read_text())["task_params"]["chunk_size"]
    body += (
        "\n\nHeld-out figures are over every held-out window of the shakespeare split: the same "
        f"{len(held_out['char'])} chunks of {chunk_size:,} characters for every tokenizer (checked), every token of a "
        "chunk but its first scored once. Bits per character are total bits over the characters the scored tokens "
        "decode to, so they compare across tokenizers; chars/token is the held-out loss in bits per token over bits "
        "per character. One seed (1337) each.\n\n"
    )
    body += meaning(bits, per_token)
    figure = gpt_viz.compare_runs([runs[slug(n)].run_dir for n in tokenizers], key("bits_per_char"),
                                  labels=list(tokenizers))  # fmt: skip
    gpt_viz.save_figure(figure, ctx.out / "text_bits_per_char.png")
    body += "![held-out bits per character by step](text_bits_per_char.png)\n\n"
    body += f"Samples (prompt `ROMEO:`, about {SAMPLE_CHARS} characters, temperature 0.8, top-k 20, seed 0):\n\n"
    body += "\n\n".join(samples)
    commands = [f"gpt-train run --task shakespeare --data tinyshakespeare.txt {' '.join(flags)}"
                + (" " + " ".join(settings) if settings else "") for flags in tokenizers.values()]  # fmt: skip
    commands.append("gpt-train sample RUN_DIR --prompt ROMEO: --max-new-tokens N " + " ".join(SAMPLING))
    wall = time.perf_counter() - start
    return report(ctx, "text", "8. Tokenizers on tiny-shakespeare", commands, body, wall, QUESTION)


if __name__ == "__main__":
    run(context_from_args(description=__doc__))
