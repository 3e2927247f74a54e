"""The house rule for prose: the docs say what the product does now, and name the versions measured once.

    python tools/check_prose.py              # check the repository's markdown
    python tools/check_prose.py FILE...      # check these files (any path, markdown or not)

Checked: README.md, packages/*/README.md, examples/*/README.md and every docs/**/*.md. Each finding is one
line, `file:line: what`, and any finding makes the exit status 1.

One provenance line a page. A page (README.md, each docs/**/*.md, any file given by name outside packages/ and
examples/) names versions on one line at most: the line that says what its figures were measured with. A line
names a version when it holds a three-part version number (`0.3.7`, `2.13.0+cpu`, `v1.2.3`; not part of a longer
dotted number such as the address 127.0.0.1) or a torch version written `torch 2.13`/`torch==2.13`; a range a
package asks for (`torch>=2.11`) is a requirement, not a version measured. Fenced code counts as prose here:
a table copied from a benchmark gives its setting without the versions the provenance line already names. The
history of versions belongs in CHANGELOG.md, which is not checked. Package and example READMEs are exempt:
they document installs and plugin listings that print their own version numbers.

On every file, a page fails when it points at how the work went instead of at the product:

- an issue number ("issue 13", "#13");
- something shaped like a commit hash: 7 to 40 lowercase hex characters, word-bounded, with at least one digit
  and at least one letter a-f (so "decade" and "1000000" pass, "537e266" does not). A content digest the product
  prints is not a commit: a hex run right after the word "sha256" (`sha256 86c4e6aa...`) passes;
- a machine load ("load average", "load 7").

Also: README.md is at most 200 lines (the front door, read in five minutes), and every relative link or picture
points at a file that exists, and at a heading of it when the link names one (`page.md#a-heading`, GitHub's
anchors). There is no escape comment: reword the sentence.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 200

RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE), "names an issue number"),
    (re.compile(r"(?<![\w&/#])#\d+\b"), "names an issue number"),
    (re.compile(r"\bload\s+averages?\b", re.IGNORECASE), "gives a load average"),
    (re.compile(r"\bload\s+(?:of\s+)?\d", re.IGNORECASE), "gives a machine load"),
]
HEX_WORD = re.compile(r"(?<![\w.-])[0-9a-f]{7,40}(?![\w-])")
DIGEST_BEFORE = re.compile(r"sha256[\s:=`'\"]*$", re.IGNORECASE)
VERSION = re.compile(r"(?<![\d.])\d+\.\d+\.\d+(?!\.?\d)|\btorch(?:\s+|==)\d+\.\d+", re.IGNORECASE)
ONCE = "name the versions once, on the page's provenance line, and the history in CHANGELOG.md"
VERSION_EXEMPT = ("packages/", "examples/")  # package and example READMEs: installs and plugin listings
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def looks_like_commit(word: str) -> bool:
    """A hex run with digits and letters both: what `git log --oneline` prints, not an ordinary word or number."""
    return any(c.isdigit() for c in word) and any(c in "abcdef" for c in word)


def line_findings(line: str) -> Iterator[str]:
    for pattern, what in RULES:
        if match := pattern.search(line):
            yield f"{what} ({match.group(0)!r})"
    for match in HEX_WORD.finditer(line):
        if looks_like_commit(match.group(0)) and not DIGEST_BEFORE.search(line[: match.start()]):
            yield f"names what looks like a commit hash ({match.group(0)!r})"
            break


def names_versions(line: str) -> bool:
    """Whether a line names a version: a three-part version number, or torch's written `torch 2.13`."""
    return VERSION.search(line) is not None


def repeated_versions(lines: list[str]) -> Iterator[tuple[int, str]]:
    """(line number, finding) for each line after the first that names a version: one provenance line a page."""
    first = 0
    for number, line in enumerate(lines, start=1):
        if (match := VERSION.search(line)) and first:
            yield number, f"names a version again ({match.group(0)!r}; first on line {first}): {ONCE}"
        elif match:
            first = number


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a markdown file's headings: lower case, punctuation dropped, spaces to hyphens,
    a repeated heading numbered -1, -2, ... (headings inside code blocks are skipped)."""
    seen: dict[str, int] = {}
    in_code = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        slug = re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def broken_links(path: Path, line: str) -> Iterator[str]:
    """Relative links and pictures whose target file, or heading, does not exist (web links are skipped)."""
    for match in LINK.finditer(line):
        target, _, anchor = match.group(1).partition("#")
        if re.match(r"[a-z][a-z0-9+.-]*:", target):
            continue
        file = path.parent / target if target else path
        if not file.exists():
            yield f"links to {match.group(1)!r}, which does not exist"
        elif anchor and file.is_file() and file.suffix == ".md" and anchor not in anchors(file):
            yield f"links to {match.group(1)!r}, which has no such heading"


def check_file(path: Path, root: Path = ROOT) -> list[str]:
    """Every finding of one file, as `file:line: what` lines (file relative to root where it can be)."""
    try:
        name = path.resolve().relative_to(root)
    except ValueError:
        name = path
    lines = path.read_text(encoding="utf-8").splitlines()
    numbered = [(n, what) for n, line in enumerate(lines, start=1) for what in line_findings(line)]
    numbered += [(n, what) for n, line in enumerate(lines, start=1) for what in broken_links(path, line)]
    if not name.as_posix().startswith(VERSION_EXEMPT):
        numbered += list(repeated_versions(lines))
    findings = [f"{name}:{number}: {what}" for number, what in sorted(numbered, key=lambda found: found[0])]
    if path.resolve() == (root / "README.md").resolve() and len(lines) > README_MAX_LINES:
        findings.append(f"{name}:{len(lines)}: {len(lines)} lines, more than the front door's {README_MAX_LINES}")
    return findings


def prose_files(root: Path = ROOT) -> list[Path]:
    """The markdown a reader meets: the front door, each package's and example's README, and the docs."""
    files = [root / "README.md"]
    files += sorted(root.glob("packages/*/README.md")) + sorted(root.glob("examples/*/README.md"))
    files += sorted((root / "docs").rglob("*.md"))
    return [f for f in files if f.is_file()]


def check(paths: Iterable[Path], root: Path = ROOT) -> list[str]:
    return [finding for path in paths for finding in check_file(path, root)]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    paths = [Path(a) for a in args] if args else prose_files()
    missing = [p for p in paths if not p.is_file()]
    if missing:
        print(f"check_prose: no such file: {missing[0]}", file=sys.stderr)
        return 2
    findings = check(paths)
    for finding in findings:
        print(finding)
    if findings:
        print(f"check_prose: {len(findings)} finding(s) in {len(paths)} file(s)", file=sys.stderr)
        return 1
    print(f"check_prose: {len(paths)} file(s), no findings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
