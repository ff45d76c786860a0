"""One truth across tables (tests/support/invariants.py) on the corpus, the bundled samples and
the repro captures; the lab checks every run it makes the same way (tests/lab/harness.py)."""
from __future__ import annotations

from support import invariants
from support.corpus import REPO_ROOT, repro_dir
from tailscope.jobs.run.local import AnalyzeOptions, analyze


def test_tables_agree_on_the_corpus(corpus_run):
    assert invariants.violations(corpus_run.out) == []


def test_tables_agree_on_the_samples_and_repros(tmp_path):
    inputs = [str(REPO_ROOT / "samples"), str(repro_dir())]
    run = analyze(inputs, tmp_path / "out", AnalyzeOptions(progress=False), argv=[])
    assert run.files and all(f.status == "ok" for f in run.files)
    assert invariants.violations(run.out) == []
