//! How each table's columns are encoded. The choices, measured on the packets table:
//!
//! - zstd (level 1) everywhere;
//! - dictionaries for the top-level string columns only: numbers and timestamps gain nothing from
//!   them and cost time;
//! - one data page per column chunk (a packets batch is one row group of 65,536 rows): each page
//!   is one zstd call, which starts a new compression context, so whole-batch pages make the
//!   files ~10% smaller and ~5% cheaper to write; pages still end at the 1 MiB size limit;
//! - frame numbers and packet times rise row by row: as deltas (DELTA_BINARY_PACKED) they take a
//!   few bits each, ~10% less for zstd to compress;
//! - the packets table keeps statistics on `ts` alone: min/max can skip a row group only for a
//!   column whose values cluster by row group, and in a packets batch only time does (flow ids are
//!   hashes, sequence numbers, windows and the rest come from every flow of the batch at once), while
//!   computing them cost ~13% of writing the table (`examples/column_cost.rs`: 0.38 -> 0.33 µs per
//!   packet on the 1M mix trace). The other tables' rows are per flow, query or event, and their
//!   columns keep chunk statistics.

use arrow_schema::{DataType, Schema};
use parquet::arrow::ArrowSchemaConverter;
use parquet::basic::{Compression, Encoding, ZstdLevel};
use parquet::errors::Result;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

const ROWS_PER_PAGE: usize = 65_536;
const DELTA_COLUMNS: [&str; 2] = ["frame", "ts"];
/// Tables whose columns have statistics only where listed.
const STATISTICS_ONLY: [(&str, &[&str]); 1] = [("packets", &["ts"])];

pub fn for_table(table: &str, schema: &Schema) -> Result<WriterProperties> {
    let only_stats = STATISTICS_ONLY.iter().find(|(t, _)| *t == table).map(|(_, c)| *c);
    let mut b = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::Chunk)
        .set_data_page_row_count_limit(ROWS_PER_PAGE)
        .set_write_batch_size(ROWS_PER_PAGE);
    for field in schema.fields() {
        let name = field.name().as_str();
        let path = || ColumnPath::from(name);
        if matches!(field.data_type(), DataType::Utf8) {
            b = b.set_column_dictionary_enabled(path(), true);
        }
        if DELTA_COLUMNS.contains(&name)
            && (field.data_type().is_integer() || matches!(field.data_type(), DataType::Timestamp(..)))
        {
            b = b.set_column_encoding(path(), Encoding::DELTA_BINARY_PACKED);
        }
    }
    // statistics are set per leaf column: a list's leaves are `name.list.element`, a struct's
    // `name.field`, so find them in the Parquet schema the writer will make
    for leaf in ArrowSchemaConverter::new().with_coerce_types(true).convert(schema)?.columns() {
        let path = leaf.path();
        if only_stats.is_some_and(|keep| !keep.contains(&path.parts()[0].as_str())) {
            b = b.set_column_statistics_enabled(path.clone(), EnabledStatistics::None);
        }
    }
    Ok(b.set_coerce_types(true).build())
}
