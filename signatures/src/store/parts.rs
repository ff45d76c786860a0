//! Staged part files: `<stage>/<table>/date=YYYY-MM-DD/part-<run_id>-<tag><seq>.parquet`.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File};
use std::path::{Path, PathBuf};

use arrow_array::{Array, BooleanArray, RecordBatch, TimestampNanosecondArray};
use arrow_select::filter::filter_record_batch;
use parquet::arrow::ArrowWriter;

use super::date::{date_name, day_of};
use super::{date_column, properties, MAX_ROWS_PER_FILE};

/// A closed part file, ready for the commit to move into place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StagedPart {
    pub table: String,
    pub date: Option<String>,
    pub path: PathBuf,
}

/// Why a part file could not be written; names the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreError(pub String);

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for StoreError {}

fn failed(path: &Path, doing: &str, e: impl fmt::Display) -> StoreError {
    StoreError(format!("{}: {doing}: {e}", path.display()))
}

struct OpenPart {
    writer: ArrowWriter<File>,
    path: PathBuf,
    rows: usize,
}

impl OpenPart {
    fn close(self) -> Result<PathBuf, StoreError> {
        self.writer.close().map_err(|e| failed(&self.path, "closing the part file", e))?;
        Ok(self.path)
    }
}

/// Writes one run's (or one task's) batches into staged, date-partitioned Parquet files. Each
/// batch becomes one row group; a file is closed after `max_rows_per_file` rows.
pub struct PartWriter {
    stage: PathBuf,
    run_id: String,
    tag: String,
    max_rows_per_file: usize,
    seq: u32,
    open: Vec<((String, Option<String>), OpenPart)>,
    full: Vec<StagedPart>,
    rows: BTreeMap<String, u64>,
}

impl PartWriter {
    /// `tag` lets several writers of one run (the Spark engine's tasks) stage side by side.
    pub fn new(stage: impl Into<PathBuf>, run_id: &str, tag: &str, max_rows_per_file: Option<usize>) -> PartWriter {
        PartWriter {
            stage: stage.into(),
            run_id: run_id.to_string(),
            tag: tag.to_string(),
            max_rows_per_file: max_rows_per_file.unwrap_or(MAX_ROWS_PER_FILE).max(1),
            seq: 0,
            open: Vec::new(),
            full: Vec::new(),
            rows: BTreeMap::new(),
        }
    }

    /// Rows written so far, by table.
    pub fn rows(&self) -> &BTreeMap<String, u64> {
        &self.rows
    }

    pub fn write(&mut self, table: &str, batch: &RecordBatch) -> Result<(), StoreError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        *self.rows.entry(table.to_string()).or_default() += batch.num_rows() as u64;
        let Some(column) = date_column(table) else {
            return self.write_part(table, None, batch);
        };
        let ts = batch
            .column_by_name(column)
            .and_then(|c| c.as_any().downcast_ref::<TimestampNanosecondArray>())
            .ok_or_else(|| {
                StoreError(format!("table {table}: no nanosecond timestamp column {column:?} to partition by"))
            })?;
        // Most batches hold a single day: their earliest and latest instants show it without a
        // day computed for every row. Otherwise the days in the order they first appear.
        if ts.null_count() == 0 {
            let (lo, hi) = ts.values().iter().fold((i64::MAX, i64::MIN), |(lo, hi), &t| (lo.min(t), hi.max(t)));
            if day_of(lo) == day_of(hi) {
                return self.write_part(table, Some(date_name(day_of(lo))), batch);
            }
        }
        let days: Vec<i64> = ts.iter().map(|t| t.map_or(i64::MIN, day_of)).collect();
        let mut order: Vec<i64> = Vec::new();
        for &d in &days {
            if !order.contains(&d) {
                order.push(d);
            }
        }
        if let [day] = order[..] {
            return self.write_part(table, Some(date_name(day)), batch);
        }
        // Rows in time order (a capture's packets, a batch crossing midnight) hold each day in
        // one run: its rows are a zero-copy slice of the batch. A filtered copy of a whole
        // packets batch (~8 MiB) was the writer's largest allocation, live beside the batch.
        let runs = days.chunk_by(|a, b| a == b);
        if runs.clone().count() == order.len() {
            let mut offset = 0;
            for run in runs {
                self.write_part(table, Some(date_name(run[0])), &batch.slice(offset, run.len()))?;
                offset += run.len();
            }
            return Ok(());
        }
        for day in order {
            let keep = BooleanArray::from_iter(days.iter().map(|&d| Some(d == day)));
            let part = filter_record_batch(batch, &keep).map_err(|e| StoreError(format!("table {table}: {e}")))?;
            self.write_part(table, Some(date_name(day)), &part)?;
        }
        Ok(())
    }

    fn write_part(&mut self, table: &str, date: Option<String>, batch: &RecordBatch) -> Result<(), StoreError> {
        let key = (table.to_string(), date);
        let i = match self.open.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                let part = self.create(table, key.1.as_deref(), batch)?;
                self.open.push((key.clone(), part));
                self.open.len() - 1
            }
        };
        let part = &mut self.open[i].1;
        part.writer.write(batch).map_err(|e| failed(&part.path, "writing", e))?;
        part.writer.flush().map_err(|e| failed(&part.path, "writing", e))?;
        part.rows += batch.num_rows();
        if part.rows >= self.max_rows_per_file {
            let (_, part) = self.open.remove(i);
            let path = part.close()?;
            self.full.push(StagedPart { table: key.0, date: key.1, path });
        }
        Ok(())
    }

    fn create(&mut self, table: &str, date: Option<&str>, batch: &RecordBatch) -> Result<OpenPart, StoreError> {
        let mut dir = self.stage.join(table);
        if let Some(d) = date {
            dir.push(format!("date={d}"));
        }
        fs::create_dir_all(&dir).map_err(|e| failed(&dir, "creating the staging directory", e))?;
        let path = dir.join(format!("part-{}-{}{:05}.parquet", self.run_id, self.tag, self.seq));
        self.seq += 1;
        let props = properties::for_table(table, &batch.schema()).map_err(|e| failed(&path, "schema", e))?;
        let file = File::create(&path).map_err(|e| failed(&path, "creating the part file", e))?;
        let writer = ArrowWriter::try_new(file, batch.schema(), Some(props))
            .map_err(|e| failed(&path, "starting the part file", e))?;
        Ok(OpenPart { writer, path, rows: 0 })
    }

    /// Close every part file; returns them all (closed early ones first) for the commit.
    pub fn close(mut self) -> Result<Vec<StagedPart>, StoreError> {
        let mut parts = std::mem::take(&mut self.full);
        for ((table, date), part) in self.open.drain(..) {
            parts.push(StagedPart { table, date, path: part.close()? });
        }
        Ok(parts)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, TimestampNanosecondArray};
    use arrow_schema::{DataType, Field, Schema, TimeUnit};
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    use super::super::date::NS_PER_DAY;
    use super::*;

    fn batch(ts: &[i64]) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("ts", DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())), false),
            Field::new("n", DataType::Int64, false),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                Arc::new(TimestampNanosecondArray::from(ts.to_vec()).with_timezone("UTC")),
                Arc::new(Int64Array::from_iter_values(0..ts.len() as i64)),
            ],
        )
        .unwrap()
    }

    fn w_rows(dir: &Path) -> usize {
        let mut n = 0;
        for table in fs::read_dir(dir).unwrap() {
            for day in fs::read_dir(table.unwrap().path()).unwrap() {
                for f in fs::read_dir(day.unwrap().path()).unwrap() {
                    n += read(&f.unwrap().path()).iter().map(|b| b.num_rows()).sum::<usize>();
                }
            }
        }
        n
    }

    fn read(path: &Path) -> Vec<RecordBatch> {
        let file = File::open(path).unwrap();
        ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap().map(|b| b.unwrap()).collect()
    }

    #[test]
    fn rows_go_to_their_utc_day_and_files_roll_over() {
        let dir = std::env::temp_dir().join(format!("tailscope-parts-{}", std::process::id()));
        let mut w = PartWriter::new(&dir, "RUN", "t", Some(3));
        // one row before 1970 (floor division), two on day 0, one on day 1: files are numbered
        // as their days first appear (-1, 0, 1)
        w.write("events", &batch(&[-1, 5, NS_PER_DAY - 1, NS_PER_DAY])).unwrap();
        w.write("events", &batch(&[7, 8])).unwrap(); // day 0 now has 4 rows ≥ 3: its file is closed
        w.write("events", &batch(&[9])).unwrap(); // ... and a new one opened
        let parts = w.close().unwrap();
        let dates: Vec<_> = parts.iter().map(|p| p.date.clone().unwrap()).collect();
        assert_eq!(dates, ["1970-01-01", "1969-12-31", "1970-01-02", "1970-01-01"]);
        let rows: Vec<usize> = parts.iter().map(|p| read(&p.path).iter().map(|b| b.num_rows()).sum()).collect();
        assert_eq!(rows, [4, 1, 1, 1]);
        let first = ParquetRecordBatchReaderBuilder::try_new(File::open(&parts[0].path).unwrap()).unwrap();
        assert_eq!(first.metadata().num_row_groups(), 2, "one row group per batch written");
        assert_eq!(first.schema(), &batch(&[]).schema(), "the Arrow schema is kept");
        let names: Vec<_> = parts.iter().map(|p| p.path.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(
            names,
            [
                "part-RUN-t00001.parquet",
                "part-RUN-t00000.parquet",
                "part-RUN-t00002.parquet",
                "part-RUN-t00003.parquet"
            ]
        );
        assert_eq!(w_rows(&dir), 7);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_batch_over_several_days_is_split_in_row_order() {
        let dir = std::env::temp_dir().join(format!("tailscope-parts-split-{}", std::process::id()));
        let mut w = PartWriter::new(&dir, "RUN", "t", None);
        let d = NS_PER_DAY;
        // in time order (each day one run: slices of the batch), and interleaved (filtered)
        w.write("events", &batch(&[d - 2, d - 1, d, d + 1, 2 * d])).unwrap();
        w.write("packets", &batch(&[1, d + 2, 3, 2 * d, 4])).unwrap();
        let parts = w.close().unwrap();
        let got: Vec<(String, String, Vec<i64>)> = parts
            .iter()
            .map(|p| {
                let n: Vec<i64> = read(&p.path)
                    .iter()
                    .flat_map(|b| b.column(1).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec())
                    .collect();
                (p.table.clone(), p.date.clone().unwrap(), n)
            })
            .collect();
        let want = [
            ("events", "1970-01-01", vec![0, 1]),
            ("events", "1970-01-02", vec![2, 3]),
            ("events", "1970-01-03", vec![4]),
            ("packets", "1970-01-01", vec![0, 2, 4]),
            ("packets", "1970-01-02", vec![1]),
            ("packets", "1970-01-03", vec![3]),
        ];
        assert_eq!(got, want.map(|(t, d, n)| (t.to_string(), d.to_string(), n)));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_that_cannot_be_created_is_named_in_the_error() {
        let mut w = PartWriter::new("/proc/tailscope-no-such-dir", "RUN", "", None);
        let err = w.write("files", &batch(&[1])).unwrap_err();
        assert!(err.0.starts_with("/proc/tailscope-no-such-dir/files"), "{err}");
    }
}
