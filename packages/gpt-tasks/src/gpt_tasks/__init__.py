"""gpt_tasks: the task registry (entry-point group `gpt_tasks`), the built-in tasks, and everything a trainer or a
plugin needs (the README's "The plugin contract")."""

from gpt_tasks.params import ParamError, build_params, coerce, field_types
from gpt_tasks.probes import PROBE_EXAMPLES, ProbeCache, measure_probes
from gpt_tasks.prompt_answer import PromptAnswerTask
from gpt_tasks.registry import (
    ENTRY_POINT_GROUP,
    PluginWarning,
    Registry,
    TaskError,
    TaskInfo,
    default_registry,
    get_task,
    list_tasks,
)
from gpt_tasks.scoring import Scores, score_examples
from gpt_tasks.splits import IndexedSplit, is_heldout, unit_hash
from gpt_tasks.symbols import DIGITS, CharVocab, as_bytes, digits_of, one_digit_changes
from gpt_tasks.task import Batch, Defaults, Task, evaluating

__all__ = [
    "DIGITS",
    "ENTRY_POINT_GROUP",
    "Batch",
    "CharVocab",
    "Defaults",
    "IndexedSplit",
    "PROBE_EXAMPLES",
    "ParamError",
    "PluginWarning",
    "ProbeCache",
    "PromptAnswerTask",
    "Registry",
    "Scores",
    "Task",
    "TaskError",
    "TaskInfo",
    "as_bytes",
    "build_params",
    "coerce",
    "default_registry",
    "digits_of",
    "evaluating",
    "field_types",
    "get_task",
    "is_heldout",
    "list_tasks",
    "measure_probes",
    "one_digit_changes",
    "score_examples",
    "unit_hash",
]
