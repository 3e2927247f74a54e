"""The layer_norm step's answer: gpt-core's reference kernel, its definition in plain autograd."""

from gpt_core.reference import layer_norm

__all__ = ["layer_norm"]
