//! tailscope-parsers: read capture files and decode packet headers.
//!
//! Data flows one way: [`source`] opens a (possibly compressed) file, [`capture`] walks the
//! pcap/pcapng records and yields frames with their timestamps, [`decode`] turns one frame into a
//! [`Packet`] (or a counted [`SkipReason`]). Link layers and tunnels are small hand-written views
//! in [`link`] and [`tunnel`]; IP, TCP and UDP headers come from `etherparse`. [`finish`] is the
//! edge agent's copy of a closed raw capture into its compressed spool file.

pub mod bpf;
pub mod capture;
pub mod decode;
pub mod finish;
pub mod link;
pub mod quic;
pub mod select;
pub mod skip;
pub mod source;
pub mod tls_record;
pub mod tunnel;

pub use capture::{CaptureError, CaptureErrorKind, CaptureFormat, CaptureReader, Frame};
pub use decode::{decode_frame, Encap, Packet, TcpInfo, Transport};
pub use skip::{SkipCounts, SkipReason};
pub use source::Compression;
