//! The dataset's part files: each table's record batches written as date-partitioned Parquet
//! under a run's staging directory (the commit that moves them into place is `jobs/dataset/staged.py`).
//!
//! [`PartWriter`] does the writing; [`WriterThread`] runs one on its own thread so encoding and
//! compression overlap the analysis that produces the next batches.

mod compact;
mod date;
mod parts;
mod properties;
mod thread;

pub use compact::{compact, COMPACT_BATCH_ROWS};
pub use parts::{PartWriter, StagedPart, StoreError};
pub use properties::for_table as writer_properties;
pub use thread::{Closed, Sink, WriterThread};

/// The column whose UTC day partitions each table; tables not listed have one unpartitioned
/// directory. (`jobs/dataset/staged.py` reads this list through the native module.)
pub const TABLES_BY_DATE: [(&str, &str); 4] =
    [("packets", "ts"), ("flows", "start"), ("events", "ts"), ("queries", "start")];

/// A part file is closed, and the next rows of its table and day go to a new one, after this
/// many rows: an open Parquet writer keeps every row group's metadata until it closes (~3 MiB per
/// 100 row groups of the packets table), so one file per day would grow with the capture. 128
/// packets row groups is ~100 MiB on disk, a usual size for Parquet readers.
pub const MAX_ROWS_PER_FILE: usize = 128 * 65_536;

pub fn date_column(table: &str) -> Option<&'static str> {
    TABLES_BY_DATE.iter().find(|(t, _)| *t == table).map(|(_, c)| *c)
}
