"""The pluggy hook a task plugin implements.

A plugin is any module (or object) with a function marked `@hookimpl` named `register_tasks`;
a distribution makes it discoverable by declaring it in the `gpt_tasks` entry-point group:

    [project.entry-points.gpt_tasks]
    reverse = "gpt_task_reverse"
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

PROJECT = "gpt_tasks"
ENTRY_POINT_GROUP = "gpt_tasks"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


class TaskSpecs:
    @hookspec
    def register_tasks(self, register: Callable[[type], None]) -> None:
        """Call `register(TaskClass)` once for every task this plugin provides."""
