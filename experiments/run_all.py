"""Run every experiment in sequence and write docs/results/*.md and their pictures.

    python experiments/run_all.py                 # full: regenerates every published table and picture
    python experiments/run_all.py --quick         # tiny settings, a smoke test of the machinery (CI)
    python experiments/run_all.py --only sort positional --jobs 2

The quick mode's asserts check the machinery (every run finishes, every report and picture is
written and non-empty), not the accuracies.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import exp_ablations  # noqa: E402
import exp_addition  # noqa: E402
import exp_grokking  # noqa: E402
import exp_kv_cache  # noqa: E402
import exp_language  # noqa: E402
import exp_positional  # noqa: E402
import exp_sort  # noqa: E402
import exp_text  # noqa: E402
from common import context_from_args  # noqa: E402

EXPERIMENTS = {
    "sort": exp_sort,
    "addition": exp_addition,
    "grokking": exp_grokking,
    "language": exp_language,
    "kv_cache": exp_kv_cache,
    "positional": exp_positional,
    "ablations": exp_ablations,
    "text": exp_text,
}


def main() -> None:
    ctx = context_from_args(description=__doc__)
    chosen = ctx.only or list(EXPERIMENTS)
    unknown = sorted(set(chosen) - set(EXPERIMENTS))
    if unknown:
        sys.exit(f"run_all: unknown experiment(s) {', '.join(unknown)}; choose from {', '.join(EXPERIMENTS)}")
    start = time.perf_counter()
    for name in chosen:
        print(f"== {name}", flush=True)
        path = EXPERIMENTS[name].run(ctx)
        assert path.is_file() and path.stat().st_size > 0, f"{name}: no report written"
        for picture in path.read_text().split("](")[1:]:
            file = ctx.out / picture.split(")")[0]
            assert file.is_file() and file.stat().st_size > 1000, f"{name}: picture {file} missing or empty"
    index = write_index(ctx.out)
    print(f"all {len(chosen)} experiments done in {time.perf_counter() - start:.0f} s; results in {index}")


def write_index(out: Path) -> Path:
    """results.md: every report present in `out`, in the experiments' order (earlier runs' reports included)."""
    parts = [(out / f"{name}.md").read_text() for name in EXPERIMENTS if (out / f"{name}.md").is_file()]
    header = (
        "# Results\n\nEvery number and picture below was written by `python experiments/run_all.py` "
        "(one section per experiment; `--only NAME` reruns one), except where a section says how else it was "
        "measured. Each section gives the commands, the machine and the wall time.\n\n"
    )
    index = out / "results.md"
    index.write_text(header + "\n".join(parts))
    return index


if __name__ == "__main__":
    main()
