//! Inputs found by the `flow_session` fuzz target (fuzz/README.md), as regression tests. Debug
//! test builds check integer overflow, which is how these failed: release builds wrapped and
//! wrote wrong numbers.

use tailscope_signatures::flow::FlowConfig;
use tailscope_signatures::rtt::Estimator;
use tailscope_signatures::session::{Session, SessionConfig};

mod common;
use common::tcp;

/// A raw-IPv4 pcap of (seconds, TCP segment) records.
fn pcap(records: &[(u32, Vec<u8>)]) -> Vec<u8> {
    let us: Vec<(u64, Vec<u8>)> = records.iter().map(|(sec, p)| (u64::from(*sec) * 1_000_000, p.clone())).collect();
    common::pcap(&us)
}

/// Through a session whose flows never time out (`--tcp-idle-timeout 1e12` does the same), so a
/// gap of a century stays inside one flow.
fn run(data: Vec<u8>) -> Session {
    let flow = FlowConfig { tcp_idle_timeout_ns: i64::MAX, tcp_closed_linger_ns: i64::MAX, ..FlowConfig::default() };
    let mut s = Session::new(SessionConfig { flow, batch_rows: 64 }, "regression");
    let mut cur = s.open_bytes(data, "regression").expect("a capture");
    while !cur.done {
        s.step(&mut cur, 1000);
        let _ = s.drain(false);
    }
    s.finish();
    let _ = s.drain(true);
    assert_eq!(cur.stats.frames, cur.stats.decoded);
    s
}

/// flow_session, `attempt to add with overflow` in `tables::queries_batch` (the sum of a
/// query's charged delays): a request retransmitted three times ~136 years after it was first
/// sent (pcap seconds 0, then near 2^32) charges three delays of ~4.3e18 ns to one query.
#[test]
fn query_delays_summing_past_i64() {
    let (c, s) = (1000u32, 5000u32);
    let mut recs = vec![
        (0, tcp(true, c, 0, 0x02, 0)),
        (0, tcp(false, s, c + 1, 0x12, 0)),
        (0, tcp(true, c + 1, s + 1, 0x10, 0)),
        (1, tcp(true, c + 1, s + 1, 0x18, 100)),
    ];
    for i in 0..3 {
        recs.push((0xffff_fff0 + i, tcp(true, c + 1, s + 1, 0x18, 100)));
    }
    let session = run(pcap(&recs));
    assert_eq!(session.flows_started(), 1);
}

/// flow_session (found by the CI fuzz run), `attempt to multiply with overflow` in
/// `TcpState::analyze`'s vantage test: a SYN-ACK ~95 years after its SYN makes SYN→SYN-ACK ×4
/// overflow.
#[test]
fn handshake_gap_past_a_quarter_of_i64() {
    let (c, s) = (1000u32, 5000u32);
    let session = run(pcap(&[
        (0, tcp(true, c, 0, 0x02, 0)),
        (3_000_000_000, tcp(false, s, c + 1, 0x12, 0)),
        (3_000_000_001, tcp(true, c + 1, s + 1, 0x10, 0)),
    ]));
    assert_eq!(session.flows_started(), 1);
}

/// flow_session, `attempt to multiply with overflow` in `Estimator::add` (RFC 6298 smoothing),
/// and the same in `Estimator::rto`: RTT samples of ~4.3e18 ns (data at second 0, its ACK near
/// 2^32 seconds) overflow 7·SRTT and SRTT + 4·RTTVAR.
#[test]
fn rtt_estimator_with_huge_samples() {
    let mut e = Estimator::default();
    for r in [i64::MAX / 2, i64::MAX, 1, i64::MAX, 0, i64::MAX] {
        e.add(r);
        assert!(e.srtt().unwrap() >= 0 && e.rto() >= 0, "{r}");
    }
    let (c, s) = (1000u32, 5000u32);
    let mut recs =
        vec![(0, tcp(true, c, 0, 0x02, 0)), (0, tcp(false, s, c + 1, 0x12, 0)), (0, tcp(true, c + 1, s + 1, 0x10, 0))];
    let mut seq = s + 1;
    for i in 0..4u32 {
        recs.push((i, tcp(false, seq, c + 1, 0x18, 100)));
        recs.push((0xffff_fff0 + i, tcp(true, c + 1, seq + 100, 0x10, 0)));
        seq += 100;
    }
    let session = run(pcap(&recs));
    assert_eq!(session.flows_started(), 1);
}
