"""`gpt-train --help` answers without importing torch (or numpy): the commands are imported when used, and the list
it prints summarises each exactly as the command's own help would; Ctrl-C while a command starts is `aborted`."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from click.testing import CliRunner

from gpt_train.cli import cli

HELP_WITHOUT_TORCH = """
import sys
from gpt_train.cli import main
try:
    main(["--help"])
except SystemExit as exit_:
    assert exit_.code in (0, None), exit_.code
heavy = sorted(name for name in ("torch", "numpy", "matplotlib", "gpt_core", "gpt_tasks", "gpt_viz")
               if name in sys.modules)
print("IMPORTED:", ",".join(heavy))
"""


def test_help_lists_every_command_without_importing_torch():
    done = subprocess.run([sys.executable, "-c", HELP_WITHOUT_TORCH], capture_output=True, text=True, check=True)
    assert done.stdout.strip().endswith("IMPORTED:"), done.stdout[-300:]
    listed = [line.split()[0] for line in done.stdout.split("Commands:")[1].splitlines() if line.strip()][:-1]
    assert listed == sorted(cli.lazy)


@pytest.mark.parametrize("name", sorted(cli.lazy))
def test_each_summary_is_the_commands_own_first_paragraph(name):
    entry = cli.lazy[name]
    command = getattr(importlib.import_module(entry.module), entry.attribute)
    for limit in (45, 60, 1000):
        assert entry.short_help(limit) == command.get_short_help_str(limit)


def test_a_command_is_imported_when_it_is_used():
    result = CliRunner().invoke(cli, ["tasks", "--help"])
    assert result.exit_code == 0 and "List every installed task" in result.output
    assert "tasks" in cli.commands


CTRL_C_WHILE_TORCH_IMPORTS = """
import sys
from gpt_train.cli import main


class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and sys.argv[2] == "plain":
            raise KeyboardInterrupt
        if name == "torch":  # as Python reports one inside a class body's __set_name__, which torch's import runs
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from KeyboardInterrupt()
        return None


sys.meta_path.insert(0, CtrlC())
main(["run", "--task", "sort", "--steps", "1", "--out", sys.argv[1]])
"""


@pytest.mark.parametrize("interrupt", ["plain", "wrapped"])
def test_ctrl_c_while_a_command_starts_is_aborted_with_exit_130(tmp_path, interrupt):
    script = [sys.executable, "-c", CTRL_C_WHILE_TORCH_IMPORTS, str(tmp_path / "run"), interrupt]
    done = subprocess.run(script, capture_output=True, text=True)
    assert (done.returncode, done.stderr.strip()) == (130, "gpt-train: aborted")
    assert not (tmp_path / "run").exists()
