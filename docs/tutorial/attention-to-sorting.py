# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # From attention to a sorting circuit
#
# This notebook writes a transformer's central piece by hand, checks it against PyTorch, assembles a GPT from
# gpt-core, trains it to sort six digits, and then takes the trained model apart until it can say, from numbers
# it printed itself, how the model sorts. It runs top to bottom on a 2-core CPU in a few minutes.
#
# Read beside it: [`gpt_core/model.py`](../../packages/gpt-core/src/gpt_core/model.py), the model top to bottom,
# and [`gpt_core/reference.py`](../../packages/gpt-core/src/gpt_core/reference.py), each hand-written piece as
# its definition. When you want to write the pieces yourself, graded: `gpt-train learn` ([learn.md](../learn.md)).

# %%
import io
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import torch
from IPython.display import Image, display

warnings.filterwarnings("ignore", message="IProgress not found")  # progress bars print as text here
torch.manual_seed(0)
CPU = torch.device("cpu")


def show(figure):
    """Put a gpt-viz figure into the notebook as a PNG (gpt-viz draws off screen)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    display(Image(buffer.getvalue()))

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
# inputs on the held-out side, which training never sees. This is the default run, except that it scores a fixed
# sample of 20,000 held-out sequences at the end instead of all 250,050, to keep the notebook quick.

# %%
run_dir = Path("runs/tutorial-sort")
train = subprocess.run(
    [sys.executable, "-m", "gpt_train", "run", "--task", "sort", "--set", "final_eval_limit=20000",
     "--out", str(run_dir), "--force", "--quiet"],
    capture_output=True, text=True,
)
assert train.returncode == 0, train.stderr[-2000:]
final = json.loads((run_dir / "final.json").read_text())
print(f"held-out exact match {final['heldout_exact_match']:.6f} over {final['heldout_examples']:,.0f} sequences, "
      f"{final['step']} steps")  # fmt: skip

# %% [markdown]
# ## 4. Its attention
#
# `run_with_cache` records every named activation of one forward pass; `blocks.{i}.pattern` is layer i's
# attention, (B, H, T, T). Each row is a position reading the earlier ones.

# %%
from gpt_train import load_run
from gpt_viz import attention_grid

run = load_run(run_dir)  # the model, its task and its config
model, task = run.model, run.task
prompt = "503718"
ids = torch.tensor([task.encode(prompt + "".join(sorted(prompt)))[:-1]])
with torch.no_grad():
    logits, cache = model.run_with_cache(ids, names=[f"blocks.{i}.pattern" for i in range(model.config.n_layer)])
tokens = task.token_labels(ids[0].tolist())
print("greedy answer:", task.decode(logits[0, len(prompt) - 1 :].argmax(-1).tolist()))
for layer in range(model.config.n_layer):
    show(attention_grid(cache[f"blocks.{layer}.pattern"][0].numpy(), tokens, layer=layer))

# %% [markdown]
# ## 5. Which heads does it need?
#
# Remove a head (zero its output `z`, or replace it by its mean over the examples) and score exact match again,
# on a fixed sample of held-out sequences; then remove whole layers.

# %%
from gpt_train.analysis import ablate_each_head, findings, head_reads, logit_lens, patch
from gpt_viz.inspect_pictures import head_ablation_heatmap, head_reads_picture, logit_lens_picture, patching_picture

EXAMPLES = 2000
heads = ablate_each_head(task, model, CPU, EXAMPLES)
show(head_ablation_heatmap(heads.to_json()))
print("\n".join(findings.head_findings(heads.to_json())))

# %% [markdown]
# ## 6. The logit lens: where does the answer appear?
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
# ## 7. Patching: which position carries the answer?
#
# Take pairs of inputs that differ in their first digit, run the corrupted one, and copy one activation from the
# clean run at one position: the share of the clean-vs-corrupted logit difference that comes back says where the
# information that tells them apart sits. (Patching a layer's input at the corrupted digit itself restores
# everything, trivially: that is the digit.)

# %%
for point in ("resid_pre", "attn_out", "mlp_out"):
    patched = patch(task, model, CPU, point, EXAMPLES)
    if point == "resid_pre":
        show(patching_picture(patched.to_json()))
    print("\n".join(findings.patching_findings(patched.to_json())))

# %% [markdown]
# ## 8. What the first layer's heads read
#
# From each position that writes an answer digit, a head's mean attention on each input digit, by that digit's
# value (columns) and the value just written (rows); 1.0 is attention spread evenly over the six inputs.

# %%
reads = head_reads(task, model, CPU, EXAMPLES)
show(head_reads_picture(reads.to_json()))
print("\n".join(findings.reads_findings(reads.to_json(), findings.minor_layers(heads.to_json()))))

# %% [markdown]
# ## 9. How this model sorts
#
# Each line printed above is a finding with the figure behind it, by rules stated in
# `gpt_train/analysis/findings.py` (a layer is unused when removing all its heads moves exact match by at most
# 0.1%, nearly unused at most 1%; the answer appears at the first depth that reaches 99% of the model's exact
# match; a position carries the answer when patching it restores at least 90% of the logit difference). Put
# together, for the default model:
#
# - the first layer's attention is needed: with all its heads removed, exact match falls to almost nothing;
# - the second layer's attention helps, though no one of its heads is needed: removing them all costs a
#   tenth of the exact match or more, removing any one alone under a percent;
# - nothing reads out as the answer until the second layer's MLP has run;
# - the difference between two inputs reaches the position that writes the answer through the first layer's
#   attention, and that one position then carries it: the MLPs compute the digit there;
# - two of the first layer's heads weigh the input digits by how they compare with the digit just written,
#   favouring the values at or above it; the head the model needs most reads them more evenly and puts more of
#   its weight on the answer written so far; every head of the second layer compares too, with a third or more
#   of its weight on the answer written so far.
#
# Sorting, for this model, is a gather by the first layer's attention, comparing each input digit with the one
# just written, helped by the second layer's, then computation at a single position.
# [docs/results/inspect.md](../results/inspect.md) takes a default model further (the version it names), and
# `gpt-train inspect sort report` writes all of this, with the pictures, into one page.
