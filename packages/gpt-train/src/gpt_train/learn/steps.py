"""The course: its steps in order, each the kernel slot it fills and the function a learner writes for it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SAMPLING_SOFTMAX_SLOT = "sampling_softmax"  # the slot the softmax step fills: what generation samples from

DEFAULT_DIR = Path("my-gpt")  # the learner's folder when --dir is not given


@dataclass(frozen=True)
class Step:
    """One exercise: DIR/`name`.py defines `function` (a class for a module step) taking `parameters`, a kernel for
    `slot` (None: not a kernel), and `kind` says which check grades it."""

    name: str
    teaches: str
    slot: str | None
    function: str
    parameters: tuple[str, ...]
    handwritten_backward: bool = False  # the check refuses a gradient autograd derived
    tiled: bool = False  # the check refuses a (T, T) tensor
    forbidden: tuple[str, ...] = ()  # built-in families it may not call (gpt_train.learn.watch)
    kind: str = "kernel"  # or "module", "training", "generation", "task"

    @property
    def graded_against(self) -> str | None:
        """The built-in family a kernel or training step is graded against: the first it may not call."""
        return self.forbidden[0] if self.forbidden and self.kind in ("kernel", "training") else None

    @property
    def file_name(self) -> str:
        return f"{self.name}.py"

    @property
    def signature(self) -> str:
        return f"{self.function}({', '.join(self.parameters)})"


SOFTMAX, ATTENTION, LAYER_NORM, GELU, CROSS_ENTROPY = (("softmax",), ("attention", "softmax"), ("layer_norm",),
                                                      ("gelu",), ("cross_entropy", "softmax"))  # fmt: skip
MODEL = ("attention", "softmax", "layer_norm", "gelu", "cross_entropy")
OPTIMISER = ("optimiser",)

STEPS: tuple[Step, ...] = (
    Step("softmax", "exponentiate and normalise, stable on large logits", SAMPLING_SOFTMAX_SLOT, "softmax", ("x",),
         forbidden=SOFTMAX),
    Step("attention", "scaled dot-product attention with the causal mask of cached decoding", "attention",
         "attention", ("q", "k", "v", "causal"), forbidden=ATTENTION),
    Step("layer_norm", "normalise each row: mean, biased variance, epsilon under the root", "layer_norm",
         "layer_norm", ("x", "weight", "bias", "eps"), forbidden=LAYER_NORM),
    Step("gelu", "GPT-2's activation, the tanh approximation of GELU", "gelu", "gelu", ("x",), forbidden=GELU),
    Step("cross_entropy", "the loss: log-sum-exp minus the target's logit, ignoring -100", "cross_entropy",
         "cross_entropy", ("logits", "targets"), forbidden=CROSS_ENTROPY),
    Step("layer_norm_backward", "derive LayerNorm's gradient by hand in a torch.autograd.Function", "layer_norm",
         "layer_norm", ("x", "weight", "bias", "eps"), handwritten_backward=True, forbidden=LAYER_NORM),
    Step("attention_backward", "derive attention's gradient by hand: dV, dP, the softmax's Jacobian, dQ, dK",
         "attention", "attention", ("q", "k", "v", "causal"), handwritten_backward=True, forbidden=ATTENTION),
    Step("flash_attention", "attention in tiles with an online softmax: no T x T matrix", "attention",
         "attention", ("q", "k", "v", "causal"), tiled=True, forbidden=ATTENTION),
    Step("multi_head_attention", "the module: fused qkv projection, heads split and merged, output projection",
         None, "MultiHeadAttention", ("n_embd", "n_head", "attention"), forbidden=MODEL, kind="module"),
    Step("block", "the pre-norm block: x + attn(ln1(x)), then x + mlp(ln2(x))", None, "Block",
         ("n_embd", "n_head", "kernels"), forbidden=MODEL, kind="module"),
    Step("model", "the GPT: token and position embeddings, blocks, final norm, tied head, the loss", None, "GPT",
         ("vocab_size", "block_size", "n_layer", "n_head", "n_embd", "kernels"), forbidden=MODEL, kind="module"),
    Step("training_step", "one training step: clipping by the global norm, AdamW decaying matrices, warm-up and cosine",
         None, "training_step", ("model", "state", "inputs", "targets", "step", "settings"), forbidden=OPTIMISER,
         kind="training"),
    Step("generation", "greedy, temperature and top-k sampling, then decoding with the KV cache", None, "generate",
         ("model", "idx", "max_new_tokens", "temperature", "top_k", "use_cache", "generator"), forbidden=SOFTMAX,
         kind="generation"),
    Step("task", "a task plugin of your own: a PromptAnswerTask, trained and scored on its hash split", None,
         "Task", (), kind="task"),
)  # fmt: skip

BY_NAME = {step.name: step for step in STEPS}


SOLUTIONS = Path(__file__).parent / "solutions"
ANSWER = re.compile(r"^( *)# BEGIN SOLUTION\n.*?^ *# END SOLUTION\n", re.MULTILINE | re.DOTALL)


def stub(step: Step) -> str:
    """The file `learn start` writes: the step's answer with each body between `# BEGIN SOLUTION` and `# END SOLUTION`
    a `raise NotImplementedError` and each line marked `# solution only` left out (the task step's answer extends a
    stub of its own)."""
    own = SOLUTIONS.parent / "stubs" / step.file_name
    if own.is_file():
        return own.read_text(encoding="utf-8")
    source = re.sub(r"^.*# solution only.*\n", "", (SOLUTIONS / step.file_name).read_text(encoding="utf-8"), flags=re.M)
    return ANSWER.sub(r"\1raise NotImplementedError\n", source)
