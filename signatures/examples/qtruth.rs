//! Compares a capture's queries with a client's per-request log (tests/lab/go/stacks.py's jsonl):
//! `cargo run --example qtruth -- CAPTURE.pcap TRUTH.jsonl [ONE_WAY_MS]`. Each request is matched
//! to the query starting (its connection setup included) within one way + 50 ms after the client
//! sent it; prints found / extra and each duration against the client's.

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampNanosecondType, UInt64Type};
use arrow_array::Array;
use tailscope_signatures::session::{Session, SessionConfig};

fn field(line: &str, key: &str) -> i64 {
    let v = line.split(&format!("\"{key}\":")).nth(1).expect(key);
    v[..v.find(|c: char| !c.is_ascii_digit() && c != '-').unwrap_or(v.len())].parse().unwrap()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let one_way: i64 = args.get(3).map_or(100, |s| s.parse().unwrap()) * 1_000_000;
    let bytes = std::fs::read(&args[1]).expect("capture");
    let mut s = Session::new(SessionConfig::default(), "t");
    let mut cur = s.open_bytes(bytes, "x").expect("a capture");
    while !cur.done {
        s.step(&mut cur, 1000);
    }
    s.finish();
    let mut qs = Vec::new();
    for d in s.take_output(true) {
        if let Some(f) = &d.flows {
            let r = f.column_by_name("quic_handshake_rtt_ns").unwrap().as_primitive::<Int64Type>();
            let ids = f.column_by_name("flow_id").unwrap().as_primitive::<Int64Type>();
            let sigs = f.column_by_name("signatures").unwrap().as_list::<i32>();
            for i in 0..f.num_rows() {
                let s = sigs.value(i);
                let s: Vec<_> = s.as_string::<i32>().iter().flatten().map(str::to_string).collect();
                let rtt = if r.is_null(i) { None } else { Some(r.value(i) / 1_000_000) };
                println!("flow {} handshake rtt {rtt:?} ms signatures {s:?}", ids.value(i));
            }
        }
        let Some(q) = d.queries else { continue };
        let col = |n: &str| q.column_by_name(n).unwrap().clone();
        let (flow, start, end, setup, conf, rp) =
            (col("flow_id"), col("start"), col("end"), col("setup_ns"), col("confidence"), col("response_packets"));
        for i in 0..q.num_rows() {
            let st = start.as_primitive::<TimestampNanosecondType>().value(i);
            let su = setup.as_primitive::<Int64Type>();
            let su = if su.is_null(i) { 0 } else { su.value(i) };
            qs.push((
                st - su,
                end.as_primitive::<TimestampNanosecondType>().value(i),
                flow.as_primitive::<Int64Type>().value(i),
                conf.as_primitive::<Float64Type>().value(i),
                rp.as_primitive::<UInt64Type>().value(i),
            ));
        }
    }
    qs.sort_by_key(|q| (q.0, q.2));
    let text = std::fs::read_to_string(&args[2]).expect("truth");
    let truth: Vec<(i64, i64, i64)> =
        text.lines().map(|l| (field(l, "start_ns"), field(l, "end_ns"), field(l, "conn"))).collect();
    let mut used = vec![false; qs.len()];
    let (mut found, mut within) = (0, 0);
    let t0 = truth.first().map_or(0, |t| t.0);
    for (i, &(ts, te, conn)) in truth.iter().enumerate() {
        let m = qs.iter().position(|q| (0..one_way + 50_000_000).contains(&(q.0 - ts)));
        let client = (te - ts) / 1_000_000;
        match m {
            Some(j) if !used[j] => {
                used[j] = true;
                found += 1;
                let d = (qs[j].1 - qs[j].0) / 1_000_000;
                if (d - client).abs() <= 2 * one_way / 1_000_000 {
                    within += 1;
                }
                println!(
                    "req {i:2} c{conn} at {:7} ms client {client:5} ms  query flow {} {d:5} ms err {:+5} conf {} rp {}",
                    (ts - t0) / 1_000_000,
                    qs[j].2,
                    d - client,
                    qs[j].3,
                    qs[j].4
                );
            }
            _ => println!("req {i:2} c{conn} at {:7} ms client {client:5} ms  MISSING", (ts - t0) / 1_000_000),
        }
    }
    for (j, q) in qs.iter().enumerate().filter(|(j, _)| !used[*j]) {
        println!(
            "extra query {j} flow {} at {} ms dur {} ms rp {}",
            q.2,
            (q.0 - t0) / 1_000_000,
            (q.1 - q.0) / 1_000_000,
            q.4
        );
    }
    println!("found {found}/{} extra {} within-RTT {within}", truth.len(), qs.len() - found);
}
