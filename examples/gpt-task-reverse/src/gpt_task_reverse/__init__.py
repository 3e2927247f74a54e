"""gpt_task_reverse: a third-party gpt-tasks plugin providing the `reverse` task.

gpt-tasks finds this module through the `gpt_tasks` entry point declared in pyproject.toml and
calls `register_tasks` with a `register` function; each call adds one Task subclass. The marker is
gpt_core.plugins' one `hookimpl`, the same for task and kernel plugins.
"""

from gpt_core.plugins import hookimpl
from gpt_task_reverse.task import ReverseParams, ReverseTask

__all__ = ["ReverseParams", "ReverseTask", "register_tasks"]
__version__ = "0.2.0"


@hookimpl
def register_tasks(register):
    register(ReverseTask)
