"""A run without enrichment sources hands every table to the native writer: no batch comes back
to Python, pyarrow is never loaded, and the dataset and the manifest's enrichment summary are
what the Python enrichment makes of the same run (jobs/enrichment/enrich.py, forced here)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds

from tailscope.jobs.enrichment.enrich_options import EnrichmentOptions
from tailscope.jobs.run import local
from tailscope.jobs.run.local import AnalyzeOptions, analyze

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAPTURES = [str(p) for p in sorted(SAMPLES.glob("*.pcap"))[:5]]


def test_analyze_never_imports_pyarrow(tmp_path):
    code = (
        "import sys; from tailscope.cli import main\n"
        f"rc = main(['analyze', *{CAPTURES!r}, '--out', {str(tmp_path / 'ds')!r}, '-q'])\n"
        "print(rc, sorted(m for m in sys.modules if m.split('.')[0] in ('pyarrow', 'numpy', 'pandas', 'duckdb')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["0", "[]"]
    assert list((tmp_path / "ds" / "packets").glob("date=*/*.parquet"))


def _table(out: Path, name: str):
    t = ds.dataset(out / name, format="parquet", partitioning="hive").to_table()
    return t.sort_by([(c, "ascending") for c in ("capture_id", "flow_id", "start" if "start" in t.column_names else "ts")])


def test_the_native_unknowns_are_the_python_enrichments(tmp_path, monkeypatch):
    options = AnalyzeOptions(progress=False, enrichment=EnrichmentOptions(site="ams1"))
    native = analyze(CAPTURES, tmp_path / "native", options)
    monkeypatch.setattr(local, "batches_pass_through_python", lambda o: True)
    python = analyze(CAPTURES, tmp_path / "python", options)
    assert native.manifest["totals"]["enrichment"] == python.manifest["totals"]["enrichment"]
    assert native.manifest["totals"]["enrichment"]["flows_site_unknown"] == 0
    for name in ("flows", "queries", "events", "packets"):
        a, b = _table(tmp_path / "native", name), _table(tmp_path / "python", name)
        assert a.schema.equals(b.schema, check_metadata=True), name
        assert a.equals(b), name
    assert native.manifest["totals"]["rows"] == python.manifest["totals"]["rows"]
