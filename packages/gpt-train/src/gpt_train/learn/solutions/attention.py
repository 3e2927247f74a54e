"""The attention step's answer: gpt-core's reference kernel, its definition in plain autograd."""

from gpt_core.reference import attention

__all__ = ["attention"]
