"""Which planned inputs a run takes, given what the dataset already holds (jobs/dataset/ledger.py).

Nothing is counted twice and nothing is skipped without a word. An input is
* taken when the dataset does not hold it;
* skipped as `already_processed` when a committed run processed the same content (sha256) with
  a window that covered this run's (`--since`/`--until`);
* refused (status failed, one line naming `--reprocess`) when the dataset holds it but its run
  took a narrower window than this run asks: skipping it would leave out frames silently, taking
  it would count the window both runs share twice;
* refused the same way when it is a capture that grew: the file at the same path, when the
  dataset took it, was this file's first bytes (tcpdump was still writing it): reading it whole
  would count the first part twice;
* skipped as `below_horizon` when `tailscope prune` removed its rows (every packet older than the
  retention horizon): decoding it again would write rows the horizon hides, until the next prune.
`--reprocess` takes held inputs (and grown captures) again and replaces their rows
(jobs/run/reprocess.py); it re-analyses a pruned input too, whose rows stay below the horizon.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from tailscope.jobs.dataset.ledger import Entry, Ledger, window_covers
from tailscope.jobs.run.run_model import AnalyzeOptions, FileReport, Planned, fail


@dataclass
class Admission:
    already: list[str] = field(default_factory=list)  # labels skipped: their rows are in the dataset
    below_horizon: list[str] = field(default_factory=list)  # labels skipped: pruned


def hashes(path: Path, prefixes: list[int]) -> tuple[str, dict[int, str]]:
    """sha256 of the file and of its first `n` bytes for each n in `prefixes`, in one pass."""
    h = hashlib.sha256()
    want = sorted(n for n in set(prefixes) if n > 0)
    got: dict[int, str] = {}
    done = 0
    with open(path, "rb") as fh:
        while True:
            size = 1 << 20
            if want and want[0] - done < size:
                size = want[0] - done
            chunk = fh.read(size)
            if not chunk:
                break
            h.update(chunk)
            done += len(chunk)
            while want and want[0] == done:
                got[want.pop(0)] = h.copy().hexdigest()
    return h.hexdigest(), got


def grown_from(known: Ledger, p: Planned) -> list[Entry]:
    """The dataset's entries for p's path whose content is p's first bytes (p's sha256 is set)."""
    older = [e for e in known.by_path.get(p.report.path, []) if e.size is not None and e.size < (p.report.size or 0)
             and e.sha256 != p.report.sha256]
    if not older:
        return []
    _, prefix = hashes(p.file.path, [e.size for e in older])
    return [e for e in older if prefix.get(e.size) == e.sha256]


def _window(ns: int | None) -> str:
    import datetime as dt

    return "-" if ns is None else dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat().replace("+00:00", "Z")


def take(planned: list[Planned], reports: list[FileReport], known: Ledger, options: AnalyzeOptions, sha256_of) -> Admission:
    """Incremental runs: drop from `planned` what the dataset holds (see the module's rules).
    Refused inputs stay in `reports`, failed, with the reason; skipped ones leave it."""
    adm = Admission()
    kept = []
    for p in planned:
        p.report.sha256 = p.report.sha256 or sha256_of(p.file.path)
        label = p.report.path
        held = known.entries.get(p.report.sha256, [])
        if held:
            if any(window_covers(e, options.since_ns, options.until_ns) for e in held):
                adm.already.append(label)
                reports.remove(p.report)
            else:
                e = held[0]
                fail(p.report, f"{label}: the dataset holds it from run {e.run_id}, which took frames in "
                               f"[{_window(e.since_ns)}, {_window(e.until_ns)}) only; this run asks "
                               f"[{_window(options.since_ns)}, {_window(options.until_ns)}): --reprocess replaces its rows",
                     kind="input")
            continue
        if p.report.sha256 in known.pruned:
            adm.below_horizon.append(label)
            reports.remove(p.report)
            continue
        grown = grown_from(known, p)
        if grown:
            e = grown[0]
            fail(p.report, f"{label}: grew since run {e.run_id} analysed its first {e.size} bytes; reading it whole "
                           "would count those twice: --reprocess replaces their rows with the whole file's", kind="input")
            continue
        kept.append(p)
    planned[:] = kept
    return adm
