"""Compare two tailscope datasets (e.g. the same trace analyzed by two builds) table by table.

    .venv/bin/python benchmarks/compare_datasets.py OLD_DIR NEW_DIR [--duckdb] [--sorted]

Needs pyarrow (and duckdb for --duckdb): run it with the tailscope venv's interpreter. For each
table and partition it checks that both sides have the same part files (run ids aside), the same
schema (with its metadata) and the same values in the same order; `files` is compared without its
run_id column. It prints the bytes on disk of each side. With --duckdb, it also reads every
partition through DuckDB and compares the results and their column types; packets through the
staging view, so a build that stores fewer columns compares by the columns users see (and where
the old side stored `tag_names`/`retx_cause`, they are checked against the view's). With --sorted, the
rows of each partition are compared once sorted (ORDER BY ALL) whatever part files hold them:
for datasets whose parallel captures (`analyze --jobs N`) interleaved their batches. Exits 1 on
any difference.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def part_files(root: str) -> dict[str, Path]:
    out = {}
    for p in sorted(Path(root).rglob("*.parquet")):
        key = re.sub(r"part-\d{8}T\d{6}Z-[0-9a-f]+-", "part-RUN-", str(p.relative_to(root)))
        out[key] = p
    return out


def by_partition(files: dict[str, Path]) -> dict[tuple[str, str], list[Path]]:
    d: dict[tuple[str, str], list[Path]] = {}
    for key, p in files.items():
        parts = Path(key).parts
        d.setdefault((parts[0], str(Path(*parts[1:-1]))), []).append(p)
    return d


def load(paths: list[Path]) -> pa.Table:
    t = pa.concat_tables([pq.read_table(p) for p in paths])
    return t.drop(["run_id"]) if "run_id" in t.column_names else t


def duckdb_read(paths: list[Path], table: str, order: bool = False):
    """The rows as DuckDB reads them; packets through the staging view (the columns users see,
    some derived rather than stored), with `ts` in nanoseconds."""
    import duckdb

    files = [str(p) for p in paths]
    con = duckdb.connect()
    source = f"read_parquet({files})"
    if table == "packets":
        from tailscope.jobs.analytics.db import packet_tag_sql, packets_view

        raw = con.sql(f"select * from {source}").columns
        packets_view(con, f"read_parquet({files}, union_by_name=true)")
        if "tag_names" in raw:  # parts of a build that stored them: they must equal the view's
            derived = packet_tag_sql()
            n = con.sql(f"select count(*) from {source} where tag_names is distinct from {derived['tag_names']} "
                        f"or retx_cause is distinct from {derived['retx_cause']}").fetchall()[0][0]
            print(f"   stored tag_names/retx_cause against the view's: {'same' if n == 0 else f'{n} rows DIFFERENT'}")
            if n:
                raise SystemExit(1)
        source, select = "packets", 'ts_ns, * exclude (ts, ts_ns, "date")'
    else:
        select = "* exclude (run_id)" if table == "files" else "*"
    rows = con.sql(f"select {select} from {source}" + (" order by all" if order else "")).to_arrow_table()
    types = con.sql(f"describe select {select} from {source}").fetchall()
    return rows, types


def main(argv: list[str]) -> int:
    old, new = argv[1], argv[2]
    if "--sorted" in argv:
        return compare_sorted(old, new)
    fo, fn = part_files(old), part_files(new)
    ok = True
    if sorted(fo) != sorted(fn):
        print("different part files:", sorted(set(fo) ^ set(fn)))
        ok = False
    po, pn = by_partition(fo), by_partition(fn)
    for key in sorted(set(po) | set(pn)):
        table, part = key
        if key not in po or key not in pn:
            print(f"{table}/{part}: only on one side")
            ok = False
            continue
        a, b = load(po[key]), load(pn[key])
        same_schema = a.schema.equals(b.schema, check_metadata=True)
        same = same_schema and a.equals(b)
        sa, sb = (sum(p.stat().st_size for p in ps) for ps in (po[key], pn[key]))
        print(f"{table}/{part}: rows {a.num_rows} vs {b.num_rows}, schema {'same' if same_schema else 'DIFFERENT'}, "
              f"values {'same' if same else 'DIFFERENT'}, bytes {sa:,} -> {sb:,} ({(sb - sa) / max(sa, 1) * 100:+.1f}%)")
        if not same:
            ok = False
            if same_schema and a.num_rows == b.num_rows:
                print("   columns that differ:", [c for c in a.column_names if not a[c].equals(b[c])])
        if "--duckdb" in argv:
            (ra, ta), (rb, tb) = duckdb_read(po[key], table), duckdb_read(pn[key], table)
            dsame = ra.equals(rb) and ta == tb
            print(f"   duckdb: {'same' if dsame else 'DIFFERENT'}")
            ok &= dsame
    print("IDENTICAL" if ok else "DIFFERENT")
    return 0 if ok else 1


def compare_sorted(old: str, new: str) -> int:
    """Each table and partition's rows, sorted, through DuckDB (part files and their names aside)."""
    po, pn = (by_partition(part_files(d)) for d in (old, new))
    ok = set(po) == set(pn)
    if not ok:
        print("partitions on one side only:", sorted(set(po) ^ set(pn)))
    for key in sorted(set(po) & set(pn)):
        (ra, ta), (rb, tb) = duckdb_read(po[key], key[0], order=True), duckdb_read(pn[key], key[0], order=True)
        same = ra.equals(rb) and ta == tb
        print(f"{key[0]}/{key[1]}: rows {ra.num_rows} vs {rb.num_rows}, sorted {'same' if same else 'DIFFERENT'}")
        ok &= same
    print("IDENTICAL (sorted)" if ok else "DIFFERENT")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
