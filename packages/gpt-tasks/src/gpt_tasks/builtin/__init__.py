"""The built-in tasks, registered through the same entry-point hook as any third-party plugin."""

from gpt_core.plugins import hookimpl
from gpt_tasks.builtin.addition import AdditionTask
from gpt_tasks.builtin.modadd import ModAddTask
from gpt_tasks.builtin.repeats import RepeatsTask
from gpt_tasks.builtin.shakespeare import ShakespeareTask
from gpt_tasks.builtin.sort import SortTask
from gpt_tasks.builtin.text import TextTask


@hookimpl
def register_tasks(register):
    for task in (SortTask, AdditionTask, ModAddTask, ShakespeareTask, TextTask, RepeatsTask):
        register(task)
