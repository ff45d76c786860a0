//! Bytes as a capture file through `signatures::session::Session` end to end: decode, the flow
//! table (with a small flow limit so eviction runs), TCP analysis, QUIC and TLS observation,
//! and the Arrow tables. Checks the accounting the outputs promise:
//! frames = decoded + skipped, one packets row per decoded frame, one flows row per flow
//! started, and one `evicted` row per eviction counted.
#![no_main]

use arrow_array::{Array, RecordBatch, StringArray};
use libfuzzer_sys::fuzz_target;
use tailscope_signatures::flow::FlowConfig;
use tailscope_signatures::session::{Drained, Session, SessionConfig};

#[derive(Default)]
struct Rows {
    packets: usize,
    flows: usize,
    evicted: usize,
}

impl Rows {
    fn take(&mut self, d: Drained) {
        for (table, batch) in d.into_tables() {
            let Some(b) = batch else { continue };
            match table {
                "packets" => self.packets += b.num_rows(),
                "flows" => {
                    self.flows += b.num_rows();
                    self.evicted += evicted_rows(&b);
                }
                _ => {}
            }
        }
    }
}

fn evicted_rows(b: &RecordBatch) -> usize {
    let col = b.column_by_name("end_reason").expect("flows.end_reason");
    let s = col.as_any().downcast_ref::<StringArray>().expect("end_reason is a string column");
    (0..s.len()).filter(|&i| s.is_valid(i) && s.value(i) == "evicted").count()
}

fuzz_target!(|data: &[u8]| {
    let config = SessionConfig {
        flow: FlowConfig {
            // Short timeouts and a tiny table: idle expiry, linger and eviction all run on
            // small inputs.
            tcp_idle_timeout_ns: 30_000_000_000,
            udp_idle_timeout_ns: 10_000_000_000,
            tcp_closed_linger_ns: 5_000_000_000,
            max_flows: 4,
            community_id_seed: 0,
        },
        batch_rows: 128,
    };
    let mut session = Session::new(config, "fuzz");
    let Ok(mut cur) = session.open_bytes(data.to_vec(), "fuzz") else { return };
    let mut rows = Rows::default();
    let mut steps = 0usize;
    while !cur.done {
        session.step(&mut cur, 64);
        rows.take(session.drain(false));
        steps += 1;
        assert!(steps <= data.len() + 2, "no progress");
    }
    rows.take(session.drain(true));
    session.finish();
    rows.take(session.drain(true));

    let st = &cur.stats;
    assert_eq!(st.frames, st.decoded + st.skipped.total(), "frames != decoded + skipped");
    assert_eq!(session.totals.frames, st.frames);
    assert_eq!(rows.packets as u64, st.decoded, "packets rows != decoded frames");
    assert_eq!(rows.flows as u64, session.flows_started(), "flows rows != flows started");
    assert_eq!(rows.evicted as u64, session.flows_evicted(), "evicted rows != evictions counted");
    assert_eq!(session.active_flows(), 0);
});
