"""gpt_kernel_flash: a third-party kernel plugin providing `flash`, a tiled attention, for gpt-core's
`attention` slot.

gpt-train finds this module through the `gpt_kernels` entry point declared in pyproject.toml and calls
`register_kernels` with a `register(slot, name, kernel)` function. The plugin needs gpt-core alone: the
marker is gpt_core.plugins' one `hookimpl`, the same for task and kernel plugins.
"""

from gpt_core.plugins import hookimpl
from gpt_kernel_flash.flash import TILE, flash_attention

__all__ = ["TILE", "flash_attention", "register_kernels"]
__version__ = "0.2.0"


@hookimpl
def register_kernels(register):
    register("attention", "flash", flash_attention)
