//! The floor of each part of the native loop, alone, in µs per packet: what one core can do at
//! best for that part, to set against tcptrace's whole per-packet time (issue 28).
//!
//! ```sh
//! cargo build --release -p tailscope-signatures --example floor
//! taskset -c 1 target/release/examples/floor benchmarks/out/trace-1000000.pcap [--repeat 5] [--tcptrace]
//! ```
//!
//! Stages, each timed on its own (CPU time of this thread from /proc/thread-self/schedstat; the
//! median of `--repeat` runs; a few ms of resolution), each including the ones before it except the replays:
//! - `read`: the capture's records (`CaptureReader::next_frame`), nothing else;
//! - `read+decode`: and each frame decoded (link, IP, TCP/UDP);
//! - `read+decode+flows`: and each packet assigned to its flow (`FlowTracker::assign`);
//! - `tcp analysis (replay)`: `TcpState::analyze` alone over the trace's TCP segments, taken
//!   beforehand into memory (flow, direction, time, TCP header, lengths, payload bytes), one fresh
//!   state per flow and `finish` at its end: the whole per-segment TCP analysis (Wireshark's
//!   sequence analysis, the scoreboard, causes, RTT, queries, detectors) with no reading, no
//!   decoding, no flow table and no rows;
//! - `native loop, --packets none|all`: the `Session` as the local engine drives it (step, drain;
//!   finish, drain), packets batches built (`all`) or not (`none`), no Parquet;
//! - with `--tcptrace`, `tcptrace -n -l -r TRACE` (its output to /dev/null), CPU from the
//!   children's times in /proc/self/stat (10 ms ticks).
//!
//! Per packet means per record of the capture, whatever the stage touches, so the figures add up
//! and compare with tcptrace's over the same records. Run it pinned (`taskset -c N`) on a quiet
//! core: the figures are CPU time, but a busy core still slows caches.

use std::path::Path;
use std::time::Instant;

use tailscope_parsers::capture::CaptureReader;
use tailscope_parsers::decode::{decode_frame_into, Packet};
use tailscope_signatures::flow::{FlowConfig, FlowTracker};
use tailscope_signatures::session::{PacketsKept, Session, SessionConfig};
use tailscope_signatures::tcp::{PacketIn, TcpState};

/// CPU time of this thread so far, in ns (the scheduler's account, brought up to date at its
/// ticks and switches: a few ms of resolution, so give it a trace of a million packets).
fn thread_cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").expect("Linux schedstat");
    s.split_whitespace().next().and_then(|v| v.parse().ok()).expect("schedstat's first field")
}

/// Children's user + system time so far, in ns (/proc/self/stat fields 16 and 17, in the
/// kernel's USER_HZ = 100 ticks).
fn children_cpu_ns() -> u64 {
    let s = std::fs::read_to_string("/proc/self/stat").expect("Linux /proc");
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &s[s.rfind(')').expect("stat's command") + 2..];
    let f: Vec<u64> = rest.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
    // rest starts at field 3 (state): cutime is field 16, cstime field 17.
    (f[16 - 3] + f[17 - 3]) * 10_000_000
}

/// One TCP segment of the trace as the analysis takes it.
struct Seg {
    flow: u32,
    dir: u8,
    ts_ns: i64,
    tcp: tailscope_parsers::decode::TcpInfo,
    seglen: u32,
    ip_id: Option<u32>,
    peer_window_shift: Option<u8>,
    payload: (u32, u32),
    /// The flow's last segment: `finish` follows it.
    last: bool,
}

fn read(path: &Path) -> u64 {
    let mut r = CaptureReader::open(path).expect("readable capture");
    let mut n = 0u64;
    let mut bytes = 0u64;
    while let Some(f) = r.next_frame().expect("capture reads") {
        n += 1;
        bytes += f.data.len() as u64;
    }
    std::hint::black_box(bytes);
    n
}

fn read_decode(path: &Path) -> u64 {
    let mut r = CaptureReader::open(path).expect("readable capture");
    let mut decoded = 0u64;
    while let Some(f) = r.next_frame().expect("capture reads") {
        let mut p = Packet::empty();
        if decode_frame_into(&f, &mut p).is_ok() {
            decoded += u64::from(p.payload_len & 1);
        }
        std::hint::black_box(&p);
    }
    decoded
}

fn read_decode_flows(path: &Path) -> u64 {
    let mut r = CaptureReader::open(path).expect("readable capture");
    let mut t = FlowTracker::new(FlowConfig::default(), "floor");
    while let Some(f) = r.next_frame().expect("capture reads") {
        let mut p = Packet::empty();
        if decode_frame_into(&f, &mut p).is_ok() {
            let a = t.assign(&p, 0);
            std::hint::black_box(a.slot);
        }
        t.finished.clear();
    }
    t.flows_started
}

/// The trace's TCP segments, with each packet's flow as the flow table numbers it.
fn segments(path: &Path) -> (Vec<Seg>, Vec<u8>, u32) {
    let mut r = CaptureReader::open(path).expect("readable capture");
    let mut t = FlowTracker::new(FlowConfig::default(), "floor");
    let mut ids: std::collections::HashMap<i64, u32> = std::collections::HashMap::new();
    let (mut segs, mut payloads) = (Vec::new(), Vec::new());
    while let Some(f) = r.next_frame().expect("capture reads") {
        let mut p = Packet::empty();
        if decode_frame_into(&f, &mut p).is_err() {
            continue;
        }
        let a = t.assign(&p, 0);
        t.finished.clear();
        let Some(tcp) = p.tcp() else { continue };
        let fl = t.flow(a.slot);
        let next = ids.len() as u32;
        let flow = *ids.entry(fl.flow_id).or_insert(next);
        let start = payloads.len() as u32;
        payloads.extend_from_slice(p.payload);
        segs.push(Seg {
            flow,
            dir: a.direction.index() as u8,
            ts_ns: p.ts_ns,
            tcp: tcp.clone(),
            seglen: p.payload_len,
            ip_id: p.ip_id,
            peer_window_shift: fl.window_shift(a.direction.other()),
            payload: (start, payloads.len() as u32),
            last: false,
        });
    }
    let mut seen = vec![false; ids.len()];
    for s in segs.iter_mut().rev() {
        if !seen[s.flow as usize] {
            seen[s.flow as usize] = true;
            s.last = true;
        }
    }
    (segs, payloads, ids.len() as u32)
}

fn replay(segs: &[Seg], payloads: &[u8], flows: u32) -> u64 {
    let mut states: Vec<Option<Box<TcpState>>> = (0..flows).map(|_| None).collect();
    let mut tags = 0u64;
    for s in segs {
        let st = states[s.flow as usize].get_or_insert_with(Box::default);
        let an = st.analyze(&PacketIn {
            dir: usize::from(s.dir),
            ts_ns: s.ts_ns,
            tcp: &s.tcp,
            seglen: s.seglen,
            ip_id: s.ip_id,
            peer_window_shift: s.peer_window_shift,
            payload: &payloads[s.payload.0 as usize..s.payload.1 as usize],
        });
        tags += u64::from(an.tags.count_ones());
        if s.last {
            st.finish(s.ts_ns);
            // dropped here, as a written flow is
            states[s.flow as usize] = None;
        }
    }
    tags
}

fn native(path: &Path, kept: PacketsKept) -> u64 {
    let mut s = Session::new(SessionConfig::default(), "floor");
    s.keep_packets(kept);
    let mut cur = s.open(path, "trace").expect("readable capture");
    let mut rows = 0usize;
    let mut count = |d: tailscope_signatures::session::Drained| {
        for (_, b) in d.into_tables() {
            rows += b.map_or(0, |b| b.num_rows());
        }
    };
    while !cur.done {
        s.step(&mut cur, 262_144);
        count(s.drain(false));
    }
    count(s.drain(true));
    s.finish();
    count(s.drain(true));
    rows as u64
}

/// One timed stage: runs it once, returns a count (kept from the optimizer).
type Stage<'a> = Box<dyn Fn() -> u64 + 'a>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: floor CAPTURE [--repeat N] [--tcptrace]";
    let path = Path::new(args.first().expect(usage)).to_path_buf();
    let repeat: usize = args
        .iter()
        .position(|a| a == "--repeat")
        .map_or(5, |i| args.get(i + 1).and_then(|v| v.parse().ok()).expect(usage));
    let with_tcptrace = args.iter().any(|a| a == "--tcptrace");

    let frames = read(&path); // also warms the page cache
    let (segs, payloads, flows) = segments(&path);
    println!(
        "{}: {} packets, {} TCP segments in {} flows; median of {repeat} runs, CPU µs per packet",
        path.display(),
        frames,
        segs.len(),
        flows
    );

    let per_packet = |ns: u64| ns as f64 / 1e3 / frames as f64;
    let mut rows: Vec<(&str, Vec<f64>, Vec<f64>)> = Vec::new();
    let stages: Vec<(&str, Stage)> = vec![
        ("read", Box::new(|| read(&path))),
        ("read+decode", Box::new(|| read_decode(&path))),
        ("read+decode+flows", Box::new(|| read_decode_flows(&path))),
        ("tcp analysis (replay)", Box::new(|| replay(&segs, &payloads, flows))),
        ("native loop, --packets none", Box::new(|| native(&path, PacketsKept::None))),
        ("native loop, --packets all", Box::new(|| native(&path, PacketsKept::All))),
    ];
    for (name, _) in &stages {
        rows.push((name, Vec::new(), Vec::new()));
    }
    let mut tcptrace: (Vec<f64>, Vec<f64>) = (Vec::new(), Vec::new());
    // Interleaved rounds: a change of load hits every stage alike.
    for _ in 0..repeat {
        for (i, (_, run)) in stages.iter().enumerate() {
            let (c0, w0) = (thread_cpu_ns(), Instant::now());
            std::hint::black_box(run());
            let (c1, w1) = (thread_cpu_ns(), Instant::now());
            rows[i].1.push(per_packet(c1 - c0));
            rows[i].2.push(per_packet((w1 - w0).as_nanos() as u64));
        }
        if with_tcptrace {
            let (c0, w0) = (children_cpu_ns(), Instant::now());
            let st = std::process::Command::new("tcptrace")
                .args(["-n", "-l", "-r"])
                .arg(&path)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .expect("tcptrace runs");
            assert!(st.success(), "tcptrace failed");
            let (c1, w1) = (children_cpu_ns(), Instant::now());
            tcptrace.0.push(per_packet(c1 - c0));
            tcptrace.1.push(per_packet((w1 - w0).as_nanos() as u64));
        }
    }
    let reference = (!tcptrace.0.is_empty()).then(|| median(tcptrace.0.clone()));
    println!("{:<32} {:>9} {:>9} {:>11}", "stage", "cpu µs", "wall µs", "x tcptrace");
    for (name, cpu, wall) in rows {
        let c = median(cpu);
        let x = reference.filter(|&r| r > 0.0 && c > 0.0).map_or(String::from("-"), |r| format!("{:.2}", r / c));
        println!("{:<32} {:>9.3} {:>9.3} {:>11}", name, c, median(wall), x);
    }
    if let Some(r) = reference {
        println!("{:<32} {:>9.3} {:>9.3} {:>11}", "tcptrace -n -l -r", r, median(tcptrace.1), "1.00");
    }
}
