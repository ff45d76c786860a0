//! Finish one raw capture of the edge agent (capture/finalize.py): copy the classic pcap that
//! `tcpdump -w` closed into a gzip or zstd file, and on the way
//! - count packets and bytes and find the first/last timestamps (for the manifest);
//! - drop the packets the capture hand-over put in both this and the previous file
//!   ([`HandoverDedupe`]; capture/capture.py starts the next tcpdump before stopping the previous);
//! - hash the pcap as kept and the compressed file (sha256 of each, for the manifest);
//! - keep the identity ([`Key`]) of this file's last packets, for the next file to de-duplicate;
//! - stop at a torn last record (tcpdump killed mid-write) and count its bytes.
//!
//! Only the 16-byte record headers are decoded; records are copied as they are (header bytes
//! included), so the kept pcap is the raw one minus the duplicates and a torn tail. The reader is
//! this module's own rather than [`crate::capture`]'s: that one parses pcap and pcapng into frames
//! and does not hand back the record bytes to copy, nor stop quietly at a torn tail.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use blake2::digest::consts::U8;
use blake2::{Blake2b, Digest};
use sha2::Sha256;

use crate::capture::MAX_RECORD;
use crate::source::read_up_to;

const MAGIC_US: u32 = 0xA1B2_C3D4;
const MAGIC_NS: u32 = 0xA1B2_3C4D;
pub const GLOBAL_HEADER_LEN: usize = 24;
const RECORD_HEADER_LEN: usize = 16;
/// Compression levels when the agent's configuration names none (capture.compression_level).
pub const GZIP_DEFAULT_LEVEL: i32 = 6;
pub const ZSTD_DEFAULT_LEVEL: i32 = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Gzip,
    Zstd,
}

impl Codec {
    pub fn parse(name: &str) -> Option<Codec> {
        match name {
            "gzip" => Some(Codec::Gzip),
            "zstd" => Some(Codec::Zstd),
            _ => None,
        }
    }
}

/// Identity of a captured packet, as saved in the agent's dedupe files (spool/dedupe/<stem>.json,
/// `[ts_ns, caplen, wirelen, digest]`): two captures of the same frame share the timestamp and the
/// bytes. `digest` is the hex blake2b digest of 8 bytes of the record data (the format the Python
/// agent wrote, so its files still de-duplicate).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    pub ts_ns: i64,
    pub caplen: u32,
    pub wirelen: u32,
    pub digest: String,
}

pub fn content_digest(data: &[u8]) -> String {
    hex(&Blake2b::<U8>::digest(data))
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Packets of the previous file's tail, to recognise the same packets at the head of this one.
///
/// A packet captured by two sockets has the same bytes in both captures. Received packets also
/// share the kernel timestamp exactly; transmitted ones are timestamped per socket on some
/// kernels, microseconds apart (seen on Linux 6.x). So a match is: same lengths and content
/// digest, and a timestamp within [`Self::TOLERANCE_NS`], closest first (the earlier key on a
/// tie), each key used once. A genuine resend of identical bytes within a millisecond is not
/// possible for TCP (IP ID or TSval change; the minimum RTO is 200 ms).
#[derive(Debug, Default)]
pub struct HandoverDedupe {
    /// (caplen, wirelen, digest) -> timestamps of the unmatched keys, in file order.
    by_content: HashMap<(u32, u32, String), Vec<i64>>,
    max_ts: i64,
}

impl HandoverDedupe {
    pub const TOLERANCE_NS: i64 = 1_000_000;

    pub fn new(keys: impl IntoIterator<Item = Key>) -> Self {
        let mut d = HandoverDedupe { by_content: HashMap::new(), max_ts: -1 };
        for k in keys {
            d.max_ts = d.max_ts.max(k.ts_ns);
            d.by_content.entry((k.caplen, k.wirelen, k.digest)).or_default().push(k.ts_ns);
        }
        d
    }

    /// True (and the match is forgotten) if this record was in the previous file.
    pub fn take(&mut self, ts_ns: i64, caplen: u32, wirelen: u32, data: &[u8]) -> bool {
        // past the previous file's last packet: no digest to compute (the rest of the file)
        if self.by_content.is_empty() || ts_ns > self.max_ts.saturating_add(Self::TOLERANCE_NS) {
            return false;
        }
        let Some(cands) = self.by_content.get_mut(&(caplen, wirelen, content_digest(data))) else {
            return false;
        };
        let mut best: Option<(usize, i64)> = None;
        for (i, &t) in cands.iter().enumerate() {
            let dist = (t - ts_ns).abs();
            if best.is_none_or(|(_, d)| dist < d) {
                best = Some((i, dist));
            }
        }
        match best {
            Some((i, dist)) if dist <= Self::TOLERANCE_NS => {
                cands.remove(i);
                true
            }
            _ => false,
        }
    }
}

/// What finishing a file found, for the manifest and the next file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub linktype: u32,
    pub snaplen: u32,
    pub packets: u64,
    pub bytes_captured: u64,
    pub bytes_on_wire: u64,
    pub first_ns: Option<i64>,
    pub last_ns: Option<i64>,
    pub duplicates_removed: u64,
    /// Bytes of a torn last record left out (0 when the file ends on a record boundary).
    pub truncated_tail: u64,
    /// The compressed file.
    pub size_bytes: u64,
    pub sha256: String,
    /// The pcap as kept (what decompressing the file gives back).
    pub pcap_size_bytes: u64,
    pub pcap_sha256: String,
    /// Keys of the kept packets at or after `tail_from_ns`, in file order.
    pub tail: Vec<Key>,
}

#[derive(Debug)]
pub enum FinishError {
    /// Reading the capture or writing the output failed (worth retrying: disk full, ...).
    Io(io::Error),
    /// Not a classic pcap, or a record no tcpdump writes (retrying cannot help).
    BadCapture(String),
    /// A compression level the codec does not have.
    BadLevel(String),
}

impl std::fmt::Display for FinishError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FinishError::Io(e) => write!(f, "{e}"),
            FinishError::BadCapture(m) | FinishError::BadLevel(m) => f.write_str(m),
        }
    }
}

impl From<io::Error> for FinishError {
    fn from(e: io::Error) -> Self {
        FinishError::Io(e)
    }
}

/// Counts and hashes what the compressor writes: the landed file's size and sha256.
struct Hashing<W> {
    inner: W,
    sha: Sha256,
    size: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sha.update(&buf[..n]);
        self.size += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

enum Encoder<W: Write> {
    Gzip(flate2::write::GzEncoder<W>),
    Zstd(zstd::stream::write::Encoder<'static, W>),
}

impl<W: Write> Encoder<W> {
    fn new(codec: Codec, level: Option<i32>, out: W) -> Result<Self, FinishError> {
        Ok(match codec {
            Codec::Gzip => {
                let level = level.unwrap_or(GZIP_DEFAULT_LEVEL);
                if !(0..=9).contains(&level) {
                    return Err(bad_level(format!("gzip compression level {level} is not within 0..9")));
                }
                // mtime 0 and no file name: the same pcap always compresses to the same bytes, so a
                // redone finalization after a crash has the same sha256 as the first attempt.
                let gz = flate2::GzBuilder::new().mtime(0).operating_system(255);
                Encoder::Gzip(gz.write(out, flate2::Compression::new(level as u32)))
            }
            Codec::Zstd => {
                let level = level.unwrap_or(ZSTD_DEFAULT_LEVEL);
                let range = zstd::compression_level_range();
                if !range.contains(&level) {
                    return Err(bad_level(format!(
                        "zstd compression level {level} is not within {}..{}",
                        range.start(),
                        range.end()
                    )));
                }
                // single-threaded, no content size or checksum in the frame: deterministic too
                Encoder::Zstd(zstd::stream::write::Encoder::new(out, level)?)
            }
        })
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Encoder::Gzip(e) => e.write_all(buf),
            Encoder::Zstd(e) => e.write_all(buf),
        }
    }

    fn finish(self) -> io::Result<W> {
        match self {
            Encoder::Gzip(e) => e.finish(),
            Encoder::Zstd(e) => e.finish(),
        }
    }
}

fn bad_level(msg: String) -> FinishError {
    FinishError::BadLevel(msg)
}

/// The fields of a classic pcap file header the agent needs.
#[derive(Debug, Clone, Copy)]
struct PcapHeader {
    big_endian: bool,
    nanos: bool,
    snaplen: u32,
    linktype: u32,
}

fn u32_at(b: &[u8], i: usize, big_endian: bool) -> u32 {
    let v: [u8; 4] = b[i..i + 4].try_into().expect("4 bytes");
    if big_endian {
        u32::from_be_bytes(v)
    } else {
        u32::from_le_bytes(v)
    }
}

fn parse_global_header(raw: &[u8]) -> Result<PcapHeader, FinishError> {
    if raw.len() < GLOBAL_HEADER_LEN {
        return Err(FinishError::BadCapture("file shorter than a pcap header".into()));
    }
    for big_endian in [false, true] {
        let u32_at = |i: usize| u32_at(raw, i, big_endian);
        let magic = u32_at(0);
        if magic == MAGIC_US || magic == MAGIC_NS {
            // the top 4 bits of the link type field carry FCS information, not the link type
            return Ok(PcapHeader {
                big_endian,
                nanos: magic == MAGIC_NS,
                snaplen: u32_at(16),
                linktype: u32_at(20) & 0x0FFF_FFFF,
            });
        }
    }
    Err(FinishError::BadCapture("not a classic pcap file (bad magic)".into()))
}

/// Finish the pcap read from `raw` into `out` (see the module comment). `dedupe` holds the previous
/// file's tail keys; the keys of kept packets timestamped at or after `tail_from_ns` are returned.
/// Returns `out` too, flushed, so the caller can sync it.
pub fn finish_stream<R: Read, W: Write>(
    raw: R,
    out: W,
    codec: Codec,
    level: Option<i32>,
    dedupe: &mut HandoverDedupe,
    tail_from_ns: Option<i64>,
) -> Result<(Finished, W), FinishError> {
    let mut raw = raw;
    let mut enc = Encoder::new(codec, level, Hashing { inner: out, sha: Sha256::new(), size: 0 })?;
    let mut header = [0u8; GLOBAL_HEADER_LEN];
    let got = read_up_to(&mut raw, &mut header)?;
    let hdr = parse_global_header(&header[..got])?;
    let mut f = Finished {
        linktype: hdr.linktype,
        snaplen: hdr.snaplen,
        packets: 0,
        bytes_captured: 0,
        bytes_on_wire: 0,
        first_ns: None,
        last_ns: None,
        duplicates_removed: 0,
        truncated_tail: 0,
        size_bytes: 0,
        sha256: String::new(),
        pcap_size_bytes: GLOBAL_HEADER_LEN as u64,
        pcap_sha256: String::new(),
        tail: Vec::new(),
    };
    let mut pcap_sha = Sha256::new();
    enc.write_all(&header)?;
    pcap_sha.update(header);
    let frac_mult: i64 = if hdr.nanos { 1 } else { 1000 };
    let mut rec = [0u8; RECORD_HEADER_LEN];
    let mut data: Vec<u8> = Vec::new();
    let mut offset = GLOBAL_HEADER_LEN as u64;
    loop {
        let got = read_up_to(&mut raw, &mut rec)?;
        if got < RECORD_HEADER_LEN {
            f.truncated_tail = got as u64; // 0: the file ended on a record boundary
            break;
        }
        let field = |i: usize| u32_at(&rec, i, hdr.big_endian);
        let (sec, frac, caplen, wirelen) = (field(0), field(4), field(8), field(12));
        if caplen as usize > MAX_RECORD {
            return Err(FinishError::BadCapture(format!(
                "implausible record length {caplen} in the record at byte {offset}"
            )));
        }
        data.resize(caplen as usize, 0);
        let got = read_up_to(&mut raw, &mut data)?;
        if got < data.len() {
            f.truncated_tail = (RECORD_HEADER_LEN + got) as u64;
            break;
        }
        offset += (RECORD_HEADER_LEN + data.len()) as u64;
        let ts_ns = i64::from(sec) * 1_000_000_000 + i64::from(frac) * frac_mult;
        if dedupe.take(ts_ns, caplen, wirelen, &data) {
            f.duplicates_removed += 1;
            continue;
        }
        if tail_from_ns.is_some_and(|t| ts_ns >= t) {
            f.tail.push(Key { ts_ns, caplen, wirelen, digest: content_digest(&data) });
        }
        enc.write_all(&rec)?;
        enc.write_all(&data)?;
        pcap_sha.update(rec);
        pcap_sha.update(&data);
        f.pcap_size_bytes += (RECORD_HEADER_LEN + data.len()) as u64;
        f.packets += 1;
        f.bytes_captured += u64::from(caplen);
        f.bytes_on_wire += u64::from(wirelen);
        f.first_ns = Some(f.first_ns.map_or(ts_ns, |v| v.min(ts_ns)));
        f.last_ns = Some(f.last_ns.map_or(ts_ns, |v| v.max(ts_ns)));
    }
    let mut sink = enc.finish()?;
    sink.flush()?;
    f.size_bytes = sink.size;
    f.sha256 = hex(&sink.sha.finalize());
    f.pcap_sha256 = hex(&pcap_sha.finalize());
    Ok((f, sink.inner))
}

/// [`finish_stream`] from the file `raw_path` into a new file `out_path` (replaced if there, and
/// synced to disk before returning). Errors name the file they concern.
pub fn finish_file(
    raw_path: &Path,
    out_path: &Path,
    codec: Codec,
    level: Option<i32>,
    dedupe: &mut HandoverDedupe,
    tail_from_ns: Option<i64>,
) -> Result<Finished, FinishError> {
    let named = |p: &Path, e: FinishError| match e {
        FinishError::Io(e) => FinishError::Io(io::Error::new(e.kind(), format!("{}: {e}", p.display()))),
        FinishError::BadCapture(m) => FinishError::BadCapture(format!("{}: {m}", p.display())),
        e @ FinishError::BadLevel(_) => e,
    };
    let raw = File::open(raw_path).map_err(|e| named(raw_path, e.into()))?;
    let out = File::create(out_path).map_err(|e| named(out_path, e.into()))?;
    let out = BufWriter::with_capacity(1 << 16, out);
    // read and write errors are told apart by where they happen: mark the output's
    let (f, out) =
        finish_stream(BufReader::with_capacity(1 << 20, raw), WriteNamed(out), codec, level, dedupe, tail_from_ns)
            .map_err(|e| match e {
                FinishError::Io(e) if e.get_ref().is_some_and(|i| i.is::<OutputError>()) => FinishError::Io(
                    io::Error::new(e.kind(), format!("{}: {}", out_path.display(), e.into_inner().expect("checked"))),
                ),
                e => named(raw_path, e),
            })?;
    let file = out.0.into_inner().map_err(|e| named(out_path, e.into_error().into()))?;
    file.sync_all().map_err(|e| named(out_path, e.into()))?;
    Ok(f)
}

/// Marks errors of the output file, so [`finish_file`] names the right file.
#[derive(Debug)]
struct OutputError(io::Error);

impl std::fmt::Display for OutputError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for OutputError {}

struct WriteNamed<W>(W);

impl<W: Write> Write for WriteNamed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).map_err(|e| io::Error::new(e.kind(), OutputError(e)))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush().map_err(|e| io::Error::new(e.kind(), OutputError(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: i64 = 1_714_564_800 * 1_000_000_000;

    /// A classic pcap: (ts_ns, data, wirelen) records.
    fn pcap(records: &[(i64, Vec<u8>, u32)], nanos: bool, big_endian: bool) -> Vec<u8> {
        let u32b = |v: u32| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
        let u16b = |v: u16| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
        let mut out = Vec::new();
        out.extend(u32b(if nanos { MAGIC_NS } else { MAGIC_US }));
        out.extend(u16b(2));
        out.extend(u16b(4));
        out.extend(u32b(0));
        out.extend(u32b(0));
        out.extend(u32b(192));
        out.extend(u32b(1));
        for (ts, data, wirelen) in records {
            let (sec, frac) = (ts / 1_000_000_000, ts % 1_000_000_000);
            out.extend(u32b(sec as u32));
            out.extend(u32b(if nanos { frac } else { frac / 1000 } as u32));
            out.extend(u32b(data.len() as u32));
            out.extend(u32b(*wirelen));
            out.extend(data);
        }
        out
    }

    fn pkt(i: u32) -> Vec<u8> {
        let mut d = format!("P{i:06}").into_bytes();
        d.resize(60, 0);
        d
    }

    fn key(ts: i64, data: &[u8]) -> Key {
        Key { ts_ns: ts, caplen: data.len() as u32, wirelen: data.len() as u32, digest: content_digest(data) }
    }

    fn run(raw: &[u8], codec: Codec, dedupe: &mut HandoverDedupe, tail_from: Option<i64>) -> (Finished, Vec<u8>) {
        finish_stream(raw, Vec::new(), codec, None, dedupe, tail_from).expect("finishes")
    }

    fn decompress(codec: Codec, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match codec {
            Codec::Gzip => flate2::read::GzDecoder::new(data).read_to_end(&mut out).unwrap(),
            Codec::Zstd => zstd::stream::read::Decoder::new(data).unwrap().read_to_end(&mut out).unwrap(),
        };
        out
    }

    fn sha_hex(b: &[u8]) -> String {
        hex(&Sha256::digest(b))
    }

    #[test]
    fn digest_is_pythons_blake2b_8() {
        // hashlib.blake2b(b"abc", digest_size=8).hexdigest(): the dedupe files' format
        assert_eq!(content_digest(b"abc"), "d8bb14d833d59559");
        assert_eq!(content_digest(b""), "e4a6a0577479b2b4");
    }

    #[test]
    fn both_compressions_round_trip_with_counts_and_hashes() {
        let recs: Vec<_> = (0..50).map(|i| (T0 + i64::from(i) * 1000, pkt(i), 1500)).collect();
        for (nanos, big) in [(true, false), (false, true)] {
            let raw = pcap(&recs, nanos, big);
            for codec in [Codec::Gzip, Codec::Zstd] {
                let (f, out) = run(&raw, codec, &mut HandoverDedupe::default(), None);
                assert_eq!(decompress(codec, &out), raw);
                assert_eq!((f.packets, f.bytes_captured, f.bytes_on_wire), (50, 50 * 60, 50 * 1500));
                assert_eq!((f.first_ns, f.last_ns), (Some(T0), Some(T0 + 49_000)));
                assert_eq!((f.linktype, f.snaplen, f.truncated_tail, f.duplicates_removed), (1, 192, 0, 0));
                assert_eq!((f.size_bytes, f.sha256.clone()), (out.len() as u64, sha_hex(&out)));
                assert_eq!((f.pcap_size_bytes, f.pcap_sha256), (raw.len() as u64, sha_hex(&raw)));
            }
        }
    }

    #[test]
    fn output_is_deterministic() {
        let recs: Vec<_> = (0..200).map(|i| (T0 + i64::from(i), pkt(i), 60)).collect();
        let raw = pcap(&recs, true, false);
        for codec in [Codec::Gzip, Codec::Zstd] {
            let a = run(&raw, codec, &mut HandoverDedupe::default(), None).1;
            let b = run(&raw, codec, &mut HandoverDedupe::default(), None).1;
            assert_eq!(a, b);
        }
        // gzip header: no name, mtime 0, OS unknown (as Python's gzip.GzipFile(mtime=0) wrote)
        let gz = run(&raw, Codec::Gzip, &mut HandoverDedupe::default(), None).1;
        assert_eq!(&gz[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255]);
    }

    #[test]
    fn torn_tail_is_cut_and_counted() {
        let recs: Vec<_> = (0..5).map(|i| (T0 + i64::from(i), pkt(i), 60)).collect();
        let raw = pcap(&recs, true, false);
        for cut in [7usize, 60, 76 - 3] {
            let (f, out) = run(&raw[..raw.len() - cut], Codec::Gzip, &mut HandoverDedupe::default(), None);
            assert_eq!((f.packets, f.truncated_tail), (4, (76 - cut) as u64), "cut {cut}");
            assert_eq!(decompress(Codec::Gzip, &out), raw[..raw.len() - 76]);
        }
        let (f, _) = run(&raw[..GLOBAL_HEADER_LEN], Codec::Zstd, &mut HandoverDedupe::default(), None);
        assert_eq!((f.packets, f.truncated_tail, f.first_ns), (0, 0, None));
    }

    #[test]
    fn bad_captures_are_refused() {
        let err = |raw: &[u8]| match finish_stream(
            raw,
            Vec::new(),
            Codec::Gzip,
            None,
            &mut HandoverDedupe::default(),
            None,
        ) {
            Err(FinishError::BadCapture(m)) => m,
            other => panic!("expected BadCapture, got {:?}", other.map(|r| r.0)),
        };
        assert!(err(b"not a pcap file at all......").contains("bad magic"));
        assert!(err(&pcap(&[], true, false)[..20]).contains("shorter than a pcap header"));
        let mut huge = pcap(&[(T0, pkt(0), 60)], true, false);
        huge[24 + 8..24 + 12].copy_from_slice(&(MAX_RECORD as u32 + 1).to_le_bytes());
        assert!(err(&huge).contains("implausible record length"));
    }

    #[test]
    fn dedupe_rules() {
        let mut d = HandoverDedupe::new([key(T0, b"a"), key(T0 + 10, b"a"), key(T0 + 20, b"b")]);
        let mut take = |ts: i64, data: &[u8]| d.take(ts, data.len() as u32, data.len() as u32, data);
        assert!(take(T0 + 10, b"a")); // exact
        assert!(take(T0 + 999_000, b"a")); // within 1 ms: the other copy
        assert!(!take(T0 + 10, b"a")); // both copies used up
        assert!(!take(T0 + 20 + 2_000_000, b"b")); // too far apart: a different packet
        assert!(!take(T0 + 21, b"c")); // other bytes
        assert!(take(T0 + 21, b"b"));
        // lengths are part of the identity
        let mut d = HandoverDedupe::new([key(T0, b"a")]);
        assert!(!d.take(T0, 1, 2, b"a"));
        assert!(d.take(T0, 1, 1, b"a"));
    }

    #[test]
    fn closest_key_is_taken_first() {
        // keys 0.4 ms and 0.9 ms from the packet: the closer one goes, the other is left for
        // a packet only it is close enough to
        let mut d = HandoverDedupe::new([key(T0, b"x"), key(T0 + 500_000, b"x")]);
        assert!(d.take(T0 + 900_000, 1, 1, b"x")); // takes T0 + 0.5 ms
        assert!(!d.take(T0 + 1_100_000, 1, 1, b"x")); // T0 is 1.1 ms away
        assert!(d.take(T0 + 1_000_000, 1, 1, b"x")); // exactly the tolerance: still the same packet
                                                     // a tie goes to the earlier key (Python's min() did so; the dedupe files keep file order)
        let mut d = HandoverDedupe::new([key(T0 - 500, b"x"), key(T0 + 500, b"x")]);
        assert!(d.take(T0, 1, 1, b"x"));
        assert!(d.take(T0 + 1_000_400, 1, 1, b"x")); // only T0 + 500 ns is left within 1 ms
    }

    #[test]
    fn handover_overlap_is_removed_and_tail_saved() {
        // file A's last packets, saved from succ_ns on, then file B starting with a copy of them
        let succ_ns = T0 + 10 * 1_000_000_000;
        let a: Vec<_> = (0..120).map(|i| (T0 + i64::from(i) * 100_000_000, pkt(i), 100)).collect();
        let (fa, _) = run(&pcap(&a, true, false), Codec::Zstd, &mut HandoverDedupe::default(), Some(succ_ns));
        assert_eq!(fa.tail.len(), 20);
        assert_eq!(fa.tail[0], Key { ts_ns: succ_ns, caplen: 60, wirelen: 100, digest: content_digest(&pkt(100)) });
        // B saw A's packets from 10.5 s on, the TX ones stamped 3 us later, plus a resend of the
        // last one 5 ms later (a real packet) and its own
        let mut b: Vec<_> = a[105..]
            .iter()
            .enumerate()
            .map(|(i, (ts, d, w))| (ts + if i % 2 == 1 { 3000 } else { 0 }, d.clone(), *w))
            .collect();
        b.push((a[119].0 + 5_000_000, pkt(119), 100));
        b.extend((0..30).map(|i| (T0 + 12_000_000_000 + i64::from(i) * 100_000_000, pkt(1000 + i), 100)));
        let mut d = HandoverDedupe::new(fa.tail);
        let (fb, out) = run(&pcap(&b, true, false), Codec::Gzip, &mut d, None);
        assert_eq!((fb.duplicates_removed, fb.packets), (15, 31));
        assert_eq!(fb.first_ns, Some(a[119].0 + 5_000_000));
        assert_eq!(decompress(Codec::Gzip, &out), pcap(&b[15..], true, false));
        // the kept pcap's hash is of what was kept, not of the raw file
        assert_eq!(fb.pcap_sha256, sha_hex(&pcap(&b[15..], true, false)));
    }

    #[test]
    fn levels_are_checked() {
        for (codec, level) in [(Codec::Gzip, 10), (Codec::Gzip, -1), (Codec::Zstd, 99)] {
            let r = finish_stream(
                &pcap(&[], true, false)[..],
                Vec::new(),
                codec,
                Some(level),
                &mut HandoverDedupe::default(),
                None,
            );
            assert!(matches!(r, Err(FinishError::BadLevel(_))), "{codec:?} {level}");
        }
    }
}
