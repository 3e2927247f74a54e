# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # From attention to a sorting circuit
#
# This notebook writes a transformer's central piece by hand, checks it against PyTorch, assembles a GPT from
# gpt-core, trains it to sort six digits while its loss curve draws, writes a hook that reads and removes one
# attention head, and then takes the trained model apart until it can say, from numbers it printed itself, how
# the model sorts. It runs top to bottom on a 2-core CPU in a few minutes.
#
# Read beside it: [`gpt_core/model.py`](../../packages/gpt-core/src/gpt_core/model.py), the model top to bottom,
# and [`gpt_core/reference.py`](../../packages/gpt-core/src/gpt_core/reference.py), each hand-written piece as
# its definition. When you want to write the pieces yourself, graded: `gpt-train learn` ([learn.md](../learn.md)).

# %%
import io
import math
import subprocess
import sys
import time
import warnings
from pathlib import Path

import torch
from IPython.display import DisplayHandle, Image, display
from matplotlib.figure import Figure

warnings.filterwarnings("ignore", message="IProgress not found")  # tqdm's, on import: gpt-train's bars are off here
torch.manual_seed(0)
CPU = torch.device("cpu")


def png(figure):
    """A matplotlib figure as a PNG for the notebook (the figures here are drawn off screen, as gpt-viz's are)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return Image(buffer.getvalue())


def show(figure):
    display(png(figure))

# %% [markdown]
# ## 1. Attention in a few lines
#
# Each query scores every key by a dot product scaled by $1/\sqrt{d}$; a causal mask hides the keys after the
# query; a softmax turns each row of scores into weights; the output is the weighted sum of the values:
#
# $$\mathrm{attention}(q, k, v) = \mathrm{softmax}\left(\frac{q k^\top}{\sqrt{d}} + M\right) v,
# \qquad M_{ij} = 0 \text{ if } j \le i, \; -\infty \text{ otherwise.}$$

# %%
def attention(q, k, v):
    """q, k, v: (B, H, T, d) -> (B, H, T, d), causal."""
    T, d = q.shape[-2], q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, H, T, T)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # True above the diagonal: keys after the query
    scores = scores.masked_fill(future, float("-inf"))
    scores = scores - scores.amax(dim=-1, keepdim=True)  # softmax, shifted so exp cannot overflow
    weights = scores.exp() / scores.exp().sum(dim=-1, keepdim=True)
    return weights @ v


q, k, v = (torch.randn(2, 4, 7, 16, dtype=torch.float64, requires_grad=True) for _ in range(3))
ours = attention(q, k, v)
theirs = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
print(f"forward:   largest |ours - PyTorch's| = {(ours - theirs).abs().max().item():.1e}")
cotangent = torch.randn_like(ours)
grads_ours = torch.autograd.grad(ours, (q, k, v), cotangent)
grads_theirs = torch.autograd.grad(theirs, (q, k, v), cotangent)
worst = max((a - b).abs().max().item() for a, b in zip(grads_ours, grads_theirs, strict=True))
print(f"gradients: largest |ours - PyTorch's| = {worst:.1e}")

# %% [markdown]
# gpt-core's reference kernels are definitions of exactly this kind, one for each piece of the model; its fast
# kernels compute the same numbers with hand-derived backward passes. `gpt-train verify` pins a kernel set to
# PyTorch in float64, forward and backward, on odd shapes, single queries, queries offset as in cached decoding
# and 133-position sequences:

# %%
verify = subprocess.run([sys.executable, "-m", "gpt_train", "verify", "--kernels", "reference", "--seed", "0"],
                        capture_output=True, text=True, check=True)  # fmt: skip
print(verify.stdout)

# %% [markdown]
# ## 2. A GPT from gpt-core
#
# A token embedding and a table of position vectors, a stack of pre-norm blocks (each adds its attention, then
# its MLP, to the residual stream), a final LayerNorm and an output head. The sort task's default model:

# %%
from gpt_core import GPT, REFERENCE_KERNELS, GPTConfig

config = GPTConfig(vocab_size=10, block_size=11, n_layer=2, n_head=4, n_embd=64)
model = GPT(config)
print(f"{model.num_parameters():,} parameters; hook points of block 0:")
print([name for name in model.hook_names() if name.startswith("blocks.0.")])

reference = GPT(config, REFERENCE_KERNELS)  # the same weights, computed with the plain definitions
reference.load_state_dict(model.state_dict())
idx = torch.randint(10, (3, 11))
gap = (model(idx).logits - reference(idx).logits).abs().max().item()
print(f"fast vs reference kernels on the same weights: largest |logit difference| {gap:.1e} (float32 rounding)")

# %% [markdown]
# ## 3. Train it to sort
#
# Read six digits, write them in sorted order. A stable hash of each input puts a quarter of the 10^6 possible
# inputs on the held-out side, which training never sees. This is the default run (`gpt-train run --task sort`,
# the same settings and seed), trained here in the notebook's own process, except that it scores a fixed sample
# of 20,000 held-out sequences at the end instead of all 250,050, to keep the notebook quick.
#
# gpt-train's `Trainer` runs the loop: draw a batch, take a step, and every so often score held-out sequences
# (`evaluate`). The subclass below keeps each step's loss and, at each evaluation, prints a line and draws the
# two curves again in place: the training loss of every step, and the held-out exact match so far.

# %%
from gpt_train import Trainer, new_run
from gpt_train.distributed import Rank


def training_curves(losses, scores, steps):
    """Every step's training loss, and the held-out exact match of every evaluation so far."""
    figure = Figure(figsize=(10, 3.2), layout="constrained")
    left, right = figure.subplots(1, 2)
    left.plot(range(1, len(losses) + 1), losses, linewidth=0.8)
    left.set(xlim=(0, steps), yscale="log", xlabel="step", ylabel="training loss")
    right.plot([step for step, _ in scores], [exact for _, exact in scores], marker=".")
    right.set(xlim=(0, steps), ylim=(-0.02, 1.02), xlabel="step", ylabel="held-out exact match")
    return figure


class LiveTrainer(Trainer):
    """gpt-train's Trainer, printing a line and drawing the curves again at each evaluation."""

    def __init__(self, run):
        self.losses, self.scores = [], []  # every step's loss; (step, held-out exact match) at each evaluation
        self.picture, self.began = DisplayHandle(), time.perf_counter()
        super().__init__(run, quiet=True, on_step=self.record_loss)

    def record_loss(self, step):
        self.losses.append(self.loss)  # the loss of the step just taken

    def evaluate(self, limit):
        metrics = super().evaluate(limit)
        exact, examples = metrics["heldout_exact_match"], metrics["heldout_examples"]
        self.scores.append((self.step, exact))
        print(f"step {self.step:>5,}: loss {self.losses[-1]:.4f}, held-out exact match {exact:.4f} "
              f"over {examples:,.0f} sequences ({time.perf_counter() - self.began:.0f} s)")  # fmt: skip
        picture = png(training_curves(self.losses, self.scores, self.settings.steps))
        if len(self.scores) == 1:
            self.picture.display(picture)
        else:
            self.picture.update(picture)  # the same picture, redrawn in place
        return metrics


run_dir = Path("runs/tutorial-sort")
training = new_run("sort", {"final_eval_limit": 20_000}, run_dir, force=True, device=CPU, rank=Rank())
try:
    outcome = LiveTrainer(training).run()
finally:
    training.close()  # the run directory is locked while it trains
assert outcome.reason == "finished", outcome.detail
print(f"{outcome.step} steps; checkpoint and metrics in {run_dir}")

# %% [markdown]
# ## 4. Its attention
#
# `run_with_cache` records every named activation of one forward pass; `blocks.{i}.pattern` is layer i's
# attention, (B, H, T, T). Each row is a position reading the earlier ones; the red lines split the six prompt
# digits from the answer written after them.

# %%
from gpt_train import load_run
from gpt_viz import attention_grid, attention_map

run = load_run(run_dir)  # the model, its task and its config, read back from the run directory
model, task = run.model, run.task
prompt = "503718"
answer = "".join(sorted(prompt))
ids = torch.tensor([task.encode(prompt + answer)[:-1]])  # the last answer digit is written, never read
with torch.no_grad():
    logits, cache = model.run_with_cache(ids, names=[f"blocks.{i}.pattern" for i in range(model.config.n_layer)])
tokens = task.token_labels(ids[0].tolist())
print("greedy answer:", task.decode(logits[0, task.prompt_length - 1 :].argmax(-1).tolist()))
for layer in range(model.config.n_layer):
    show(attention_grid(cache[f"blocks.{layer}.pattern"][0].numpy(), tokens, layer=layer,
                        prompt_length=task.prompt_length))  # fmt: skip

# %% [markdown]
# ## 5. A hook, by hand
#
# `run_with_cache` is built on hooks, and the analyses below are too. `model.hooks({name: fn})` calls
# `fn(activation, name)` at that hook point on every forward inside the with-block: a hook that returns None
# only reads, one that returns a tensor of the same shape replaces the activation from there on.
#
# First, read one head's attention on the prompt above (`blocks.{layer}.pattern`, (B, H, T, T)), and say, for
# each position that writes an answer digit, where it looks most:

# %%
LAYER, HEAD = 0, 0  # any head of the model: change them and run on
seen = {}


def read_pattern(pattern, name):
    seen[name] = pattern[0, HEAD]  # (T, T), the first sequence; returning None leaves the forward as it was


with torch.no_grad(), model.hooks({f"blocks.{LAYER}.pattern": read_pattern}):
    model(ids)
pattern = seen[f"blocks.{LAYER}.pattern"]
show(attention_map(pattern.numpy(), tokens, f"layer {LAYER}, head {HEAD}", prompt_length=task.prompt_length))
for query in range(task.prompt_length - 1, len(tokens)):
    key = int(pattern[query].argmax())
    written = answer[query - task.prompt_length + 1]
    print(f"position {query} (token {tokens[query]}) writes {written}: it reads position {key} ({tokens[key]}) most, "
          f"weight {pattern[query, key]:.2f}")  # fmt: skip

# %% [markdown]
# Then remove the head. `blocks.{layer}.z` is each head's output before the output projection, (B, H, T, d); the
# projection adds up the heads' slices, so a hook that zeroes one slice removes that head and nothing else.
# The task's own scoring (greedy answers, each right only if every digit is) runs on a fixed sample of held-out
# sequences, once as the model is and once with the hook set:

# %%
EXAMPLES = 2000  # held-out sequences each measurement scores, the same fixed sample every time


def zero_head(z, name):
    z = z.clone()  # (B, H, T, d); a copy, so the forward's own tensor is left as it was
    z[:, HEAD] = 0.0
    return z  # returned: it replaces the activation from here on


clean = task.evaluate(model, "heldout", CPU, EXAMPLES)["exact_match"]
with model.hooks({f"blocks.{LAYER}.z": zero_head}):
    zeroed = task.evaluate(model, "heldout", CPU, EXAMPLES)["exact_match"]
print(f"held-out exact match over {EXAMPLES:,} sequences: {clean:.4f}; with head {LAYER}.{HEAD} zeroed: {zeroed:.4f}")

# %% [markdown]
# ## 6. Which heads does it need?
#
# `ablate_each_head` does the same for every head: removes it alone (zeroes its `z`, as above, or replaces it by
# its mean over the examples) and scores exact match on the same fixed sample; then it removes each layer's
# heads together. For the head chosen above, its zero ablation must be exactly the hook's number: the cell
# checks that.

# %%
from gpt_train.lab import ablate_each_head, findings, head_reads, logit_lens, patch
from gpt_viz.inspect_pictures import head_ablation_heatmap, head_reads_picture, logit_lens_picture, patching_picture

heads = ablate_each_head(task, model, CPU, EXAMPLES)
show(head_ablation_heatmap(heads.to_json()))
print("\n".join(findings.head_findings(heads.to_json())))
assert heads.zero[LAYER][HEAD] == zeroed, f"ablate_each_head: {heads.zero[LAYER][HEAD]}, the hook: {zeroed}"
print(f"head {LAYER}.{HEAD} zeroed: {heads.zero[LAYER][HEAD]:.4f} by ablate_each_head, {zeroed:.4f} by the hook")

# %% [markdown]
# ## 7. The logit lens: where does the answer appear?
#
# Decode the residual stream at each depth through the final LayerNorm and the output head, as if the model
# stopped there, and score the answers.

# %%
lens = logit_lens(task, model, CPU, EXAMPLES)
show(logit_lens_picture(lens.to_json()))
for depth, exact in zip(lens.depths, lens.exact_match, strict=True):
    print(f"{depth:>14}: exact match {exact:.4f}")
print("\n".join(findings.logit_lens_findings(lens.to_json())))

# %% [markdown]
# ## 8. Patching: which position carries the answer?
#
# Take pairs of inputs that differ in their first digit, run the corrupted one, and copy one activation from the
# clean run at one position: the share of the clean-vs-corrupted logit difference that comes back says where the
# information that tells them apart sits. (Patching a layer's input at the corrupted digit itself restores
# everything, trivially: that is the digit.)

# %%
patches = {}
for point in ("resid_pre", "attn_out", "mlp_out"):
    patches[point] = patch(task, model, CPU, point, EXAMPLES).to_json()
    if point == "resid_pre":
        show(patching_picture(patches[point]))
    print("\n".join(findings.patching_findings(patches[point])))

# %% [markdown]
# ## 9. What each head reads
#
# From each position that writes an answer digit, a head's mean attention on each input digit, by that digit's
# value (columns) and the value just written (rows); 1.0 is attention spread evenly over the six inputs.

# %%
reads = head_reads(task, model, CPU, EXAMPLES)
show(head_reads_picture(reads.to_json()))
print("\n".join(findings.reads_findings(reads.to_json(), findings.minor_layers(heads.to_json()))))

# %% [markdown]
# ## 10. How this model sorts
#
# Each line printed above is a finding with the figure behind it, by rules stated in
# `gpt_train/lab/findings.py`: a layer is unused when removing all its heads moves exact match by at most 0.1%,
# nearly unused at most 1%, and a head is needed when removing it alone costs more than 1%; the answer appears
# at the first depth that reaches 99% of the model's exact match; a position carries the answer when patching it
# restores at least 90% of the logit difference; a head compares when it reads the digits at or above the one
# just written at least twice as much as those below (or the reverse).
#
# The cell below puts the findings together. Each sentence is computed from the records above by those rules,
# so it describes the model this notebook trained, whatever its numbers.

# %%
heads_record, lens_record, reads_record = heads.to_json(), lens.to_json(), reads.to_json()
minor, needed = findings.minor_layers(heads_record), findings.needed_heads(heads_record)
said = []

for layer in range(model.config.n_layer if findings.judged(heads_record) else 0):
    if layer in findings.unused_layers(heads_record):
        said.append(f"Layer {layer}'s attention is unused.")
    elif layer in minor:
        said.append(f"Layer {layer}'s attention is nearly unused.")
    elif any(needed_layer == layer for needed_layer, _ in needed):
        named = ", ".join(f"{layer}.{head}" for needed_layer, head in needed if needed_layer == layer)
        said.append(f"Layer {layer}'s attention is used, and it needs these of its heads: {named}.")
    else:
        said.append(f"Layer {layer}'s attention is used, though no one of its heads is needed alone.")

if not findings.judged(heads_record):
    said.append(f"Too few answers are right (under {findings.JUDGED}) to tell which layers and heads it uses.")
depth = findings.answer_depth(lens_record)
if depth is None:
    said.append(f"Too few answers are right (under {findings.JUDGED}) to place where the answer appears.")
else:
    said.append(f"The answer can first be read out after {findings.depth_name(lens.depths[depth])}.")

writer = {}  # point -> the layers where that point carries the answer's difference at the answer-writing position
for point, record in patches.items():
    last = len(record["positions"]) - 1
    writer[point] = [layer for layer, position in findings.carrying_cells(record) if position == last]
gathered_by = writer["attn_out"][:1]  # the first layer whose attention brings it there
if gathered_by:
    said.append(f"What tells two inputs apart reaches the position that writes the answer through layer "
                f"{gathered_by[0]}'s attention.")  # fmt: skip
else:
    said.append("No single layer's attention output carries what tells two inputs apart at the answer position.")
if writer["mlp_out"]:
    layers = " and ".join(str(layer) for layer in writer["mlp_out"])
    said.append(f"At that position, the MLP output of layer {layers} carries it.")

compares, alike = [], []
for layer, layer_reads in enumerate(reads_record["reads"]):
    if layer in minor:
        continue
    for head, table in enumerate(layer_reads):
        ratio = findings.comparison_ratio(table, reads_record["counts"], reads_record["values"])
        comparing = ratio is not None and not 1 / findings.COMPARES_RATIO < ratio < findings.COMPARES_RATIO
        (compares if comparing else alike).append(f"{layer}.{head}")
said.append(f"Heads that compare each input digit with the digit just written: {', '.join(compares) or 'none'}; "
            f"heads that read the digits alike, whatever was written: {', '.join(alike) or 'none'}.")  # fmt: skip
if needed:
    most = f"{needed[0][0]}.{needed[0][1]}"
    kind = "compares" if most in compares else "reads the digits alike" if most in alike else "is in a minor layer"
    said.append(f"The head it needs most, {most}, {kind}.")

held_from = [layer for layer in writer["resid_pre"] if layer > 0]  # one position holds it, entering that layer
if gathered_by and held_from and depth is not None:
    said.append(f"In short: layer {gathered_by[0]}'s attention gathers what decides each answer digit into the "
                f"position that writes it; entering layer {held_from[0]}, that one position holds it; the answer "
                f"reads out there after {findings.depth_name(lens.depths[depth])}.")  # fmt: skip

print("\n".join(f"- {sentence}" for sentence in said))

# %% [markdown]
# [docs/results/inspect.md](../results/inspect.md) takes a default model further (the version it names), and
# `gpt-train inspect runs/tutorial-sort report` writes all of this, with the pictures, into one page of the run.
