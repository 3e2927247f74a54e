"""The layer_norm_backward step's answer: gpt-core's own LayerNorm, a torch.autograd.Function with a
hand-derived backward."""

from gpt_core import layer_norm

__all__ = ["layer_norm"]
