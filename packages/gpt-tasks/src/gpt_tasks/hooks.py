"""The hook a task plugin implements, in gpt_core.plugins' one plugin system.

A plugin is any module (or object) with a function marked `@hookimpl` (`from gpt_core.plugins import hookimpl`)
named `register_tasks`; a distribution makes it discoverable by declaring it in the `gpt_tasks` entry-point group:

    [project.entry-points.gpt_tasks]
    reverse = "gpt_task_reverse"
"""

ENTRY_POINT_GROUP = "gpt_tasks"
HOOK = "register_tasks"
