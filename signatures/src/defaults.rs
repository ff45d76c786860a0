//! The session defaults, one table: `FlowConfig::default`, `SessionConfig::default`, the native
//! module's constructors and, through `_native.defaults()`, the Python layer (CLI, API, engines)
//! all take them from here.

/// End a TCP flow after this idle time (seconds).
pub const TCP_IDLE_TIMEOUT_S: f64 = 900.0;
/// End a UDP (QUIC) flow after this idle time (seconds).
pub const UDP_IDLE_TIMEOUT_S: f64 = 120.0;
/// How long a closed (FIN/FIN or RST) TCP flow keeps collecting late packets (seconds).
pub const TCP_CLOSED_LINGER_S: f64 = 120.0;
/// Most flows held at once; past it the least recently active flow is ended as `evicted`.
pub const MAX_FLOWS: usize = 1_000_000;
/// Rows per output batch of the packets table.
pub const BATCH_ROWS: usize = 65_536;

/// A default, as the Python layer sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Seconds(f64),
    Count(usize),
}

/// Every default by its option name (the keyword of the native constructors and of
/// `tailscope.jobs.run.run_model.AnalyzeOptions`).
pub const TABLE: [(&str, Value); 5] = [
    ("tcp_idle_timeout_s", Value::Seconds(TCP_IDLE_TIMEOUT_S)),
    ("udp_idle_timeout_s", Value::Seconds(UDP_IDLE_TIMEOUT_S)),
    ("tcp_closed_linger_s", Value::Seconds(TCP_CLOSED_LINGER_S)),
    ("max_flows", Value::Count(MAX_FLOWS)),
    ("batch_rows", Value::Count(BATCH_ROWS)),
];

/// Seconds to nanoseconds (whole).
pub(crate) fn ns(seconds: f64) -> i64 {
    (seconds * 1e9) as i64
}
