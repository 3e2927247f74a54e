"""The prose checker fails on each kind of passage that points at how the work went, on a page that names
versions on more than one line, passes ordinary technical prose, and passes the repository as it stands."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import check_prose  # noqa: E402

PLANTED = {
    "issue number": "The scoring changed since issue 16.",
    "issue number with a hash": "The default moved to 2 layers (#13).",
    "commit hash": "Measured on the package sources of commit 537e266.",
    "long commit hash": "Built from 40b9f0a1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7.",
    "load average": "The 1-minute load average was 4.35 when it started.",
    "load figure": "One thread, because the 2-core machine was at load 7-9.",
    "a second version line": "The same step with 0.3.6's source took 1.02x.",
    "a second torch version": "Under torch 2.12 the ratio was 1.10.",
}
PROVENANCE = "Measured with gpt-from-scratch 0.3.7, torch 2.13.0+cpu, Python 3.11.7, on a 2-core CPU."

ORDINARY = [
    "A decade of 1000000 sequences, scored at 0.99997, in bf16 and float64 (lr 2e-5, 1e-12).",
    "The facade of a cafe: deadbeef is a word, not a commit; so is accede.",
    "The corpus has sha256 86c4e6aa9db7c042 and the download is verified.",
    "Colour #a0b1c2, the #-prefixed anchors, and HTML&#39;s entity 39.",
    "Each head's z (B, H, T, d); the obsession with reagents; an agentic word.",
    "The nox session `docs` runs this check; a user session of `gpt-train serve` on 127.0.0.1:8765.",
    "The packages ask for torch>=2.4 and Python 3.11; glibc 2.36 keeps freed memory; version 1 of the contract.",
    "The model loads GPT-2 weights and downloads nothing; heads 0.0 to 0.3.",
    "Row 6 of 250,050 held-out sequences; x3.85 and 12.9x; 2,924 MiB.",
]


def write(tmp_path: Path, text: str, name: str = "page.md") -> Path:
    path = tmp_path / name
    path.write_text(text + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", list(PLANTED))
def test_a_planted_passage_of_each_kind_fails_naming_its_line(tmp_path: Path, kind: str) -> None:
    page = write(tmp_path, f"# A page\n\n{PROVENANCE}\n\n" + PLANTED[kind])
    findings = check_prose.check_file(page, root=tmp_path)
    assert findings, kind
    assert all(f.startswith("page.md:5: ") for f in findings), findings


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_technical_prose_passes(tmp_path: Path, text: str) -> None:
    assert check_prose.check_file(write(tmp_path, f"{PROVENANCE}\n\n{text}"), root=tmp_path) == []


def test_one_provenance_line_passes_and_each_further_line_naming_a_version_fails(tmp_path: Path) -> None:
    once = write(tmp_path, f"# Speed\n\n{PROVENANCE}\n\n| a | b |\n|---|---|")
    assert check_prose.check_file(once, root=tmp_path) == []
    history = "## 0.3.7 against 0.3.6\n\n```\ntorch 2.13.0+cpu, 2 threads\n```"
    page = write(tmp_path, f"# Speed\n\n{PROVENANCE}\n\n{history}")
    findings = check_prose.check_file(page, root=tmp_path)
    assert [f.split(": names a version again")[0] for f in findings] == ["page.md:5", "page.md:8"], findings
    assert "first on line 3" in findings[0] and "('0.3.7';" in findings[0]


@pytest.mark.parametrize("version", ["0.3.7", "v1.2.3", "2.13.0+cpu", "5.24.0.", "torch 2.13", "torch==2.13.0"])
def test_each_way_of_writing_a_version_counts(version: str) -> None:
    assert check_prose.names_versions(f"measured with {version} here")


@pytest.mark.parametrize("text", ["127.0.0.1", "torch>=2.4", "Python 3.11", "x3.85 and 0.999992", "1.2e-3"])
def test_addresses_requirements_and_plain_numbers_are_not_versions(text: str) -> None:
    assert not check_prose.names_versions(text)


def test_package_and_example_readmes_may_name_versions_more_than_once(tmp_path: Path) -> None:
    twice = f"{PROVENANCE}\n\n`pip install gpt-task-reverse==0.2.0`"
    for folder in ("packages/gpt-tasks", "examples/gpt-task-reverse"):
        (tmp_path / folder).mkdir(parents=True)
        assert check_prose.check_file(write(tmp_path / folder, twice, name="README.md"), root=tmp_path) == []
    (tmp_path / "docs").mkdir()
    assert check_prose.check_file(write(tmp_path / "docs", twice), root=tmp_path) != []


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
    page = write(tmp_path, PLANTED["commit hash"] + "\n" + PLANTED["issue number"])
    assert check_prose.main([str(page)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and out[0].endswith(":1: names what looks like a commit hash ('537e266')"), out
    assert ":2: names an issue number" in out[1]


def test_the_prose_files_are_the_front_door_the_package_and_example_readmes_and_the_docs() -> None:
    names = {p.relative_to(check_prose.ROOT).as_posix() for p in check_prose.prose_files()}
    assert "README.md" in names and "docs/README.md" in names
    assert {"packages/gpt-core/README.md", "examples/gpt-task-reverse/README.md"} <= names
    assert any(n.startswith("docs/results/") for n in names)


def test_the_repository_passes() -> None:
    assert check_prose.check(check_prose.prose_files()) == []
    assert check_prose.main([]) == 0
