//! The `files` table: one row per input file of a run, what was read from it and what became of
//! it (docs/schemas.md). The engines fill the rows (jobs/run/run_model.py); the columns are here.

use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder, StructBuilder, UInt64Builder};
use arrow_array::{ArrayRef, RecordBatch, StringArray, TimestampNanosecondArray, UInt64Array};
use arrow_schema::{ArrowError, DataType, Field, Fields, Schema, SchemaRef, TimeUnit};

/// One input file's row.
#[derive(Debug, Clone, Default)]
pub struct FileRow {
    pub run_id: String,
    pub path: String,
    pub capture_id: Option<String>,
    pub status: String,
    pub error: Option<String>,
    pub error_offset: Option<u64>,
    pub format: Option<String>,
    pub compression: Option<String>,
    pub size: Option<u64>,
    pub sha256: Option<String>,
    pub frames: Option<u64>,
    pub decoded: Option<u64>,
    pub skipped: Option<u64>,
    /// (reason, frames), the reasons with frames only, sorted by reason.
    pub skipped_by_reason: Vec<(String, u64)>,
    pub first_ts_ns: Option<i64>,
    pub last_ts_ns: Option<i64>,
}

fn reason_fields() -> Fields {
    Fields::from(vec![Field::new("reason", DataType::Utf8, true), Field::new("count", DataType::UInt64, true)])
}

pub fn files_schema() -> SchemaRef {
    let text = |name: &str| Field::new(name, DataType::Utf8, true);
    let count = |name: &str| Field::new(name, DataType::UInt64, true);
    let ts = |name: &str| Field::new(name, DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())), true);
    Arc::new(Schema::new(vec![
        text("run_id"),
        text("path"),
        text("capture_id"),
        text("status"),
        text("error"),
        count("error_offset"),
        text("format"),
        text("compression"),
        count("size"),
        text("sha256"),
        count("frames"),
        count("decoded"),
        count("skipped"),
        Field::new(
            "skipped_by_reason",
            DataType::List(Arc::new(Field::new("item", DataType::Struct(reason_fields()), true))),
            true,
        ),
        ts("first_ts"),
        ts("last_ts"),
    ]))
}

pub fn files_batch(rows: &[FileRow]) -> Result<RecordBatch, ArrowError> {
    let text =
        |f: &dyn Fn(&FileRow) -> Option<&str>| -> ArrayRef { Arc::new(rows.iter().map(f).collect::<StringArray>()) };
    let count =
        |f: &dyn Fn(&FileRow) -> Option<u64>| -> ArrayRef { Arc::new(rows.iter().map(f).collect::<UInt64Array>()) };
    let ts = |f: &dyn Fn(&FileRow) -> Option<i64>| -> ArrayRef {
        Arc::new(rows.iter().map(f).collect::<TimestampNanosecondArray>().with_timezone("UTC"))
    };
    let item = Field::new("item", DataType::Struct(reason_fields()), true);
    let mut reasons = ListBuilder::new(StructBuilder::from_fields(reason_fields(), 0)).with_field(Arc::new(item));
    for r in rows {
        let entries = reasons.values();
        for (reason, n) in &r.skipped_by_reason {
            entries.field_builder::<StringBuilder>(0).unwrap().append_value(reason);
            entries.field_builder::<UInt64Builder>(1).unwrap().append_value(*n);
            entries.append(true);
        }
        reasons.append(true);
    }
    RecordBatch::try_new(
        files_schema(),
        vec![
            text(&|r| Some(&r.run_id)),
            text(&|r| Some(&r.path)),
            text(&|r| r.capture_id.as_deref()),
            text(&|r| Some(&r.status)),
            text(&|r| r.error.as_deref()),
            count(&|r| r.error_offset),
            text(&|r| r.format.as_deref()),
            text(&|r| r.compression.as_deref()),
            count(&|r| r.size),
            text(&|r| r.sha256.as_deref()),
            count(&|r| r.frames),
            count(&|r| r.decoded),
            count(&|r| r.skipped),
            Arc::new(reasons.finish()),
            ts(&|r| r.first_ts_ns),
            ts(&|r| r.last_ts_ns),
        ],
    )
}
