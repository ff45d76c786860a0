"""docs/schemas.md documents every column of every table (keeps the docs true)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from tailscope import _native
from tailscope.jobs.analytics.db import packet_tag_sql
from tailscope.jobs.enrichment.enrich import enriched_schema
from tailscope.jobs.run.run_model import files_table

DOC = (Path(__file__).resolve().parents[1] / "docs" / "schemas.md").read_text()


def _documented(section: str) -> set[str]:
    body = DOC.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    names = set()
    for line in body.splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([a-z0-9_]+)`", line.split("|")[1]))
    return names


@pytest.mark.parametrize(
    "section,schema",
    [
        ("packets", _native.packet_schema()),
        ("flows", enriched_schema(_native.flow_schema())),
        ("events", _native.event_schema()),
        ("queries", enriched_schema(_native.query_schema())),
        ("files", files_table([], "").schema),
    ],
)
def test_every_column_documented(section, schema):
    documented = _documented(section)
    # the packets view derives columns the files do not store (db.packet_tag_sql)
    derived = list(packet_tag_sql()) if section == "packets" else []
    missing = [n for n in [f.name for f in schema] + derived if n not in documented]
    assert not missing, f"columns of {section} missing from docs/schemas.md: {missing}"
    extra = documented - {f.name for f in schema} - set(derived) - {"date"}
    assert not extra, f"docs/schemas.md documents columns {section} does not have: {extra}"


def test_schema_version_documented():
    assert f"Schema version **{_native.SCHEMA_VERSION}**" in DOC
