"""`analyze --reprocess`: replace the rows of inputs the dataset already holds.

An input's rows are its capture's rows (every table carries `capture_id`; the files of one
rotation set are one capture, jobs/run/local.py), so reprocessing takes a whole capture: naming one
file of a capture without the others is refused, as their rows would go with it. The old rows
leave with the run that adds the new ones:

1. every committed part that holds rows of a replaced capture is read, and what else it holds is
   staged again under the new run (a part of an old run often holds several captures);
2. the new run publishes its parts and its manifest, which lists the old parts as `retired` and
   the captures it carried over as `carried_captures` (so a later --reprocess finds them);
3. the retired parts are deleted. A run killed between 2 and 3 left them behind: recovery
   (jobs/dataset/staged.py) deletes what a committed manifest retired, before the next run.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tailscope.jobs.dataset.ledger import Ledger, LedgerError
from tailscope.jobs.dataset.staged import TABLES_BY_DATE, UNPARTITIONED, StagedWriter, run_id_of
from tailscope.jobs.dataset.storage import join, location


@dataclass
class Replacement:
    """Which captures leave the dataset, and which runs' parts hold their rows."""

    captures: set[str] = field(default_factory=set)
    runs: set[str] = field(default_factory=set)
    inputs: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.captures)


def plan(known: Ledger, inputs: list[tuple[str, str]], grown: dict[str, list[str]] | None = None) -> Replacement:
    """`inputs` are (label, sha256) of this run's inputs; `grown` maps a label to the sha256 of
    the earlier, shorter content of that capture the dataset holds (jobs/run/admission.py): those
    rows are replaced too. Refuses (LedgerError) a replacement that would take rows of an input
    the user did not name again."""
    grown = grown or {}
    named = {sha for _, sha in inputs} | {sha for shas in grown.values() for sha in shas}
    repl = Replacement()
    for label, sha in inputs:
        old = known.entries.get(sha, []) + [e for g in grown.get(label, []) for e in known.entries.get(g, [])]
        if old:
            repl.inputs.append(label)
        repl.captures.update(e.capture_id for e in old if e.capture_id is not None)
    for capture in sorted(repl.captures):
        missing = sorted({e.path for e in known.by_capture.get(capture, []) if e.sha256 not in named})
        if missing:
            raise LedgerError(
                f"--reprocess: capture {capture!r} also holds {', '.join(missing)}; name every file of the capture "
                "(its rows are replaced as a whole)"
            )
        repl.runs |= known.holders.get(capture, set())
    return repl


def stage_rest(out, repl: Replacement, run_id: str, stage: str) -> tuple[list[str], set[str], StagedWriter]:
    """Stage again what the parts holding replaced rows hold besides them. Returns the parts to
    retire (paths relative to `out`), the captures carried over, and the writer of the staged
    rest (its parts go into the run's commit)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    loc = location(out)
    if loc.remote:
        raise LedgerError(f"{out}: --reprocess works on local datasets only")
    writer = StagedWriter(out, run_id, stage=stage, tag="rw")
    retired: list[str] = []
    carried: set[str] = set()
    drop = list(repl.captures)
    for table in list(TABLES_BY_DATE) + list(UNPARTITIONED):
        root = join(out, table)
        for part in sorted(loc.find(root)):
            if run_id_of(part) not in repl.runs:
                continue
            data = pq.read_table(part, partitioning=None)
            ids = data.column("capture_id")
            gone = pc.fill_null(pc.is_in(ids, value_set=pa.array(drop, type=ids.type)), False)
            if not pc.any(gone).as_py():
                continue
            retired.append(part[len(str(out)) :].lstrip("/"))
            rest = data.filter(pc.invert(gone))
            if rest.num_rows:
                carried.update(c for c in pc.unique(rest.column("capture_id")).to_pylist() if c is not None)
                for batch in rest.to_batches():
                    writer.write(table, batch)
    return retired, carried, writer
