"""The plugin loader's own behaviour, whatever kind of plugin: where a registration comes from."""

from __future__ import annotations

from importlib.metadata import distributions

import pytest

from gpt_core.plugins import Origin


def installed_entry_point(site, metadata: str):
    """The entry point of a distribution installed in folder `site` whose METADATA is `metadata`."""
    info = site / "plug.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(metadata)
    (info / "entry_points.txt").write_text("[gpt_tasks]\nmine = plug_module\n")
    (dist,) = distributions(path=[str(site)])
    (entry_point,) = dist.entry_points
    return entry_point


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ("Metadata-Version: 2.1\nName: plug\nVersion: 0.1\n", ("mine", "plug", "0.1")),
        ("Metadata-Version: 2.1\nName: plug\n", ("mine", "plug", "unknown")),
        ("Metadata-Version: 2.1\nVersion: 0.1\n", ("mine", "mine", "0.1")),
        ("Metadata-Version: 2.1\nName: \nVersion: \n", ("mine", "mine", "unknown")),
        ("", ("mine", "mine", "unknown")),
    ],
)
def test_a_distribution_without_a_name_or_version_gets_a_string_for_each(tmp_path, metadata, expected):
    """A METADATA without Version gave version None, which config.json recorded as null: the run never loaded."""
    origin = Origin.of(installed_entry_point(tmp_path / "site", metadata))
    assert (origin.plugin, origin.distribution, origin.version) == expected
