//! What each column of the packets table costs to write, in µs per packet and bytes per million
//! packets: the measurement behind the packets table's on-disk layout (issue 28).
//!
//! ```sh
//! cargo build --release -p tailscope-signatures --example column_cost
//! taskset -c 1 target/release/examples/column_cost TRACE [--repeat 3] [--columns]
//! ```
//!
//! The trace's packets batches are built once by the `Session` (as `analyze --packets all` does)
//! and held in memory; then the whole table is written to memory with the store's writer
//! properties, once as the store writes it, then with one of its choices undone (statistics,
//! compression, encodings) and, with `--columns`, once without each column in turn. A column's
//! cost is the difference (CPU time of this thread, the median of `--repeat` runs).

use std::path::Path;
use std::sync::Arc;

use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::file::properties::{EnabledStatistics, WriterPropertiesBuilder};
use parquet::schema::types::ColumnPath;
use tailscope_signatures::session::{PacketsKept, Session, SessionConfig};
use tailscope_signatures::store::writer_properties;

type Tweak = Box<dyn Fn(WriterPropertiesBuilder) -> WriterPropertiesBuilder>;

fn thread_cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux schedstat");
    s.split_whitespace().next().and_then(|v| v.parse().ok()).expect("schedstat's first field")
}

fn packets(path: &Path) -> Vec<RecordBatch> {
    let mut s = Session::new(SessionConfig::default(), "column_cost");
    s.keep_packets(PacketsKept::All);
    let mut cur = s.open(path, "trace").expect("readable capture");
    let mut out = Vec::new();
    let mut take = |d: tailscope_signatures::session::Drained| {
        out.extend(d.into_tables().into_iter().filter(|(t, _)| *t == "packets").filter_map(|(_, b)| b));
    };
    while !cur.done {
        s.step(&mut cur, 262_144);
        take(s.drain(false));
    }
    take(s.drain(true));
    s.finish();
    take(s.drain(true));
    out
}

/// CPU ns and bytes to write `batches` without the columns in `drop`.
fn write(
    batches: &[RecordBatch],
    drop: &[&str],
    tweak: &dyn Fn(WriterPropertiesBuilder) -> WriterPropertiesBuilder,
) -> (u64, usize) {
    let schema = batches[0].schema();
    let keep: Vec<usize> =
        (0..schema.fields().len()).filter(|&i| !drop.contains(&schema.field(i).name().as_str())).collect();
    let projected = Arc::new(schema.project(&keep).expect("projection"));
    let props = writer_properties("packets", &projected).expect("writer properties");
    let props = tweak(props.into_builder()).build();
    let t0 = thread_cpu_ns();
    let mut w = ArrowWriter::try_new(Vec::new(), projected, Some(props)).expect("writer");
    for b in batches {
        w.write(&b.project(&keep).expect("projection")).expect("write");
    }
    let bytes = w.into_inner().expect("close").len();
    (thread_cpu_ns() - t0, bytes)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = Path::new(args.get(1).expect("usage: column_cost TRACE [--repeat N]"));
    let repeat = args.iter().position(|a| a == "--repeat").map_or(3, |i| args[i + 1].parse().expect("a number"));
    let batches = packets(path);
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    let names: Vec<String> = batches[0].schema().fields().iter().map(|f| f.name().clone()).collect();
    let same = || -> Tweak { Box::new(|b| b) };
    let mut variants: Vec<(String, Vec<&str>, Tweak)> = vec![("as stored".into(), vec![], same())];
    if args.iter().any(|a| a == "--columns") {
        variants.extend(names.iter().map(|n| (format!("without {n}"), vec![n.as_str()], same())));
    }
    // the store's choices, each undone in turn
    let names1 = names.clone();
    variants.push((
        "statistics on every column".into(),
        vec![],
        Box::new(move |mut b| {
            // a leaf's own setting wins over the default: set each (a list's or struct's leaves
            // keep the store's, so this undercounts the sack column's)
            for n in &names1 {
                b = b.set_column_statistics_enabled(ColumnPath::from(n.as_str()), EnabledStatistics::Chunk);
            }
            b
        }),
    ));
    let names2 = names.clone();
    variants.push((
        "statistics on ts, frame, file, capture_id".into(),
        vec![],
        Box::new(move |mut b| {
            for n in ["frame", "file", "capture_id"].iter().filter(|n| names2.iter().any(|x| x == *n)) {
                b = b.set_column_statistics_enabled(ColumnPath::from(*n), EnabledStatistics::Chunk);
            }
            b
        }),
    ));
    variants.push(("uncompressed".into(), vec![], Box::new(|b| b.set_compression(Compression::UNCOMPRESSED))));
    let names3 = names.clone();
    variants.push((
        "delta encoding for seq, ack, rel_*, tsval, tsecr, ip_id".into(),
        vec![],
        Box::new(move |mut b| {
            for n in ["seq", "ack", "rel_seq", "rel_ack", "tsval", "tsecr", "ip_id"] {
                if names3.iter().any(|x| x == n) {
                    b = b.set_column_encoding(ColumnPath::from(n), Encoding::DELTA_BINARY_PACKED);
                }
            }
            b
        }),
    ));
    let mut runs: Vec<Vec<u64>> = vec![Vec::new(); variants.len()];
    let mut sizes = vec![0usize; variants.len()];
    // Interleaved rounds, so that a busy spell of the machine falls on every variant alike.
    for _ in 0..repeat {
        for (i, (_, drop, tweak)) in variants.iter().enumerate() {
            let (ns, bytes) = write(&batches, drop, tweak.as_ref());
            runs[i].push(ns);
            sizes[i] = bytes;
        }
    }
    let median = |v: &mut Vec<u64>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    let base = median(&mut runs[0].clone());
    let per = |ns: u64| ns as f64 / 1e3 / rows as f64;
    let mb = |b: usize| b as f64 / 1e6 / (rows as f64 / 1e6);
    println!("{rows} packet rows in {} batches", batches.len());
    println!("{:<48} {:>10} {:>12} {:>14}", "variant", "µs/packet", "column µs", "MB/M packets");
    for (i, (name, _, _)) in variants.iter().enumerate() {
        let t = median(&mut runs[i]);
        let col = if i == 0 { per(t) } else { per(base) - per(t) };
        println!("{name:<48} {:>10.3} {:>12.3} {:>14.2}", per(t), col, mb(sizes[i]));
    }
}
