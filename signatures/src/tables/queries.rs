//! The queries table: one row per request/response exchange (crate::queries infers them), and
//! the few flow columns enrichment needs for queries written before their flow's row.

use std::sync::Arc;

use arrow_array::builder::{Int64Builder, ListBuilder, StringBuilder, StructBuilder};
use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray, TimestampNanosecondArray, UInt16Array,
    UInt32Array, UInt64Array,
};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};

use super::columns::string_lists;
use super::ts_type;
use crate::budget::{budget_in, Scratch, PARTS};
use crate::flow::Flow;
use crate::queries::Query;

/// A query's delay charged to one signature (`delays`).
fn delay_fields() -> Fields {
    Fields::from(vec![Field::new("signature", DataType::Utf8, false), Field::new("delay_ns", DataType::Int64, false)])
}

/// The time budget's column of each part (crate::budget): `budget_<part>_ns`.
pub fn budget_column(part: &str) -> String {
    format!("budget_{part}_ns")
}

pub fn query_schema() -> SchemaRef {
    let delay_item = Field::new("item", DataType::Struct(delay_fields()), false);
    let budget_fields = PARTS.iter().map(|p| Field::new(budget_column(p.name()), DataType::Int64, false));
    Arc::new(Schema::new(
        [
            Field::new("capture_id", DataType::Utf8, false),
            Field::new("flow_id", DataType::Int64, false),
            Field::new("query_index", DataType::UInt32, false),
            Field::new("method", DataType::Utf8, false),
            Field::new("confidence", DataType::Float64, false),
            Field::new("start", ts_type(), false),
            Field::new("first_byte", ts_type(), true),
            Field::new("last_byte", ts_type(), true),
            Field::new("end", ts_type(), false),
            Field::new("latency_ns", DataType::Int64, false),
            Field::new("ttfb_ns", DataType::Int64, true),
            Field::new("request_bytes", DataType::UInt64, false),
            Field::new("response_bytes", DataType::UInt64, false),
            Field::new("request_packets", DataType::UInt64, false),
            Field::new("response_packets", DataType::UInt64, false),
            Field::new("complete", DataType::Boolean, false),
            Field::new("setup_ns", DataType::Int64, true),
            Field::new("request_retransmitted", DataType::Boolean, false),
            Field::new("retransmissions", DataType::UInt64, false),
            Field::new("signatures", DataType::List(Arc::new(Field::new("item", DataType::Utf8, false))), false),
            Field::new("delays", DataType::List(Arc::new(delay_item)), false),
            Field::new("attributed_delay_ns", DataType::Int64, false),
        ]
        .into_iter()
        .chain(budget_fields)
        .collect::<Vec<_>>(),
    ))
}

/// The columns of the flows table that enrichment reads (docs/enrichment.md), for flows still
/// open whose queries are written before the flow's own row: client address and port, start.
pub fn query_flows_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("capture_id", DataType::Utf8, false),
        Field::new("flow_id", DataType::Int64, false),
        Field::new("client_ip", DataType::Utf8, false),
        Field::new("client_port", DataType::UInt16, false),
        Field::new("start", ts_type(), false),
    ]))
}

/// A flow as `query_flows_schema` describes it.
#[derive(Debug, Clone)]
pub struct QueryFlow {
    pub flow_id: i64,
    pub client: (std::net::IpAddr, u16),
    pub start_ns: i64,
}

pub fn query_flows_batch(flows: &[QueryFlow], capture_id: &str) -> RecordBatch {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(capture_id, flows.len()))),
        Arc::new(Int64Array::from_iter_values(flows.iter().map(|f| f.flow_id))),
        Arc::new(StringArray::from_iter_values(flows.iter().map(|f| f.client.0.to_string()))),
        Arc::new(UInt16Array::from_iter_values(flows.iter().map(|f| f.client.1))),
        Arc::new(TimestampNanosecondArray::from_iter_values(flows.iter().map(|f| f.start_ns)).with_timezone("UTC")),
    ];
    RecordBatch::try_new(query_flows_schema(), columns).expect("query flow columns match the schema")
}

/// Queries of the flows that ended, in flow then query order.
pub fn queries_of_flows(flows: &[Flow]) -> impl Iterator<Item = (i64, &Query)> {
    flows.iter().flat_map(|f| f.done_queries().iter().map(move |q| (f.flow_id, q)))
}

/// One queries row per (flow id, query).
pub fn queries_batch<'a>(rows: impl Iterator<Item = (i64, &'a Query)>, capture_id: &str) -> Option<RecordBatch> {
    let qs: Vec<(i64, &Query)> = rows.collect();
    if qs.is_empty() {
        return None;
    }
    let n = qs.len();
    let ts =
        |v: Vec<Option<i64>>| -> ArrayRef { Arc::new(TimestampNanosecondArray::from_iter(v).with_timezone("UTC")) };
    let mut delays = ListBuilder::new(StructBuilder::from_fields(delay_fields(), n)).with_field(Arc::new(Field::new(
        "item",
        DataType::Struct(delay_fields()),
        false,
    )));
    for (_, q) in &qs {
        let values = delays.values();
        for (sig, d) in q.charges.items() {
            values.field_builder::<StringBuilder>(0).unwrap().append_value(sig);
            values.field_builder::<Int64Builder>(1).unwrap().append_value(d);
            values.append(true);
        }
        delays.append(true);
    }
    let sigs = |q: &Query| -> Vec<&str> {
        let mut v: Vec<&str> = q.charges.items().map(|(s, _)| s).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    let mut scratch = Scratch::default();
    let budgets: Vec<_> = qs.iter().map(|(_, q)| budget_in(q, &mut scratch)).collect();
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(std::iter::repeat_n(capture_id, n))),
        Arc::new(Int64Array::from_iter_values(qs.iter().map(|(id, _)| *id))),
        Arc::new(UInt32Array::from_iter_values(qs.iter().map(|(_, q)| q.index))),
        Arc::new(StringArray::from_iter_values(qs.iter().map(|(_, q)| q.method.name()))),
        Arc::new(Float64Array::from_iter_values(qs.iter().map(|(_, q)| q.confidence()))),
        ts(qs.iter().map(|(_, q)| Some(q.start_ns)).collect()),
        ts(qs.iter().map(|(_, q)| q.first_byte_ns).collect()),
        ts(qs.iter().map(|(_, q)| q.last_byte_ns).collect()),
        ts(qs.iter().map(|(_, q)| Some(q.end_ns())).collect()),
        Arc::new(Int64Array::from_iter_values(qs.iter().map(|(_, q)| q.end_ns() - q.start_ns))),
        Arc::new(Int64Array::from_iter(qs.iter().map(|(_, q)| q.first_byte_ns.map(|t| t - q.start_ns)))),
        Arc::new(UInt64Array::from_iter_values(qs.iter().map(|(_, q)| q.request_bytes))),
        Arc::new(UInt64Array::from_iter_values(qs.iter().map(|(_, q)| q.response_bytes))),
        Arc::new(UInt64Array::from_iter_values(qs.iter().map(|(_, q)| q.request_packets))),
        Arc::new(UInt64Array::from_iter_values(qs.iter().map(|(_, q)| q.response_packets))),
        Arc::new(BooleanArray::from_iter(qs.iter().map(|(_, q)| Some(q.complete())))),
        Arc::new(Int64Array::from_iter(qs.iter().map(|(_, q)| q.setup_ns))),
        Arc::new(BooleanArray::from_iter(qs.iter().map(|(_, q)| Some(q.request_retransmitted)))),
        Arc::new(UInt64Array::from_iter_values(qs.iter().map(|(_, q)| q.retransmissions))),
        string_lists(qs.iter().map(|(_, q)| sigs(q))),
        Arc::new(delays.finish()),
        Arc::new(Int64Array::from_iter_values(
            qs.iter().map(|(_, q)| q.charges.items().fold(0i64, |sum, (_, d)| sum.saturating_add(d))),
        )),
    ];
    for i in 0..PARTS.len() {
        columns.push(Arc::new(Int64Array::from_iter_values(budgets.iter().map(|b| b.0[i]))));
    }
    Some(RecordBatch::try_new(query_schema(), columns).expect("query columns match the schema"))
}
