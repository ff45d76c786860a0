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

`judge` decides one input by these rules; both engines call it (the local engine in `take`, the
Spark engine on its driver and in its tasks, jobs/run/spark_engine.py and spark_groups.py).
"""
from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tailscope.jobs.dataset.ledger import Entry, Ledger, window_covers
from tailscope.jobs.dataset.storage import is_url
from tailscope.jobs.run.run_model import AnalyzeOptions, FileReport, Planned, _open_url, fail


@dataclass
class Admission:
    already: list[str] = field(default_factory=list)  # labels skipped: their rows are in the dataset
    below_horizon: list[str] = field(default_factory=list)  # labels skipped: pruned


def hashes(path: Path | str, prefixes: list[int]) -> tuple[str, dict[int, str]]:
    """sha256 of the file (a local path or an fsspec URL) and of its first `n` bytes for each n in
    `prefixes`, in one pass."""
    h = hashlib.sha256()
    want = sorted(n for n in set(prefixes) if n > 0)
    got: dict[int, str] = {}
    done = 0
    with (_open_url(str(path)) if is_url(path) else open(path, "rb")) as fh:
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


# sizes -> {size: sha256 of the input's first `size` bytes}: read only when a grown capture is
# possible (the dataset holds a shorter input at the same path).
PrefixHashes = Callable[[list[int]], dict[int, str]]


def grown_entries(known: Ledger, path: str, sha256: str | None, size: int | None, prefix: PrefixHashes) -> list[Entry]:
    """The dataset's entries for `path` whose content is this input's first bytes."""
    older = [e for e in known.by_path.get(path, []) if e.size is not None and e.size < (size or 0) and e.sha256 != sha256]
    if not older:
        return []
    got = prefix([e.size for e in older])
    return [e for e in older if got.get(e.size) == e.sha256]


def grown_from(known: Ledger, p: Planned) -> list[Entry]:
    """The dataset's entries for p's path whose content is p's first bytes (p's sha256 is set)."""
    return grown_entries(known, p.report.path, p.report.sha256, p.report.size, lambda sizes: hashes(p.file.path, sizes)[1])


def _window(ns: int | None) -> str:
    import datetime as dt

    return "-" if ns is None else dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).isoformat().replace("+00:00", "Z")


TAKE, ALREADY, BELOW_HORIZON, REFUSED = "take", "already", "below_horizon", "refused"


@dataclass
class Verdict:
    kind: str  # TAKE, ALREADY (skipped, its rows are in), BELOW_HORIZON (skipped, pruned), REFUSED
    reason: str = ""  # REFUSED: the one line a user reads


def judge(known: Ledger, label: str, sha256: str, size: int | None, options: AnalyzeOptions, prefix: PrefixHashes) -> Verdict:
    """What an incremental run does with one input (see the module's rules)."""
    held = known.entries.get(sha256, [])
    if held:
        if any(window_covers(e, options.since_ns, options.until_ns) for e in held):
            return Verdict(ALREADY)
        e = held[0]
        return Verdict(REFUSED, f"{label}: the dataset holds it from run {e.run_id}, which took frames in "
                                f"[{_window(e.since_ns)}, {_window(e.until_ns)}) only; this run asks "
                                f"[{_window(options.since_ns)}, {_window(options.until_ns)}): --reprocess replaces its rows")
    if sha256 in known.pruned:
        return Verdict(BELOW_HORIZON)
    grown = grown_entries(known, label, sha256, size, prefix)
    if grown:
        e = grown[0]
        return Verdict(REFUSED, f"{label}: grew since run {e.run_id} analysed its first {e.size} bytes; reading it whole "
                                "would count those twice: --reprocess replaces their rows with the whole file's")
    return Verdict(TAKE)


def take(planned: list[Planned], reports: list[FileReport], known: Ledger, options: AnalyzeOptions, sha256_of) -> Admission:
    """Incremental runs: drop from `planned` what the dataset holds (see the module's rules).
    Refused inputs stay in `reports`, failed, with the reason; skipped ones leave it."""
    adm = Admission()
    kept = []
    for p in planned:
        p.report.sha256 = p.report.sha256 or sha256_of(p.file.path)
        label = p.report.path
        v = judge(known, label, p.report.sha256, p.report.size, options, lambda sizes, p=p: hashes(p.file.path, sizes)[1])
        if v.kind == ALREADY:
            adm.already.append(label)
            reports.remove(p.report)
        elif v.kind == BELOW_HORIZON:
            adm.below_horizon.append(label)
            reports.remove(p.report)
        elif v.kind == REFUSED:
            fail(p.report, v.reason, kind="input")
        else:
            kept.append(p)
    planned[:] = kept
    return adm
