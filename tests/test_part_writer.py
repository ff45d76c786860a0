"""The native part writer (signatures/src/store/): what it writes reads back as the batches the
core made, with their Arrow schema, and a file it cannot write is an error naming the file."""
from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tailscope import _native, api

SAMPLES = Path(__file__).resolve().parent.parent / "samples"
CAPTURES = [SAMPLES / "midburst_loss.pcap", SAMPLES / "clean_ipv6.pcap"]


def _spec_lists(schema: pa.Schema) -> pa.Schema:
    def fix(t: pa.DataType) -> pa.DataType:
        if pa.types.is_list(t):
            f = t.value_field
            return pa.list_(pa.field("element", fix(f.type), f.nullable))
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, fix(f.type), f.nullable) for f in t])
        return t

    return pa.schema([pa.field(f.name, fix(f.type), f.nullable, f.metadata) for f in schema], metadata=schema.metadata)


def test_parts_read_back_as_the_cores_batches(tmp_path):
    made = api.tables(CAPTURES, capture_id="w")
    writer = _native.PartWriter(str(tmp_path), "RUN", "x")
    for table, t in made.items():
        for batch in t.to_batches():
            writer.write(table, batch)
    parts, rows = writer.close()
    assert rows == {table: t.num_rows for table, t in made.items() if t.num_rows}
    for table, t in made.items():
        files = sorted(path for name, _, path in parts if name == table)
        assert len(files) == (1 if t.num_rows else 0)
        if not files:
            continue
        back = pq.read_table(files[0], partitioning=None)
        # the Parquet spec names a list's values `element` (as pyarrow wrote them before): the
        # only difference from the core's Arrow schema, whose lists name them `item`
        assert back.schema.equals(_spec_lists(t.schema), check_metadata=True), table
        assert back.equals(t.cast(back.schema)), table
        # one row group per batch written
        assert pq.ParquetFile(files[0]).metadata.num_row_groups == len(t.to_batches())


def test_a_part_that_cannot_be_written_names_the_file(tmp_path):
    blocker = tmp_path / "stage"
    blocker.write_text("a file where the staging directory should be")
    writer = _native.PartWriter(str(blocker), "RUN")
    batch = api.tables(CAPTURES[:1])["flows"].to_batches()[0]
    with pytest.raises(OSError, match=f"{blocker}/flows"):
        writer.write("flows", batch)
        writer.write("flows", batch)  # the first may be queued before the writer fails
        writer.close()
    with pytest.raises(OSError, match=f"{blocker}/flows"):
        writer.close()  # and it stays failed


def test_a_batch_over_two_days_is_split_between_their_partitions(tmp_path):
    ts = pa.array([86_400 * 10**9 - 1, 86_400 * 10**9], pa.timestamp("ns", tz="UTC"))
    writer = _native.PartWriter(str(tmp_path), "RUN")
    writer.write("events", pa.record_batch({"ts": ts, "n": pa.array([1, 2])}))
    parts, rows = writer.close()
    assert rows == {"events": 2}
    assert [(d, pq.read_table(p).column("n").to_pylist()) for _, d, p in parts] == [("1970-01-01", [1]), ("1970-01-02", [2])]
