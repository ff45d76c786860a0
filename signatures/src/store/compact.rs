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
            let batch = batch.map_err(|e| err("reading the part file", &e))?;
            if *rows > 0 && *rows + batch.num_rows() > COMPACT_BATCH_ROWS {
                flush(w, table, s, std::mem::take(pending))?;
                *rows = 0;
            }
            *rows += batch.num_rows();
            pending.push(batch);
            if *rows >= COMPACT_BATCH_ROWS {
                flush(w, table, s, std::mem::take(pending))?;
                *rows = 0;
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
