//! The enrichment columns of `flows` and `queries` and what they hold before any source is read
//! (`jobs/enrichment/enrich.py` fills them from prefix tables, an ASN database and app-telemetry sessions;
//! docs/enrichment.md). Without sources the native core appends them itself, so a run without
//! enrichment never hands a batch to Python.

use std::sync::Arc;

use arrow_array::{new_null_array, ArrayRef, Int32Array, RecordBatch, StringArray};
use arrow_schema::{ArrowError, DataType, Field, Schema};

/// A value no source gave.
pub const UNKNOWN: &str = "unknown";

/// The columns enrichment adds, in this order, after the core's columns.
pub fn fields() -> Vec<Field> {
    vec![
        Field::new("carrier", DataType::Utf8, true),
        Field::new("asn", DataType::Int64, true),
        Field::new("network_type", DataType::Utf8, true),
        Field::new("h3_cell", DataType::Utf8, true),
        Field::new("h3_res", DataType::Int32, true),
        Field::new("h3_lat", DataType::Float64, true),
        Field::new("h3_lng", DataType::Float64, true),
        Field::new("h3_boundary_geojson", DataType::Utf8, true),
        Field::new("region", DataType::Utf8, true),
        Field::new("site", DataType::Utf8, true),
    ]
}

/// The enrichment columns of `rows` rows no source matched: carrier, network type, cell and
/// region "unknown", ASN and the cell's coordinates null, the run's H3 resolution, and `site`
/// (the capture's, from its agent manifest or `--site`; "unknown" when neither names one).
pub fn unknown_columns(rows: usize, h3_res: i32, site: Option<&str>) -> Vec<ArrayRef> {
    let text = |s: &str| -> ArrayRef { Arc::new(StringArray::from_iter_values(std::iter::repeat_n(s, rows))) };
    fields()
        .iter()
        .map(|f| match f.name().as_str() {
            "carrier" | "network_type" | "h3_cell" | "region" => text(UNKNOWN),
            "h3_res" => Arc::new(Int32Array::from_iter_values(std::iter::repeat_n(h3_res, rows))) as ArrayRef,
            "site" => text(site.unwrap_or(UNKNOWN)),
            _ => new_null_array(f.data_type(), rows),
        })
        .collect()
}

/// The enrichment columns alone, as a batch of `rows` unknown rows.
pub fn unknown_batch(rows: usize, h3_res: i32, site: Option<&str>) -> RecordBatch {
    RecordBatch::try_new(Arc::new(Schema::new(fields())), unknown_columns(rows, h3_res, site))
        .expect("unknown_columns follows fields()")
}

/// `batch` (flows or queries, as the core made it) with the unknown enrichment columns appended.
pub fn with_unknown(batch: &RecordBatch, h3_res: i32, site: Option<&str>) -> Result<RecordBatch, ArrowError> {
    let schema = batch.schema();
    let mut fields: Vec<Field> = schema.fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.extend(self::fields());
    let mut columns = batch.columns().to_vec();
    columns.extend(unknown_columns(batch.num_rows(), h3_res, site));
    RecordBatch::try_new(Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone())), columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tables::flow_schema;
    use arrow_array::Array;

    #[test]
    fn unknown_enrichment_appends_every_column_with_its_unknown() {
        let flows = RecordBatch::new_empty(flow_schema());
        let out = with_unknown(&flows, 7, Some("ams1")).unwrap();
        assert_eq!(out.num_columns(), flows.num_columns() + fields().len());
        assert_eq!(out.schema().metadata(), flows.schema().metadata());
        let cols = unknown_columns(2, 9, None);
        let text = |i: usize| cols[i].as_any().downcast_ref::<StringArray>().unwrap().value(1).to_string();
        assert_eq!(
            (text(0), text(2), text(3), text(8), text(9)),
            ("unknown".into(), "unknown".into(), "unknown".into(), "unknown".into(), "unknown".into())
        );
        assert!(cols[1].is_null(0) && cols[5].is_null(1) && cols[7].is_null(0));
        assert_eq!(cols[4].as_any().downcast_ref::<Int32Array>().unwrap().value(0), 9);
    }
}
