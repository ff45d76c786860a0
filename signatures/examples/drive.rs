//! Drives a Session over one capture the way the local engine does (step, drain; finish, drain)
//! and prints the row counts: a Python-free target for profiling the native loop, e.g.
//! `valgrind --tool=callgrind target/release/examples/drive TRACE`.

use std::path::Path;

use tailscope_signatures::session::{Session, SessionConfig};

fn main() {
    let path = std::env::args().nth(1).expect("usage: drive CAPTURE [BATCH_ROWS]");
    let mut config = SessionConfig::default();
    if let Some(rows) = std::env::args().nth(2) {
        config.batch_rows = rows.parse().expect("usage: drive CAPTURE [BATCH_ROWS]");
    }
    let mut s = Session::new(config, "bench");
    let mut cur = s.open(Path::new(&path), "trace").expect("readable capture");
    let mut rows = [0usize; 5];
    let mut count = |d: tailscope_signatures::session::Drained| {
        for (i, (_, b)) in d.into_tables().into_iter().enumerate() {
            rows[i] += b.map_or(0, |b| b.num_rows());
        }
    };
    while !cur.done {
        s.step(&mut cur, 262_144);
        count(s.drain(false));
    }
    count(s.drain(true));
    s.finish();
    count(s.drain(true));
    println!("frames {} rows packets/flows/events/query_flows/queries {:?}", cur.stats.frames, rows);
}
