"""Query results as text: the formats `tailscope db -e` and `tailscope conn` print.

Every row is printed (a listing that silently stops at 40 rows, as DuckDB's `show()` does, reads
as the whole answer). Values are rendered once, here: NULL as empty in csv and markdown, lists comma-separated, `NULL`
in box, JSON null in json; timestamps in ISO 8601. In json an integer id (a column named `id` or
`*_id`: flow_id is a 64-bit hash) is a string, and so is any integer a double cannot hold exactly
(beyond ±2^53): jq and JavaScript read JSON numbers as doubles, and 2269876965333550357 would come
out as 2269876965333550300.
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


# the largest integer a double (a JSON number as jq and JavaScript read it) holds exactly
_EXACT_IN_A_DOUBLE = 2**53 - 1


def _is_id(column: str) -> bool:
    return column == "id" or column.endswith("_id")


def _json_value(v: Any, is_id: bool = False):
    if isinstance(v, int) and not isinstance(v, bool) and (is_id or abs(v) > _EXACT_IN_A_DOUBLE):
        return str(v)
    if isinstance(v, (dt.datetime, dt.date, dt.time)):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return v.total_seconds()
    if type(v).__name__ == "Decimal":  # decimal.Decimal, without importing decimal for it
        return float(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, dict):
        return {str(k): _json_value(x, _is_id(str(k))) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_value(x, is_id) for x in v]
    return v


def write(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str, out: TextIO) -> None:
    import csv
    import json

    if fmt == "csv" or fmt == "tsv":
        w = csv.writer(out, lineterminator="\n", delimiter="," if fmt == "csv" else "\t")
        w.writerow(columns)
        w.writerows([[_text(v, "") for v in r] for r in rows])
    elif fmt == "json":
        ids = [_is_id(c) for c in columns]
        json.dump([{c: _json_value(v, i) for c, v, i in zip(columns, r, ids)} for r in rows], out, indent=1)
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
