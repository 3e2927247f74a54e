"""Reading a run does not import matplotlib: gpt_viz's picture functions, and matplotlib with them, are
imported on first use, and each name is the function whichever import came first."""

import subprocess
import sys


def _run(code: str) -> list[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()


def test_importing_gpt_viz_and_reading_metric_keys_does_not_import_matplotlib():
    code = "import sys, gpt_viz; gpt_viz.metric_key('heldout', 'loss'); print('matplotlib' in sys.modules)"
    assert _run(code) == ["False"]


def test_a_picture_function_imports_matplotlib_when_first_named():
    code = "import sys, gpt_viz; f = gpt_viz.training_curves; print('matplotlib' in sys.modules, f.__module__)"
    assert _run(code) == ["True", "gpt_viz.curves"]


def test_grokking_is_the_function_even_after_its_module_was_imported_first():
    code = "import gpt_viz.grokking_curves, gpt_viz.cli; from gpt_viz import grokking; print(callable(grokking))"
    assert _run(code) == ["True"]
    code = "import gpt_viz.cli, gpt_viz; print(gpt_viz.grokking.__module__, gpt_viz.first_crossing.__name__)"
    assert _run(code) == ["gpt_viz.grokking_curves", "first_crossing"]


def test_no_picture_function_shares_its_name_with_a_module_of_gpt_viz():
    import pkgutil

    import gpt_viz

    modules = {module.name for module in pkgutil.iter_modules(gpt_viz.__path__)}
    assert modules & set(gpt_viz.__all__) == set()  # importing such a module would put it in the name's place


def test_an_unknown_name_is_an_attribute_error():
    code = "import gpt_viz\ntry:\n    gpt_viz.no_such_picture\nexcept AttributeError as e:\n    print('refused')"
    assert _run(code) == ["refused"]
