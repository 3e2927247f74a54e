"""The course: its steps in order, each the kernel slot it fills and the function a learner writes for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

SAMPLING_SOFTMAX_SLOT = "sampling_softmax"
"""The kernel slot the softmax step fills in `learn train`: the softmax generation samples from."""

DEFAULT_DIR = Path("my-gpt")
"""The learner's folder when --dir is not given."""


@dataclass(frozen=True)
class Step:
    """One exercise: DIR/`name`.py defines `function` with `parameters`, a kernel for `slot` (None: not a kernel)."""

    name: str
    teaches: str
    slot: str | None
    function: str
    parameters: tuple[str, ...]
    handwritten_backward: bool = False  # the check refuses a gradient autograd derived
    tiled: bool = False  # the check refuses a (T, T) tensor

    @property
    def file_name(self) -> str:
        return f"{self.name}.py"

    @property
    def signature(self) -> str:
        return f"{self.function}({', '.join(self.parameters)})"


STEPS: tuple[Step, ...] = (
    Step("softmax", "exponentiate and normalise, stable on large logits", SAMPLING_SOFTMAX_SLOT, "softmax", ("x",)),
    Step("attention", "scaled dot-product attention with the causal mask of cached decoding", "attention",
         "attention", ("q", "k", "v", "causal")),
    Step("layer_norm", "normalise each row: mean, biased variance, epsilon under the root", "layer_norm",
         "layer_norm", ("x", "weight", "bias", "eps")),
    Step("gelu", "GPT-2's activation, the tanh approximation of GELU", "gelu", "gelu", ("x",)),
    Step("cross_entropy", "the loss: log-sum-exp minus the target's logit, ignoring -100", "cross_entropy",
         "cross_entropy", ("logits", "targets")),
    Step("layer_norm_backward", "derive LayerNorm's gradient by hand in a torch.autograd.Function", "layer_norm",
         "layer_norm", ("x", "weight", "bias", "eps"), handwritten_backward=True),
    Step("attention_backward", "derive attention's gradient by hand: dV, dP, the softmax's Jacobian, dQ, dK",
         "attention", "attention", ("q", "k", "v", "causal"), handwritten_backward=True),
    Step("flash_attention", "attention in tiles with an online softmax: no T x T matrix", "attention",
         "attention", ("q", "k", "v", "causal"), tiled=True),
    Step("task", "a task plugin of your own: a PromptAnswerTask, trained and scored on its hash split", None,
         "Task", ()),
)  # fmt: skip

BY_NAME = {step.name: step for step in STEPS}
