//! Session-level behavior on small hand-made captures: per-file accounting and how output leaves
//! the session.

use arrow_array::Array;
use tailscope_signatures::session::{Session, SessionConfig};

mod common;
use common::{pcap, segment, tcp};

/// One frame stamped a second ahead of its neighbours steps back once (the frame after it), as
/// tshark's negative `frame.time_delta` shows; the frames after that go forward again.
#[test]
fn ts_backwards_counts_steps_back_from_the_previous_frame() {
    let times = [0u64, 1_000_000, 1_000, 2_000, 3_000, 500];
    let records: Vec<(u64, Vec<u8>)> =
        times.iter().enumerate().map(|(i, &t)| (t, tcp(true, 1000 + i as u32, 0, 0x10, 0))).collect();
    let mut s = Session::new(SessionConfig::default(), "t");
    let mut cur = s.open_bytes(pcap(&records), "t").expect("a capture");
    while !cur.done {
        s.step(&mut cur, 1000);
    }
    assert_eq!(cur.stats.frames, 6);
    assert_eq!(cur.stats.ts_backwards, 2); // 1 s → 1 ms, and 3 ms → 0.5 ms
    assert_eq!((cur.stats.first_ts_ns, cur.stats.last_ts_ns), (Some(0), Some(1_000_000_000)));
}

/// A keep-alive connection of `n` exchanges (request, response, the client's ACK `rtt_us` later),
/// never closed.
fn chatty(n: u32, rtt_us: u64) -> Vec<(u64, Vec<u8>)> {
    let (mut c, mut s, mut t) = (1000u32, 5000u32, 0u64);
    let mut out = vec![
        (t, tcp(true, c, 0, 0x02, 0)),
        (t + 10, tcp(false, s, c + 1, 0x12, 0)),
        (t + 20, tcp(true, c + 1, s + 1, 0x10, 0)),
    ];
    (c, s, t) = (c + 1, s + 1, 1_000);
    for _ in 0..n {
        out.push((t, tcp(true, c, s, 0x18, 100)));
        c += 100;
        out.push((t + 1_000, tcp(false, s, c, 0x18, 1000)));
        s += 1000;
        out.push((t + 1_000 + rtt_us, tcp(true, c, s, 0x10, 0)));
        t += 2_000 + rtt_us;
    }
    out
}

/// (query rows drained while reading, the most rows ever waiting in the session, rows at the end).
fn drain_queries(records: &[(u64, Vec<u8>)], batch_rows: usize) -> (usize, usize, usize) {
    let mut s = Session::new(SessionConfig { batch_rows, ..SessionConfig::default() }, "t");
    let mut cur = s.open_bytes(pcap(records), "t").expect("a capture");
    let (mut live, mut most) = (0, 0);
    while !cur.done {
        s.step(&mut cur, 1000);
        let d = s.drain(false);
        let n = d.queries.map_or(0, |q| q.num_rows());
        assert!(d.flows.is_none(), "the flow is still open");
        if n > 0 {
            let flows = d.query_flows.expect("the open flows of the queries come with them");
            assert_eq!(flows.num_rows(), 1);
        }
        live += n;
        most = most.max(n);
    }
    s.finish();
    let end = s.drain(true).queries.map_or(0, |q| q.num_rows());
    (live, most, end)
}

/// A long-lived connection's queries leave the session as they complete, in batches of at most
/// `batch_rows`, instead of waiting for the connection to end.
#[test]
fn queries_of_an_open_flow_are_written_as_they_complete() {
    let (live, most, end) = drain_queries(&chatty(1000, 1_000), 64);
    assert_eq!(live + end, 1000);
    assert!(most <= 64 && live >= 1000 - 64 - 2, "{live} {most} {end}");
}

/// With a 50 ms RTT every response's RTT sample could still be charged bufferbloat when the flow
/// ends (against its final minimum RTT): those queries wait for the flow's row.
#[test]
fn queries_the_flow_verdicts_may_change_wait_for_the_flow() {
    assert_eq!(drain_queries(&chatty(100, 50_000), 64), (0, 0, 100));
}

/// A TCP segment with the timestamp option (NOP, NOP, TS).
fn tcp_ts(c2s: bool, seq: u32, ack: u32, flags: u8, payload: usize, tsval: u32, tsecr: u32) -> Vec<u8> {
    let opts = [&[1u8, 1, 8, 10][..], &tsval.to_be_bytes(), &tsecr.to_be_bytes()].concat();
    segment(40000, c2s, seq, ack, flags, payload, &opts)
}

/// Only the first echo of a TSval is an RTT sample. The receiver keeps echoing the segment that
/// last advanced its window (RFC 7323 §4.3) while a hole is open, so a duplicate ACK long after a
/// loss repeats an old TSval; timing it would measure the recovery (it gave the lab's tail-loss
/// flows 170 ms samples on a 40 ms path, and bufferbloat verdicts with them).
#[test]
fn a_repeated_timestamp_echo_is_not_an_rtt_sample() {
    let (c, s) = (1000u32, 5000u32);
    let records = vec![
        (0u64, tcp_ts(true, c, 0, 0x02, 0, 1, 0)),
        (10, tcp_ts(false, s, c + 1, 0x12, 0, 100, 1)),
        (20, tcp_ts(true, c + 1, s + 1, 0x10, 0, 2, 100)),
        (1_000, tcp_ts(true, c + 1, s + 1, 0x18, 100, 3, 100)),
        // three segments of the response, all with TSval 200; the second is lost downstream
        (2_000, tcp_ts(false, s + 1, c + 101, 0x10, 1000, 200, 3)),
        (2_001, tcp_ts(false, s + 1001, c + 101, 0x10, 1000, 200, 3)),
        (2_002, tcp_ts(false, s + 2001, c + 101, 0x18, 1000, 200, 3)),
        // the first is acked 40 ms later: a sequence sample, and the first echo of 200
        (42_000, tcp_ts(true, c + 101, s + 1001, 0x10, 0, 50, 200)),
        // the third arrived out of order: a duplicate ACK echoing 200 again, 248 ms after it was sent
        (250_000, tcp_ts(true, c + 101, s + 1001, 0x10, 0, 60, 200)),
        // the hole is repaired; the ACK of everything echoes the resend's TSval: a 40 ms echo sample
        (260_000, tcp_ts(false, s + 1001, c + 101, 0x10, 1000, 460, 60)),
        (300_000, tcp_ts(true, c + 101, s + 3001, 0x10, 0, 70, 460)),
    ];
    let packets = packets_of(&records);
    let rtt = packets.column_by_name("rtt_ns").expect("rtt_ns");
    let rtt = rtt.as_any().downcast_ref::<arrow_array::Int64Array>().expect("int64");
    let samples: Vec<Option<i64>> = (7..11).map(|i| rtt.is_valid(i).then(|| rtt.value(i))).collect();
    assert_eq!(samples, vec![Some(40_000_000), None, None, Some(40_000_000)]);
}

/// Run a capture through a session and return the packets table, in frame order (a resend's
/// row joins the batch after those around it: it waits for a D-SACK, session/resends.rs).
fn packets_of(records: &[(u64, Vec<u8>)]) -> arrow_array::RecordBatch {
    let mut sess = Session::new(SessionConfig::default(), "t");
    let mut cur = sess.open_bytes(pcap(records), "t").expect("a capture");
    while !cur.done {
        sess.step(&mut cur, 1000);
    }
    sess.finish();
    let packets = sess.drain(true).packets.expect("packet rows");
    let order = arrow_ord::sort::sort_to_indices(packets.column_by_name("frame").expect("frame"), None, None)
        .expect("frames sort");
    arrow_select::take::take_record_batch(&packets, &order).expect("rows in frame order")
}

/// (frame, retx_cause) of the packets that have a cause (the packets view's `retx_cause`: the
/// cause named by the `tags` mask).
fn retx_causes(packets: &arrow_array::RecordBatch) -> Vec<(u64, String)> {
    let tags = packets.column_by_name("tags").expect("tags");
    let tags = tags.as_any().downcast_ref::<arrow_array::UInt32Array>().expect("u32 tags");
    let frame = packets.column_by_name("frame").expect("frame");
    let frame = frame.as_any().downcast_ref::<arrow_array::UInt64Array>().expect("u64 frames");
    (0..packets.num_rows())
        .filter_map(|i| tailscope_signatures::tags::cause_name(tags.value(i)).map(|c| (frame.value(i), c.to_string())))
        .collect()
}

/// A timeout inside fast recovery starts Linux's loss state, which lasts until everything sent
/// before the timeout is acknowledged (tcp_enter_loss: high_seq = snd_nxt). Its go-back-N resends
/// leave right after ACKs but are the RTO's, also past the point where fast recovery would have
/// ended (the lab's policing_shared_x4 showed them as fast retransmits).
#[test]
fn resends_in_loss_state_after_a_stalled_fast_recovery_are_rto() {
    let (c, s) = (1000u32, 5000u32);
    let mut records = vec![
        (0u64, tcp(true, c, 0, 0x02, 0)),
        (10, tcp(false, s, c + 1, 0x12, 0)),
        (20, tcp(true, c + 1, s + 1, 0x10, 0)),
        (1_000, tcp(true, c + 1, s + 1, 0x18, 100)),
    ];
    // four segments; the first is lost downstream
    for i in 0..4u32 {
        records.push((2_000 + u64::from(i), tcp(false, s + 1 + 1000 * i, c + 101, 0x10, 1000)));
    }
    for i in 0..3u64 {
        records.push((42_000 + i, tcp(true, c + 101, s + 1, 0x10, 0))); // duplicate ACKs
    }
    records.push((42_010, tcp(false, s + 1, c + 101, 0x10, 1000))); // fast retransmit (frame 12)
    records.push((42_020, tcp(false, s + 4001, c + 101, 0x10, 1000))); // new data in recovery
    records.push((42_021, tcp(false, s + 5001, c + 101, 0x10, 1000)));
    // nothing comes back: the retransmission timer fires (frame 15)
    records.push((1_600_000, tcp(false, s + 1, c + 101, 0x10, 1000)));
    // the ACK passes fast recovery's point (s + 4001) but not the timeout's (s + 6001); the
    // segments after it are resent at once, go-back-N (frames 17, 18)
    records.push((1_640_000, tcp(true, c + 101, s + 4001, 0x10, 0)));
    records.push((1_640_010, tcp(false, s + 4001, c + 101, 0x10, 1000)));
    records.push((1_640_011, tcp(false, s + 5001, c + 101, 0x10, 1000)));
    let all = retx_causes(&packets_of(&records));
    let of = |f: u64| all.iter().find(|c| c.0 == f).map(|c| c.1.clone());
    let causes: Vec<_> = [12u64, 15, 17, 18].iter().map(|&f| of(f)).collect();
    assert_eq!(causes, [Some("fast_retransmit"), Some("rto"), Some("rto"), Some("rto")].map(|c| c.map(String::from)));
}

/// A TCP segment between 10.0.0.1:`sport` and 10.0.0.2:80, with a SACK option when `sack` is given.
fn tcp_sack(sport: u16, c2s: bool, seq: u32, ack: u32, flags: u8, payload: usize, sack: Option<(u32, u32)>) -> Vec<u8> {
    let opts: Vec<u8> = match sack {
        Some((l, r)) => [&[1u8, 1, 5, 10][..], &l.to_be_bytes(), &r.to_be_bytes()].concat(),
        None => Vec::new(),
    };
    segment(sport, c2s, seq, ack, flags, payload, &opts)
}

/// The server's data segment is resent after a timeout, and the client's D-SACK later proves
/// the resend spurious. `filler` packets of another connection pass in between.
fn spurious_resend(filler: usize) -> Vec<(u64, Vec<u8>)> {
    spurious_resend_proved_at(filler, 700_000)
}

/// As `spurious_resend`, the D-SACK at `dsack_us`.
fn spurious_resend_proved_at(filler: usize, dsack_us: u64) -> Vec<(u64, Vec<u8>)> {
    let (c, s) = (1000u32, 5000u32);
    let mut out = vec![
        (0, tcp_sack(40000, true, c, 0, 0x02, 0, None)),
        (10_000, tcp_sack(40000, false, s, c + 1, 0x12, 0, None)),
        (20_000, tcp_sack(40000, true, c + 1, s + 1, 0x10, 0, None)),
        (30_000, tcp_sack(40000, true, c + 1, s + 1, 0x18, 100, None)),
        (31_000, tcp_sack(40000, false, s + 1, c + 101, 0x18, 1000, None)),
        (631_000, tcp_sack(40000, false, s + 1, c + 101, 0x18, 1000, None)),
    ];
    for i in 0..filler {
        out.push((631_100 + i as u64, tcp_sack(40001, true, 7000, 9000, 0x10, 0, None)));
    }
    out.push((dsack_us, tcp_sack(40000, true, c + 101, s + 1001, 0x10, 0, Some((s + 1, s + 1001)))));
    out
}

/// The resent segment's row gets the cause its D-SACK proved within the hold (5 s of capture
/// time, session/resends.rs), however many rows passed in between and whatever the batch size:
/// the rows do not depend on where a batch ends (nor, so, on how flows are spread over shards).
#[test]
fn a_dsack_relabels_a_resend_anywhere_in_the_pending_batch() {
    for (filler, batch_rows) in [(0, 65_536), (10, 65_536), (5_000, 65_536), (9_000, 65_536), (5_000, 16)] {
        let config = SessionConfig { batch_rows, ..SessionConfig::default() };
        let mut s = Session::new(config, "t");
        let mut cur = s.open_bytes(pcap(&spurious_resend(filler)), "t").expect("a capture");
        let (mut packets, mut events) = (Vec::new(), Vec::new());
        let mut take = |d: tailscope_signatures::session::Drained| {
            packets.extend(d.packets);
            events.extend(d.events);
        };
        while !cur.done {
            s.step(&mut cur, 100_000);
            take(s.drain(false));
        }
        s.finish();
        take(s.drain(true));
        let packets = arrow_select::concat::concat_batches(&packets[0].schema(), &packets).unwrap();
        assert_eq!(retx_causes(&packets), vec![(6, "spurious".to_string())], "filler {filler}");
        let events = arrow_select::concat::concat_batches(&events[0].schema(), &events).unwrap();
        let sig = events.column_by_name("signature").unwrap();
        let sig = sig.as_any().downcast_ref::<arrow_array::StringArray>().unwrap();
        let ev_cause = events.column_by_name("cause").unwrap();
        let ev_cause = ev_cause.as_any().downcast_ref::<arrow_array::StringArray>().unwrap();
        let evs: Vec<(&str, Option<&str>)> =
            (0..events.num_rows()).map(|i| (sig.value(i), ev_cause.is_valid(i).then(|| ev_cause.value(i)))).collect();
        assert_eq!(evs, vec![("retransmission", Some("spurious"))], "filler {filler}");
    }
}

/// A D-SACK more than the hold after the resend finds its row written with the cause judged when
/// it passed (the hold bounds what waits; 5 s is past any round trip a D-SACK needs).
#[test]
fn a_dsack_after_the_hold_relabels_nothing() {
    let frames = spurious_resend_proved_at(0, 631_000 + 5_100_000);
    let packets = packets_of(&frames);
    assert_eq!(retx_causes(&packets), vec![(6, "rto".to_string())]);
}
