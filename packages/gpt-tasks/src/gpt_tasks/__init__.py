"""gpt_tasks: the task registry (a pluggy project, entry-point group `gpt_tasks`) and the built-in tasks."""

from gpt_tasks.hooks import ENTRY_POINT_GROUP, hookimpl, hookspec
from gpt_tasks.params import ParamError
from gpt_tasks.prompt_answer import PromptAnswerTask
from gpt_tasks.registry import PluginWarning, Registry, TaskError, TaskInfo, get_task, list_tasks
from gpt_tasks.splits import IndexedSplit, is_heldout, unit_hash
from gpt_tasks.task import SPLITS, Batch, Task, evaluating
from gpt_tasks.training import Defaults, TrainSettings

__all__ = [
    "ENTRY_POINT_GROUP",
    "SPLITS",
    "Batch",
    "Defaults",
    "IndexedSplit",
    "ParamError",
    "PluginWarning",
    "PromptAnswerTask",
    "Registry",
    "Task",
    "TaskError",
    "TaskInfo",
    "TrainSettings",
    "evaluating",
    "get_task",
    "hookimpl",
    "hookspec",
    "is_heldout",
    "list_tasks",
    "unit_hash",
]
