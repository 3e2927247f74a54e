"""The verification harness: every kernel, and a model computed with it, against references passed in;
`LargestTensor` measures the largest tensor code makes (a tiled kernel's check).
"""

from gpt_core.testing.tensor_sizes import LargestTensor
from gpt_core.testing.verification import (
    REFERENCE_SIGNATURES,
    Row,
    format_report,
    kernel_report,
    second_derivative_report,
    verification_report,
)

__all__ = [
    "LargestTensor",
    "REFERENCE_SIGNATURES",
    "Row",
    "format_report",
    "kernel_report",
    "second_derivative_report",
    "verification_report",
]
