"""Query results as text: the formats `tailscope db -e` and `tailscope conn` print.

Every row is printed (a listing that silently stops at 40 rows, as DuckDB's `show()` does, reads
as the whole answer). Values are rendered once, here: NULL as empty in csv and markdown, lists comma-separated, `NULL`
in box, JSON null in json; timestamps in ISO 8601.
"""
from __future__ import annotations

import datetime as dt

TYPE_CHECKING = False  # the CLI imports this module for FORMATS when it builds its parsers: no typing
if TYPE_CHECKING:
    from typing import Any, Sequence, TextIO

FORMATS = ("box", "csv", "tsv", "json", "markdown")


def _text(v: Any, null: str) -> str:
    if v is None:
        return null
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return ",".join(_text(x, null) for x in v)
    return str(v)


def _json_value(v: Any):
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if type(v).__name__ == "Decimal":  # decimal.Decimal, without importing decimal for it
        return float(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x) for x in v]
    return v


def write(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str, out: TextIO) -> None:
    import csv
    import json

    if fmt == "csv" or fmt == "tsv":
        w = csv.writer(out, lineterminator="\n", delimiter="," if fmt == "csv" else "\t")
        w.writerow(columns)
        w.writerows([[_text(v, "") for v in r] for r in rows])
    elif fmt == "json":
        json.dump([{c: _json_value(v) for c, v in zip(columns, r)} for r in rows], out, indent=1)
        out.write("\n")
    elif fmt == "markdown":
        cells = [[_text(v, "").replace("|", "\\|") for v in r] for r in rows]
        out.write("| " + " | ".join(columns) + " |\n")
        out.write("|" + "|".join("---" for _ in columns) + "|\n")
        for r in cells:
            out.write("| " + " | ".join(r) + " |\n")
    elif fmt == "box":
        cells = [[_text(v, "NULL") for v in r] for r in rows]
        widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
        def line(l, m, r):
            return l + m.join("─" * (w + 2) for w in widths) + r + "\n"
        out.write(line("┌", "┬", "┐"))
        out.write("│" + "│".join(f" {c:<{w}} " for c, w in zip(columns, widths)) + "│\n")
        out.write(line("├", "┼", "┤"))
        for r in cells:
            out.write("│" + "│".join(f" {v:<{w}} " for v, w in zip(r, widths)) + "│\n")
        out.write(line("└", "┴", "┘"))
        out.write(f"{len(rows)} rows\n" if len(rows) != 1 else "1 row\n")
    else:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(FORMATS)})")
