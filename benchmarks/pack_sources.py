"""The sources benchmarks/gpu_pack.sh builds its wheels from, as a manifest: the SHA-256 of every file under each
package's src/ (packages/gpt-* and examples/gpt-*, as gpu_pack.sh builds them) and of its pyproject.toml, MANIFEST.in,
setup.py and setup.cfg where there are such; bytecode, *.egg-info and build output are left out, as git ignores them.
gpu_check.sh checks the manifest against the files themselves, so it works on a machine that has the working tree
without its .git.

    python benchmarks/pack_sources.py write .gpu/sources.sha256   # gpu_pack.sh, before it builds the wheels
    python benchmarks/pack_sources.py check .gpu/sources.sha256   # gpu_check.sh, before it installs them

`check` exits 0 when every file matches; else it prints one line saying which differ and exits 1.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_FOLDERS = ("packages/gpt-*", "examples/gpt-*")
BUILD_FILES = ("pyproject.toml", "MANIFEST.in", "setup.py", "setup.cfg")
LEFT_OUT_FOLDERS = {"__pycache__", "build", "dist", ".pytest_cache", ".ruff_cache"}
LEFT_OUT_SUFFIXES = (".pyc", ".pyo")
SHOWN = 3  # differing files named in the one line; the rest counted


def source_files(root: Path) -> list[Path]:
    """Every file the wheels are built from, relative to `root`, sorted."""
    found = []
    for pattern in PACKAGE_FOLDERS:
        for package in sorted(root.glob(pattern)):
            found += [package / name for name in BUILD_FILES if (package / name).is_file()]
            found += [
                path
                for path in (package / "src").rglob("*")
                if path.is_file()
                and not path.name.endswith(LEFT_OUT_SUFFIXES)
                and not any(part in LEFT_OUT_FOLDERS or part.endswith(".egg-info") for part in path.parts)
            ]
    return sorted(path.relative_to(root) for path in found)


def manifest(root: Path) -> dict[str, str]:
    """{relative path: SHA-256 of its bytes} of every source file."""
    return {path.as_posix(): hashlib.sha256((root / path).read_bytes()).hexdigest() for path in source_files(root)}


def differences(recorded: dict[str, str], now: dict[str, str]) -> list[str]:
    """Each file that differs, with how: changed, not in the pack (new here), or gone here."""
    changed = [f"{path} (changed)" for path in sorted(recorded.keys() & now.keys()) if recorded[path] != now[path]]
    new = [f"{path} (not in the pack)" for path in sorted(now.keys() - recorded.keys())]
    gone = [f"{path} (gone from the tree)" for path in sorted(recorded.keys() - now.keys())]
    return changed + new + gone


def read_manifest(path: Path) -> dict[str, str]:
    recorded = {}
    for line in path.read_text().splitlines():
        digest, _, name = line.partition("  ")
        recorded[name] = digest
    return recorded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["write", "check"])
    parser.add_argument("manifest", type=Path, help="the manifest file (gpu_pack.sh's: .gpu/sources.sha256)")
    args = parser.parse_args()
    now = manifest(ROOT)
    if args.action == "write":
        args.manifest.write_text("".join(f"{digest}  {name}\n" for name, digest in now.items()))
        return
    if not args.manifest.is_file():
        sys.exit(f"the pack has no manifest of its sources ({args.manifest})")
    found = differences(read_manifest(args.manifest), now)
    if found:
        more = f" and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
        files = "1 file differs" if len(found) == 1 else f"{len(found)} files differ"
        sys.exit(f"the pack was built from other sources: {files}: {', '.join(found[:SHOWN])}{more}")


if __name__ == "__main__":
    main()
