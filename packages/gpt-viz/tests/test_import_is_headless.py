"""Importing gpt_viz must not pull in pyplot: no global figure state, no GUI backend."""

import subprocess
import sys


def test_importing_gpt_viz_does_not_import_pyplot():
    code = "import sys, gpt_viz, gpt_viz.cli; print('matplotlib.pyplot' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_drawing_every_picture_does_not_import_pyplot(tmp_path):
    code = f"""
import sys
import numpy as np
import gpt_viz
weights = np.tril(np.ones((1, 2, 3, 3))) / np.arange(1, 4)[:, None]
gpt_viz.save_figure(gpt_viz.attention_grid(weights[0], ["a", "b", "c"]), {str(tmp_path / "grid")!r})
gpt_viz.save_figure(gpt_viz.length_generalisation({{"rope": {{8: (0.9, 0.1)}}}}), {str(tmp_path / "len")!r})
print('matplotlib.pyplot' in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"
