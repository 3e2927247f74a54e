"""Execute a notebook from a fresh kernel, in a scratch folder, and fail on the first cell that raises.

    python tools/run_notebook.py docs/tutorial/attention-to-sorting.ipynb          # check it runs (CI)
    python tools/run_notebook.py docs/tutorial/attention-to-sorting.ipynb --write  # and save its outputs

The notebook is paired with a percent-format script of the same name (jupytext), which is what a diff of it
reads; the check refuses a pair whose cells differ, so the committed outputs are those of the committed code.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError


def cell_sources(notebook: nbformat.NotebookNode) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source.strip()) for cell in notebook.cells]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--write", action="store_true", help="save the executed notebook in place")
    parser.add_argument("--timeout", type=int, default=600, help="seconds a cell may take (default 600)")
    args = parser.parse_args()
    path = args.notebook.resolve()
    script = path.with_suffix(".py")
    if not path.is_file() or not script.is_file():
        print(f"run_notebook: {path} and its paired {script.name} must both exist", file=sys.stderr)
        return 2
    notebook = nbformat.read(path, as_version=4)
    if cell_sources(jupytext.read(script)) != cell_sources(notebook):
        print(f"run_notebook: {path.name} and {script.name} differ; run `jupytext --sync {script}`", file=sys.stderr)
        return 1
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:  # the runs it trains are written here, not into the repo
        client = NotebookClient(notebook, timeout=args.timeout, kernel_name="python3",
                                resources={"metadata": {"path": scratch}})  # fmt: skip
        try:
            client.execute()
        except CellExecutionError as error:
            print(f"run_notebook: {path.name} failed:\n{error}", file=sys.stderr)
            return 1
    print(f"run_notebook: {path.name}: {len(notebook.cells)} cells ran in {time.perf_counter() - start:.0f} s")
    if args.write:
        nbformat.write(notebook, path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
