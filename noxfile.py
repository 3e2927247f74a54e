"""Test sessions: each package in its own fresh virtualenv with only what it declares.

    nox -s tests                              # every package
    nox -s "tests(package='gpt-core')"        # one package
    nox -s torch_floor                        # gpt-core's tests with the oldest torch the packages ask for
    nox -s pythons                            # every package's tests under Python 3.12 and 3.13 (not a default)
    nox -s plugin                             # the example third-party task plugin, installed as a third party would
    nox -s kernel_plugin                      # the example third-party kernel plugin (flash attention), likewise
    nox -s triton                             # the Triton set: in its interpreter, and built for sm_80/sm_90
    nox -s gpt2                               # GPT-2 parity with transformers (installed in this session only)
    nox -s experiments                        # the experiments' quick mode (a smoke test of the machinery)
    nox -s lint                               # ruff
    nox -s tutorial                           # execute docs/tutorial's notebook from a fresh kernel
    nox -s docs                               # the house rule for prose (tools/check_prose.py) and its tests

Every install but torch_floor's torch, Triton and gpt-core, and the pythons session's, goes through constraints.txt,
which pins torch to the version used in development and CI (there its CPU wheel), and transformers (gpt2 session
only) to the version the parity tests pass with; triton is pinned by the triton session itself (TRITONS).

Virtualenvs are made by uv where it is installed (`pip install uv`): it links each package from its cache instead
of unpacking it again for every session, which matters for torch; otherwise by virtualenv. uv does not read pip's
configuration, so pip's find-links (a local folder of wheels, such as a CPU build of torch) are handed to it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
CONSTRAINTS = ("-c", str(ROOT / "constraints.txt"))
# The Triton releases `nox -s triton` builds and checks the set with where torch leaves triton free (its CPU wheel):
# the oldest gpt-core[triton] asks for (the one torch 2.11 pins) and the newest, each with what its interpreter needs
# beside it (before 3.7 it reads a one-element array as an int, which numpy 2.4 refuses). Not in constraints.txt:
# PyPI's Linux torch (the CUDA build) pins its own triton, and a second pin would make every install through
# constraints.txt impossible there.
TRITONS = {"3.6.0": ["numpy<2.4"], "3.9.0": []}
# The oldest torch the packages ask for (torch>=2.11 in their pyproject.toml): PyPI's build of it, the CUDA one (it
# runs on a CPU too), with the Triton it pins (3.6.0, the oldest gpt-core[triton] asks for). Not through
# constraints.txt, which pins the one CI develops with.
TORCH_FLOOR = "torch==2.11.0"
PYTHON = "3.11"
# The Pythons beside PYTHON (the oldest the packages ask for, requires-python >=3.11) that `nox -s pythons` runs every
# package's tests under, not a default session since CI's machine has one Python: the GPU machine's (3.12) and the
# newest one checked (3.13).
PYTHONS = ["3.12", "3.13"]

# Each package with the sibling packages it depends on, in install order.
PACKAGES = {
    "gpt-core": [],
    "gpt-viz": [],
    "gpt-tasks": ["gpt-core"],
    "gpt-train": ["gpt-core", "gpt-tasks[bpe]", "gpt-viz"],  # [bpe]: its tests train a BPE text run
}

nox.options.sessions = ["tests", "triton", "torch_floor", "plugin", "kernel_plugin", "gpt2", "experiments", "tutorial",
                        "lint", "docs"]  # fmt: skip
nox.options.reuse_existing_virtualenvs = False
nox.options.default_venv_backend = "uv|virtualenv"


def pip_find_links() -> str:
    """pip's find-links, from its environment variable or its configuration files ("" if none)."""
    if os.environ.get("PIP_FIND_LINKS"):
        return os.environ["PIP_FIND_LINKS"]
    found = subprocess.run([sys.executable, "-m", "pip", "config", "get", "global.find-links"],
                           capture_output=True, text=True, check=False)  # fmt: skip
    return found.stdout.strip() if found.returncode == 0 else ""


# The sessions' installs (by uv) leave no compiled bytecode, and their virtualenvs are thrown away after: with
# PYTHONDONTWRITEBYTECODE set, as on some CI images, every process a session starts would compile PyTorch's
# Python from source again (4 s a process on a 2-core CPU, for each of the hundreds the sessions start).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

if "UV_FIND_LINKS" not in os.environ and (links := pip_find_links()):
    os.environ["UV_FIND_LINKS"] = ",".join(links.split())  # pip separates them by spaces, uv by commas


def package_dir(name: str) -> str:
    """A package's directory, keeping any extras: gpt-tasks[bpe] -> .../packages/gpt-tasks[bpe]."""
    base, bracket, extras = name.partition("[")
    return str(ROOT / "packages" / base) + bracket + extras


def install_packages(session: nox.Session, *names: str, extras: str = "") -> None:
    """Install packages from their directories (non-editable, as a user would) with their declared dependencies."""
    *siblings, last = names
    session.install(*CONSTRAINTS, *map(package_dir, siblings), package_dir(last) + extras)


def parallel_pytest(session: nox.Session, dist: str = "loadfile") -> tuple[tuple[str, ...], dict[str, str]]:
    """pytest-xdist's arguments and environment: a worker per core, by default each test file whole to one
    worker (so a module's trained model is made once; "load": test by test, for a suite of one or two files),
    one PyTorch thread per worker so the workers share the cores rather than fight over them. The test runner
    alone: installed here, not a package's dependency."""
    session.install(*CONSTRAINTS, "pytest-xdist")
    return ("-n", str(os.cpu_count() or 1), "--dist", dist), {"OMP_NUM_THREADS": "1"}


@nox.session(python=PYTHON)
@nox.parametrize("package", list(PACKAGES))
def tests(session: nox.Session, package: str) -> None:
    """Run one package's tests in a venv holding only that package and its declared dependencies."""
    install_packages(session, *PACKAGES[package], package, extras="[test]")
    workers, env = parallel_pytest(session)
    session.run("pytest", "-q", *workers, package_dir(package) + "/tests", *session.posargs, env=env)


@nox.session(python=PYTHON)
@nox.parametrize("release", list(TRITONS))
def triton(session: nox.Session, release: str) -> None:
    """The `triton` kernel set without a GPU, at the oldest Triton gpt-core[triton] asks for (the one torch 2.11
    pins) and the newest (TRITONS): Triton installed (gpt-core[triton]), every kernel checked against PyTorch
    forward and backward in float64 by Triton's interpreter (TRITON_INTERPRET=1 runs the kernels on CPU tensors),
    `gpt-train verify --kernels triton` likewise, every kernel compiled ahead of time for sm_80 and sm_90, and a
    training step traced by torch.compile for sm_90 (these two need Triton's compiler, not its interpreter: it
    builds GPU binaries, and the kernels' TTIR, on a CPU)."""
    install_packages(session, "gpt-core", "gpt-tasks", "gpt-viz", "gpt-train")
    pins = "import importlib.metadata as m; print(any(r.startswith('triton') for r in m.requires('torch') or []))"
    pinned = session.run("python", "-c", pins, silent=True).strip() == "True"  # a CUDA torch's own triton
    if pinned and release != list(TRITONS)[-1]:
        session.skip("this torch pins its own Triton; the newest release's session checks the set with it")
    ours = [] if pinned else [f"triton=={release}", *TRITONS[release]]
    session.install(*CONSTRAINTS, package_dir("gpt-core") + "[test,triton]", *ours)
    workers, env = parallel_pytest(session, dist="load")
    tests = [package_dir("gpt-core") + f"/tests/test_triton_{name}.py" for name in ("attention", "kernels", "set")]
    session.run("pytest", "-q", *workers, *tests, *session.posargs, env=env | {"TRITON_INTERPRET": "1"})
    built = [package_dir("gpt-core") + f"/tests/test_triton_{name}.py" for name in ("ahead_of_time", "compiled_trace")]
    compiler = env | {"TRITON_INTERPRET": "0"}  # Triton's compiler, not its interpreter
    session.run("pytest", "-q", *workers, *built, env=compiler)
    session.run("gpt-train", "verify", "--kernels", "triton", env=env | {"TRITON_INTERPRET": "1"})


@nox.session(python=PYTHON)
def torch_floor(session: nox.Session) -> None:
    """gpt-core's tests, the triton set's included, with the oldest torch the packages ask for (TORCH_FLOOR): what
    the compiler traces differs between releases (torch 2.11's cannot trace `bool()` of a dict subclass, which
    2.13's can). Its Triton is the oldest of TRITONS, with what that one's interpreter needs beside it."""
    floor = list(TRITONS)[0]  # the Triton TORCH_FLOOR pins
    session.install(TORCH_FLOOR, f"triton=={floor}", *TRITONS[floor])
    session.install(package_dir("gpt-core") + "[test,triton]")  # keeps that torch: it satisfies torch>=2.11
    workers, env = parallel_pytest(session)
    session.run("pytest", "-q", *workers, package_dir("gpt-core") + "/tests", *session.posargs, env=env)
    built = [package_dir("gpt-core") + f"/tests/test_triton_{name}.py" for name in ("ahead_of_time", "compiled_trace")]
    by_test, _ = parallel_pytest(session, dist="load")  # two files: test by test
    session.run("pytest", "-q", *by_test, *built, env=env | {"TRITON_INTERPRET": "0"})  # skipped in the interpreter


@nox.session(python=PYTHONS)
def pythons(session: nox.Session) -> None:
    """Every package's tests under each of PYTHONS, in one virtualenv, with TORCH_FLOOR and its Triton: PyPI has
    their wheels for each, where the torch constraints.txt pins is a CPU build kept on the build machines for CI's
    Python alone."""
    floor = list(TRITONS)[0]
    session.install(TORCH_FLOOR, f"triton=={floor}", *TRITONS[floor])
    extras = {name: "[test,triton]" if name == "gpt-core" else "[test]" for name in PACKAGES}
    session.install(*(package_dir(name) + extras[name] for name in PACKAGES))
    workers, env = parallel_pytest(session)
    for name in PACKAGES:
        session.run("pytest", "-q", *workers, package_dir(name) + "/tests", *session.posargs, env=env)


def run_example_tests(session: nox.Session, name: str) -> None:
    """Install the packages, then the example from examples/<name> as a third party would, and run its tests."""
    example = str(ROOT / "examples" / name)
    install_packages(session, "gpt-core", "gpt-tasks", "gpt-viz", "gpt-train")
    session.install(*CONSTRAINTS, example + "[test]")
    workers, env = parallel_pytest(session, dist="load")
    session.run("pytest", "-q", *workers, example + "/tests", *session.posargs, env=env)


@nox.session(python=PYTHON)
def plugin(session: nox.Session) -> None:
    """Install gpt-tasks, gpt-train and the example plugin as a third party would, and prove it is found and trains."""
    run_example_tests(session, "gpt-task-reverse")


@nox.session(python=PYTHON)
def kernel_plugin(session: nox.Session) -> None:
    """Install gpt-train and the example kernel plugin (flash attention) as a third party would, and prove it is
    found, verified against PyTorch, never forms the T x T matrix, and trains."""
    run_example_tests(session, "gpt-kernel-flash")


@nox.session(python=PYTHON)
def gpt2(session: nox.Session) -> None:
    """GPT-2 parity with transformers, a test-only dependency installed in this session alone; a missing
    transformers fails here (GPT_TRAIN_REQUIRE_TRANSFORMERS) where the plain gpt-train session skips."""
    install_packages(session, "gpt-core", "gpt-tasks[bpe]", "gpt-viz", "gpt-train", extras="[test]")
    session.install(*CONSTRAINTS, "transformers")  # pinned in constraints.txt
    tests = package_dir("gpt-train") + "/tests/test_gpt2_parity.py"
    workers, env = parallel_pytest(session, dist="load")
    session.run(
        "pytest", "-q", "-rs", *workers, tests, *session.posargs, env=env | {"GPT_TRAIN_REQUIRE_TRANSFORMERS": "1"}
    )


@nox.session(python=PYTHON)
def experiments(session: nox.Session) -> None:
    """Run every experiment in quick mode: checks the machinery end to end, not the accuracies. run_all's
    experiments, then exp_grokking_levers.py's, which run_all leaves out (a few seconds quick), then the benchmarks'
    tests (their refusals of bad arguments and of a stale GPU pack); given arguments go to run_all alone
    (`-- --only sort`). Not exp_nanogpt.py, whose quick mode trains nanoGPT from a clone of it with its
    data prepared, which CI cannot download."""
    install_packages(session, "gpt-core", "gpt-tasks[bpe]", "gpt-viz", "gpt-train")
    jobs = str(os.cpu_count() or 1)  # runs in parallel, the threads split between them
    session.run("python", str(ROOT / "experiments" / "run_all.py"), "--quick", "--jobs", jobs, *session.posargs)
    if not session.posargs:
        session.run("python", str(ROOT / "experiments" / "exp_grokking_levers.py"), "--quick", "--jobs", jobs)
        session.install(*CONSTRAINTS, "pytest")
        session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "benchmarks" / "tests"))


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", str(ROOT))


@nox.session(python=PYTHON)
def tutorial(session: nox.Session) -> None:
    """Run the tutorial notebook top to bottom in a fresh kernel, as a reader would: a broken tutorial fails the
    build (tools/run_notebook.py; nbclient, ipykernel and jupytext are pinned in constraints.txt)."""
    install_packages(session, "gpt-core", "gpt-tasks", "gpt-viz", "gpt-train")
    session.install(*CONSTRAINTS, "nbclient", "ipykernel", "jupytext")
    notebook = ROOT / "docs" / "tutorial" / "attention-to-sorting.ipynb"
    session.run("python", str(ROOT / "tools" / "run_notebook.py"), str(notebook), *session.posargs)


@nox.session(python=PYTHON)
def docs(session: nox.Session) -> None:
    """The README, package and example READMEs and docs pages say what the product does: the checker's tests,
    then the checker on the tree (README length, relative links, at most one line naming versions per page)."""
    session.install(*CONSTRAINTS, "pytest")
    session.run("pytest", "-q", str(ROOT / "tools" / "tests"), *session.posargs)
    session.run("python", str(ROOT / "tools" / "check_prose.py"))
