"""The cross_entropy step's answer: gpt-core's reference kernel, its definition in plain autograd."""

from gpt_core.reference import cross_entropy

__all__ = ["cross_entropy"]
