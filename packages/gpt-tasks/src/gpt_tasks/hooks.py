"""The hook a task plugin implements, in gpt_core.plugins' one plugin system.

A plugin is any module (or object) with a function marked `@hookimpl` (gpt_core.plugins' marker, also
reachable as `gpt_tasks.hookimpl`) named `register_tasks`; a distribution makes it discoverable by
declaring it in the `gpt_tasks` entry-point group:

    [project.entry-points.gpt_tasks]
    reverse = "gpt_task_reverse"
"""

from __future__ import annotations

from gpt_core.plugins import PROJECT, PluginSpecs, deprecated_aliases, hookimpl, hookspec

ENTRY_POINT_GROUP = "gpt_tasks"
HOOK = "register_tasks"

__all__ = ["ENTRY_POINT_GROUP", "HOOK", "hookimpl", "hookspec"]

# The first release's own pluggy project and hookspec class, now gpt_core.plugins' one of each.
__getattr__ = deprecated_aliases(
    __name__,
    {"PROJECT": (PROJECT, "gpt_core.plugins.PROJECT"), "TaskSpecs": (PluginSpecs, "gpt_core.plugins.PluginSpecs")},
)
