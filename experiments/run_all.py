"""Run every experiment and write docs/results/*.md, their pictures, and README.md listing the pages.

    python experiments/run_all.py                 # full: regenerates every published table and picture
    python experiments/run_all.py --quick         # tiny settings, a smoke test of the machinery (CI)
    python experiments/run_all.py --only sort positional --jobs 2

The quick mode's asserts check the machinery (every run finishes, every report and picture is
written and non-empty), not the accuracies; with --jobs N it runs N experiments side by side. A full run takes
the experiments one at a time (each trains its own runs --jobs at a time), so that a page's wall time is its own.
"""

from __future__ import annotations

import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import exp_ablations  # noqa: E402
import exp_addition  # noqa: E402
import exp_grokking  # noqa: E402
import exp_grokking_phases  # noqa: E402
import exp_induction  # noqa: E402
import exp_kv_cache  # noqa: E402
import exp_language  # noqa: E402
import exp_positional  # noqa: E402
import exp_sort  # noqa: E402
import exp_text  # noqa: E402
from common import Context, context_from_args  # noqa: E402

EXPERIMENTS = {
    "sort": exp_sort,
    "addition": exp_addition,
    "grokking": exp_grokking,
    "grokking-phases": exp_grokking_phases,
    "language": exp_language,
    "kv_cache": exp_kv_cache,
    "positional": exp_positional,
    "ablations": exp_ablations,
    "text": exp_text,
    "induction": exp_induction,
}

OUTSIDE = {"grokking-levers": "python experiments/exp_grokking_levers.py (about ten runs of up to 15 minutes)"}
"""The experiments whose page run_all leaves alone, each with the command that rewrites it (the nox `experiments`
session runs its quick mode beside run_all's)."""

# The quick mode's experiments side by side, the longest first, so that the lanes end together.
QUICK_LONGEST_FIRST = ["positional", "text", "kv_cache", "ablations", "induction", "language", "grokking", "sort",
                       "grokking-phases", "addition"]  # fmt: skip
assert sorted(QUICK_LONGEST_FIRST) == sorted(EXPERIMENTS)


def main() -> None:
    ctx = context_from_args(description=__doc__)
    chosen = ctx.only or list(EXPERIMENTS)
    if outside := [name for name in chosen if name in OUTSIDE]:
        sys.exit(
            f"run_all: {outside[0]} is not one of run_all's experiments; its page comes from {OUTSIDE[outside[0]]}"
        )
    unknown = sorted(set(chosen) - set(EXPERIMENTS))
    if unknown:
        sys.exit(f"run_all: unknown experiment(s) {', '.join(unknown)}; choose from {', '.join(EXPERIMENTS)}")
    start = time.perf_counter()
    side_by_side = ctx.jobs if ctx.quick else 1  # a full run's pages each time their own experiment alone
    order = sorted(chosen, key=QUICK_LONGEST_FIRST.index) if side_by_side > 1 else chosen
    with ThreadPoolExecutor(max_workers=side_by_side) as pool:
        for done in [pool.submit(run_one, ctx, name) for name in order]:
            done.result()
    index = write_index(ctx.out)
    print(f"all {len(chosen)} experiments done in {time.perf_counter() - start:.0f} s; results in {index}")


def run_one(ctx: Context, name: str) -> None:
    """One experiment, then the check that its report and every picture it links were written."""
    say(f"== {name}")
    start = time.perf_counter()
    path = EXPERIMENTS[name].run(ctx)
    assert path.is_file() and path.stat().st_size > 0, f"{name}: no report written"
    for picture in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", path.read_text()):
        file = ctx.out / picture
        assert file.is_file() and file.stat().st_size > 1000, f"{name}: picture {file} missing or empty"
    say(f"== {name}: done in {time.perf_counter() - start:.0f} s")


def say(line: str) -> None:
    """One whole line, however many experiments are writing."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def write_index(out: Path) -> Path:
    """README.md in `out`: a link and one line for every page there, the experiments' first, in their order; the
    sections written by hand below the list (from its first `## ` heading) are kept."""
    pages = [out / f"{name}.md" for name in EXPERIMENTS if (out / f"{name}.md").is_file()]
    pages += sorted(p for p in out.glob("*.md") if p not in pages and p.name != "README.md")
    lines = [index_line(page) for page in pages]
    header = (
        "# Results\n\nOne page per experiment and benchmark: its command, the machine it was measured on, the "
        "table, the picture and what it means. `python experiments/run_all.py` rewrites the experiments' pages "
        "(`--only NAME` one of them) and this list, all but "
        + ", ".join(f"{name}.md (`{command.split(' (')[0]}`)" for name, command in OUTSIDE.items())
        + ".\n\n"
    )
    index = out / "README.md"
    _, heading, sections = index.read_text().partition("\n## ") if index.is_file() else ("", "", "")
    index.write_text(header + "\n".join(lines) + "\n" + (heading + sections if heading else ""))
    return index


def index_line(page: Path) -> str:
    """`- [title](page.md): `command``: the page's first heading and the first command of its code blocks (a line
    that starts with gpt-train, python or an environment setting, without its comment)."""
    text = page.read_text()
    title = next((line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")), page.stem)
    code = [line.strip() for block in text.split("```")[1::2] for line in block.splitlines()[1:]]
    starts = ("gpt-train ", "python ", "OMP_NUM_THREADS=")
    command = next((line.split("  #")[0].strip() for line in code if line.startswith(starts)), "")
    return f"- [{title}]({page.name})" + (f": `{command}`" if command else "")


if __name__ == "__main__":
    main()
