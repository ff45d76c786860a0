//! Compaction (`tailscope compact`, jobs/dataset/compact.py): many small part files of one table
//! rewritten as few large ones by the same [`PartWriter`] a run uses, so the new files have the
//! run's encodings, row groups and file size limit, and rows keep their order.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::{RecordBatch, RecordBatchReader};
use arrow_schema::SchemaRef;
use arrow_select::concat::concat_batches;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use super::parts::{PartWriter, StagedPart, StoreError};

/// Rows per row group of a compacted file: the size of the engines' batches (each batch is one
/// row group, `PartWriter::write`); small runs' parts hold smaller ones, which is what makes many
/// of them slow to scan.
pub const COMPACT_BATCH_ROWS: usize = 65_536;

/// Read `inputs` (part files of `table`, in order) and stage their rows under `stage` as
/// `part-<run_id>-<tag><seq>.parquet`. Parts whose schemas differ (written by different
/// versions) go to different files: one Parquet file has one schema.
pub fn compact(
    stage: &Path,
    run_id: &str,
    table: &str,
    inputs: &[PathBuf],
    max_rows_per_file: Option<usize>,
) -> Result<Vec<StagedPart>, StoreError> {
    let mut out = Vec::new();
    let mut current: Option<(SchemaRef, PartWriter, Vec<RecordBatch>, usize)> = None;
    let mut schemas = 0usize;
    for path in inputs {
        let err = |doing: &str, e: &dyn std::fmt::Display| StoreError(format!("{}: {doing}: {e}", path.display()));
        let file = File::open(path).map_err(|e| err("opening the part file", &e))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| err("reading the part file", &e))?
            .with_batch_size(COMPACT_BATCH_ROWS)
            .build()
            .map_err(|e| err("reading the part file", &e))?;
        let schema = reader.schema();
        if current.as_ref().is_none_or(|(s, ..)| *s != schema) {
            if let Some((s, mut w, pending, _)) = current.take() {
                flush(&mut w, table, &s, pending)?;
                out.extend(w.close()?);
            }
            // no dash in the tag: `part-<run_id>-<tag><seq>` must name its run (staged.run_id_of), or
            // recovery would take the compacted parts for a crashed run's orphans
            let tag = format!("c{schemas}");
            schemas += 1;
            current = Some((schema.clone(), PartWriter::new(stage, run_id, &tag, max_rows_per_file), Vec::new(), 0));
        }
        let (s, w, pending, rows) = current.as_mut().unwrap();
        for batch in reader {
            let mut batch = batch.map_err(|e| err("reading the part file", &e))?;
            // fill each row group to COMPACT_BATCH_ROWS across the parts' boundaries (flushing
            // at a part's end left row groups the size of the hourly parts); the rest carries on
            while *rows + batch.num_rows() >= COMPACT_BATCH_ROWS {
                let fits = COMPACT_BATCH_ROWS - *rows;
                pending.push(batch.slice(0, fits));
                flush(w, table, s, std::mem::take(pending))?;
                *rows = 0;
                batch = batch.slice(fits, batch.num_rows() - fits);
            }
            if batch.num_rows() > 0 {
                *rows += batch.num_rows();
                pending.push(batch);
            }
        }
    }
    if let Some((s, mut w, pending, _)) = current.take() {
        flush(&mut w, table, &s, pending)?;
        out.extend(w.close()?);
    }
    Ok(out)
}

fn flush(w: &mut PartWriter, table: &str, schema: &SchemaRef, pending: Vec<RecordBatch>) -> Result<(), StoreError> {
    if pending.is_empty() {
        return Ok(());
    }
    let batch = concat_batches(schema, &pending).map_err(|e| StoreError(format!("table {table}: {e}")))?;
    w.write(table, &batch)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::sync::Arc;

    use arrow_array::{Int32Array, Int64Array, TimestampNanosecondArray};
    use arrow_schema::{DataType, Field, Schema, TimeUnit};

    use super::*;

    fn ts_field() -> Field {
        Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())), false)
    }

    /// `n` rows of day 0, numbered from `first` (column `n`: Int64, or Int32 for an "older" schema).
    fn batch(first: i64, rows: usize, narrow: bool) -> RecordBatch {
        let ts: Vec<i64> = (first..first + rows as i64).collect();
        let (field, col): (Field, Arc<dyn arrow_array::Array>) = if narrow {
            (
                Field::new("n", DataType::Int32, false),
                Arc::new(Int32Array::from_iter_values(ts.iter().map(|&v| v as i32))),
            )
        } else {
            (Field::new("n", DataType::Int64, false), Arc::new(Int64Array::from(ts.clone())))
        };
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![ts_field(), field])),
            vec![Arc::new(TimestampNanosecondArray::from(ts).with_timezone("UTC")), col],
        )
        .unwrap()
    }

    /// One small run's part: `rows` rows written in batches of `batch_rows` (a row group each).
    fn part(dir: &Path, run: &str, first: i64, rows: usize, batch_rows: usize, narrow: bool) -> PathBuf {
        let mut w = PartWriter::new(dir, run, "t", None);
        let mut at = 0;
        while at < rows {
            let n = batch_rows.min(rows - at);
            w.write("events", &batch(first + at as i64, n, narrow)).unwrap();
            at += n;
        }
        let mut parts = w.close().unwrap();
        assert_eq!(parts.len(), 1);
        parts.pop().unwrap().path
    }

    fn numbers(path: &Path) -> (Vec<i64>, Vec<usize>) {
        let r = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap();
        let groups = r.metadata().row_groups().iter().map(|g| g.num_rows() as usize).collect();
        let mut n = Vec::new();
        for b in r.build().unwrap() {
            let b = b.unwrap();
            let c = b.column(1);
            if let Some(a) = c.as_any().downcast_ref::<Int64Array>() {
                n.extend(a.values().iter().copied());
            } else {
                n.extend(c.as_any().downcast_ref::<Int32Array>().unwrap().values().iter().map(|&v| v as i64));
            }
        }
        (n, groups)
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tailscope-compact-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn compacted_parts_keep_rows_in_order_in_full_row_groups() {
        let dir = scratch("order");
        // three runs' parts of 1,000-row row groups: 40,000 + 40,000 + 5 rows
        let inputs = [
            part(&dir.join("a"), "A", 0, 40_000, 1_000, false),
            part(&dir.join("b"), "B", 40_000, 40_000, 1_000, false),
            part(&dir.join("c"), "C", 80_000, 5, 1_000, false),
        ];
        let out = compact(&dir.join("new"), "K", "events", &inputs, None).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].date.as_deref(), Some("1970-01-01"));
        assert_eq!(out[0].path.file_name().unwrap(), "part-K-c000000.parquet");
        let (n, groups) = numbers(&out[0].path);
        assert_eq!(n, (0..80_005).collect::<Vec<i64>>(), "every row once, in the parts' order");
        assert_eq!(groups, [COMPACT_BATCH_ROWS, 80_005 - COMPACT_BATCH_ROWS], "row groups of 65,536 rows, not 1,000");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_file_size_limit_holds_and_schemas_go_to_files_of_their_own() {
        let dir = scratch("schemas");
        let inputs = [
            part(&dir.join("a"), "A", 0, 70_000, 10_000, false),
            part(&dir.join("b"), "B", 70_000, 10, 10, true), // an older version's column type
            part(&dir.join("c"), "C", 70_010, 10, 10, false),
        ];
        let out = compact(&dir.join("new"), "K", "events", &inputs, Some(65_536)).unwrap();
        let got: Vec<(String, Vec<i64>)> = out
            .iter()
            .map(|p| (p.path.file_name().unwrap().to_string_lossy().into_owned(), numbers(&p.path).0))
            .collect();
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        // c0: the first schema, closed at the limit; c1: the narrow part; c2: the first schema again
        assert_eq!(
            names,
            ["part-K-c000000.parquet", "part-K-c000001.parquet", "part-K-c100000.parquet", "part-K-c200000.parquet"]
        );
        assert_eq!(got[0].1, (0..65_536).collect::<Vec<i64>>());
        assert_eq!(got[1].1, (65_536..70_000).collect::<Vec<i64>>());
        assert_eq!(got[2].1, (70_000..70_010).collect::<Vec<i64>>());
        assert_eq!(got[3].1, (70_010..70_020).collect::<Vec<i64>>());
        for p in &out {
            // part-<run>-<tag><seq>: no dash after the run's id (recovery reads the run from the name)
            let name = p.path.file_name().unwrap().to_string_lossy().into_owned();
            assert_eq!(name.matches('-').count(), 2, "{name}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_part_that_cannot_be_read_is_named_in_the_error() {
        let dir = scratch("missing");
        let gone = dir.join("part-A-t00000.parquet");
        let err = compact(&dir.join("new"), "K", "events", std::slice::from_ref(&gone), None).unwrap_err();
        assert!(err.0.starts_with(&gone.display().to_string()) && err.0.contains("opening"), "{err}");
    }
}
