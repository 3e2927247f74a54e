"""The softmax step's answer: gpt-core's reference kernel, its definition in plain autograd."""

from gpt_core.reference import softmax

__all__ = ["softmax"]
