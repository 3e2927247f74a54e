"""The prose checker fails on each kind of passage that tells how a number was produced, passes ordinary
technical prose, and passes the repository as it stands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import check_prose  # noqa: E402

PLANTED = {
    "session": "The figure was measured in this session on the shared machine.",
    "Session, capitalised": "Session notes: the benchmark ran twice.",
    "agent": "Other agents' runs held the machine.",
    "issue number": "The scoring changed since issue 16.",
    "issue number with a hash": "The default moved to 2 layers (#13).",
    "commit hash": "Measured on the package sources of commit 537e266.",
    "long commit hash": "Built from 40b9f0a1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7.",
    "load average": "The 1-minute load average was 4.35 when it started.",
    "load figure": "One thread, because the 2-core machine was at load 7-9.",
}

ORDINARY = [
    "A decade of 1000000 sequences, scored at 0.99997, in bf16 and float64 (lr 2e-5, 1e-12).",
    "The facade of a cafe: deadbeef is a word, not a commit; so is accede.",
    "The corpus has sha256 86c4e6aa9db7c042 and the download is verified.",
    "Colour #a0b1c2, the #-prefixed anchors, and HTML&#39;s entity 39.",
    "Each head's z (B, H, T, d); the obsession with reagents; an agentic word.",
    "The model loads GPT-2 weights and downloads nothing; heads 0.0 to 0.3.",
    "Row 6 of 250,050 held-out sequences; x3.85 and 12.9x; 2,924 MiB.",
]


def write(tmp_path: Path, text: str, name: str = "page.md") -> Path:
    path = tmp_path / name
    path.write_text(text + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", list(PLANTED))
def test_a_planted_passage_of_each_kind_fails_naming_its_line(tmp_path: Path, kind: str) -> None:
    page = write(tmp_path, "# A page\n\nA clean first paragraph.\n\n" + PLANTED[kind])
    findings = check_prose.check_file(page, root=tmp_path)
    assert findings, kind
    assert all(f.startswith("page.md:5: ") for f in findings), findings


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_technical_prose_passes(tmp_path: Path, text: str) -> None:
    assert check_prose.check_file(write(tmp_path, text), root=tmp_path) == []


def test_a_link_to_a_missing_file_fails_and_existing_or_web_links_pass(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# There\n\n## A heading: with `code` (and more)\n")
    page = write(tmp_path, "# Top\n\n[ok](there.md) [web](https://example.org/x.md) ![gone](gone.png) [top](#top)")
    findings = check_prose.check_file(page, root=tmp_path)
    assert findings == ["page.md:3: links to 'gone.png', which does not exist"]


def test_a_link_to_a_heading_that_is_not_there_fails(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# There\n\n## A heading: with `code` (and more)\n\n## Twice\n\n## Twice\n")
    good = "[a](there.md#a-heading-with-code-and-more) [b](there.md#twice-1) [c](#page)"
    bad = "[d](there.md#no-such-heading) [e](#nowhere)"
    page = write(tmp_path, f"# Page\n\n{good}\n{bad}")
    assert check_prose.check_file(page, root=tmp_path) == [
        "page.md:4: links to 'there.md#no-such-heading', which has no such heading",
        "page.md:4: links to '#nowhere', which has no such heading",
    ]


def test_a_readme_over_200_lines_fails_and_200_pass(tmp_path: Path) -> None:
    readme = write(tmp_path, "\n".join(["line"] * 200), name="README.md")
    assert check_prose.check_file(readme, root=tmp_path) == []
    readme.write_text("\n".join(["line"] * 201) + "\n")
    assert check_prose.check_file(readme, root=tmp_path) == ["README.md:201: 201 lines, more than the front door's 200"]


def test_main_exits_1_with_one_line_per_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = write(tmp_path, PLANTED["commit hash"] + "\n" + PLANTED["agent"])
    assert check_prose.main([str(page)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].endswith(":1: names what looks like a commit hash ('537e266')"), out
    assert ":2: says 'agent'" in out[1]


def test_the_prose_files_are_the_front_door_the_package_and_example_readmes_and_the_docs() -> None:
    names = {p.relative_to(check_prose.ROOT).as_posix() for p in check_prose.prose_files()}
    assert "README.md" in names and "docs/README.md" in names
    assert {"packages/gpt-core/README.md", "examples/gpt-task-reverse/README.md"} <= names
    assert any(n.startswith("docs/results/") for n in names)


def test_the_repository_passes() -> None:
    assert check_prose.check(check_prose.prose_files()) == []
    assert check_prose.main([]) == 0
