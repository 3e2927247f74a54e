"""The verification harness: every kernel, and a model computed with it, against references passed in.

Not part of the model's reading path: `gpt-train verify` and a kernel plugin's tests use it.
"""

from gpt_core.testing.verification import (
    REFERENCE_SIGNATURES,
    Row,
    format_report,
    kernel_report,
    kv_cache_row,
    model_row,
    verification_report,
)

__all__ = [
    "REFERENCE_SIGNATURES",
    "Row",
    "format_report",
    "kernel_report",
    "kv_cache_row",
    "model_row",
    "verification_report",
]
