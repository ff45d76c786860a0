"""The end-of-run summary: per-file accounting (read = decoded + skipped by reason) and totals."""
from __future__ import annotations

TYPE_CHECKING = False  # annotations only: `tailscope analyze` starts without importing typing
if TYPE_CHECKING:
    from typing import TextIO


def _ts(ns: int | None) -> str:
    import datetime as dt

    if ns is None:
        return "-"
    return dt.datetime.fromtimestamp(ns / 1e9, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def print_summary(result, out: TextIO) -> None:
    m = result.manifest
    t = m["totals"]
    out.write(f"run {m['run_id']}  status {m['status']}  {m['elapsed_s']:.2f}s  -> {result.out}\n")
    width = min(max((len(r.path) for r in result.files), default=10), 60)
    out.write(f"{'file':<{width}}  {'status':<7} {'frames':>9} {'decoded':>9} {'skipped':>8}  skip reasons\n")
    for r in result.files:
        name = r.path if len(r.path) <= width else "..." + r.path[-(width - 3):]
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(r.skipped.items())) or "-"
        skipped = sum(r.skipped.values())
        out.write(f"{name:<{width}}  {r.status:<7} {r.frames:>9} {r.decoded:>9} {skipped:>8}  {reasons}\n")
        if r.error:
            out.write(f"{'':<{width}}  ! {r.error}\n")
    out.write(
        f"total: {t['files']} files ({t['files_ok']} ok, {t['files_partial']} partial, {t['files_failed']} failed); "
        f"{t['frames']} frames = {t['decoded']} decoded + {t['skipped']} skipped; "
        f"{t['flows']} flows ({t['flows_evicted']} evicted); rows: "
        + (", ".join(f"{table} {n}" for table, n in t["rows"].items()) or "none") + "\n"
    )
