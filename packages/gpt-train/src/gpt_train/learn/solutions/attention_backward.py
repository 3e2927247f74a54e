"""The attention_backward step's answer: gpt-core's own attention, a torch.autograd.Function with a
hand-derived backward."""

from gpt_core import attention

__all__ = ["attention"]
