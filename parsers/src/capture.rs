//! Walk the records of a pcap or pcapng stream and yield frames with UTC nanosecond timestamps.
//!
//! Record parsing is `pcap-parser`'s; this module adds what a passive analyser needs on top:
//! per-interface link types and timestamp resolutions (pcapng), frame numbering that matches
//! Wireshark's, a bounded buffer that grows only for honest large records, and errors that name
//! the byte offset where the stream went wrong.

use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex};

use pcap_parser::pcapng::Block;
use pcap_parser::traits::PcapReaderIterator;
use pcap_parser::{PcapBlockOwned, PcapError};

use crate::source::{self, Compression};

/// Initial read buffer; enough for any ordinary frame and a few hundred small ones.
const INITIAL_BUFFER: usize = 1 << 20;
/// The largest record we accept. Real frames are < 256 KiB (jumbo/TSO/GRO); a claimed length past
/// this is a corrupt or hostile length field, and honouring it would let one file exhaust memory.
pub const MAX_RECORD: usize = 64 << 20;
/// Bytes read up front so the format sniffer always sees a whole file header.
const PREFIX: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureFormat {
    Pcap,
    PcapNg,
}

impl CaptureFormat {
    pub fn name(self) -> &'static str {
        match self {
            CaptureFormat::Pcap => "pcap",
            CaptureFormat::PcapNg => "pcapng",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaptureErrorKind {
    Io(String),
    EmptyFile,
    NotACapture,
    /// The stream ended inside a record (the usual result of a capture killed mid-write).
    Truncated,
    /// A record claims more bytes than [`MAX_RECORD`].
    RecordTooLarge(u64),
    Corrupt(String),
    /// The user's capture filter cannot apply to a frame (its link type).
    Filter(String),
}

/// An error reading a capture, with the byte offset (in the decompressed stream) of the record
/// where it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureError {
    pub offset: u64,
    pub kind: CaptureErrorKind,
}

impl std::fmt::Display for CaptureError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            CaptureErrorKind::Io(e) => write!(f, "read error at byte {}: {}", self.offset, e),
            CaptureErrorKind::EmptyFile => write!(f, "empty file (0 bytes): not a capture"),
            CaptureErrorKind::NotACapture => write!(f, "not a pcap or pcapng file (unrecognised header at byte 0)"),
            CaptureErrorKind::Truncated => {
                write!(f, "truncated: the file ends inside the record starting at byte {}", self.offset)
            }
            CaptureErrorKind::RecordTooLarge(n) => {
                write!(f, "corrupt record at byte {}: claims {} bytes (limit {} bytes)", self.offset, n, MAX_RECORD)
            }
            CaptureErrorKind::Corrupt(e) => {
                write!(f, "corrupt record at byte {}: {}", self.offset, e)
            }
            CaptureErrorKind::Filter(e) => write!(f, "record at byte {}: {}", self.offset, e),
        }
    }
}

impl std::error::Error for CaptureError {}

/// One captured frame. `data` is what was captured (`caplen` bytes); `wire_len` what was on the
/// wire, so `wire_len - data.len()` bytes were cut by the snaplen.
#[derive(Debug)]
pub struct Frame<'a> {
    /// 1-based, counting every packet record in the file as Wireshark does.
    pub number: u64,
    pub ts_ns: i64,
    pub linktype: u32,
    pub wire_len: u32,
    pub data: &'a [u8],
    /// Byte offset of the record in the (decompressed) stream.
    pub offset: u64,
}

/// Link type used for frames whose pcapng interface id names no described interface.
pub const LINKTYPE_UNKNOWN_INTERFACE: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Interface {
    linktype: u32,
    units_per_sec: u64,
    ts_offset_s: i64,
    snaplen: u32,
}

pub struct CaptureReader {
    inner: Box<dyn PcapReaderIterator + Send>,
    pub format: CaptureFormat,
    pub compression: Compression,
    /// Legacy pcap: the single link type and timestamp resolution from the file header.
    legacy: Option<Interface>,
    /// pcapng: interfaces of the current section (reset by every Section Header Block).
    interfaces: Vec<Interface>,
    pending_consume: usize,
    frames: u64,
    last_ts_ns: i64,
    pub linktypes_seen: Vec<u32>,
    pub sections: u32,
    /// Byte order of the current pcapng section.
    ng_big_endian: bool,
    /// The last read error of the underlying stream (see [`NoteErrors`]).
    read_error: Arc<Mutex<Option<String>>>,
    /// Bytes of the stored input read (see [`source::Source::consumed`]); None for in-memory data.
    consumed: Option<Arc<std::sync::atomic::AtomicU64>>,
}

/// Passes reads through and keeps the last error's message: pcap-parser turns every read error
/// into a bare `ReadError`, and "incomplete deflate stream" is what the user needs to see.
struct NoteErrors<R> {
    inner: R,
    last: Arc<Mutex<Option<String>>>,
}

impl<R: Read> Read for NoteErrors<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.inner.read(buf).inspect_err(|e| {
            if let Ok(mut last) = self.last.lock() {
                *last = Some(e.to_string());
            }
        })
    }
}

fn io_err(offset: u64, e: impl std::fmt::Display) -> CaptureError {
    CaptureError { offset, kind: CaptureErrorKind::Io(e.to_string()) }
}

/// Timestamp units per second from a pcapng `if_tsresol` (MSB set: power of two, else of ten).
fn units_per_sec(tsresol: u8) -> u64 {
    let exp = u32::from(tsresol & 0x7f);
    if tsresol & 0x80 != 0 {
        1u64.checked_shl(exp).unwrap_or(0)
    } else {
        10u64.checked_pow(exp).unwrap_or(0)
    }
}

fn to_ns(ticks: u64, units_per_sec: u64, offset_s: i64) -> i64 {
    // A resolution that cannot be represented (0 units/s) is treated as microseconds, the default.
    let ups = if units_per_sec == 0 { 1_000_000 } else { units_per_sec };
    // Microseconds and nanoseconds (nearly every capture) scale by a whole factor: the same
    // value without a 128-bit division (a library call) per frame.
    let scaled = match ups {
        1_000_000 => u128::from(ticks) * 1_000,
        1_000_000_000 => u128::from(ticks),
        _ => u128::from(ticks) * 1_000_000_000u128 / u128::from(ups),
    };
    let ns = scaled as i128 + i128::from(offset_s) * 1_000_000_000;
    ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl CaptureReader {
    pub fn open(path: &Path) -> Result<CaptureReader, CaptureError> {
        Self::from_source(source::open(path).map_err(|e| io_err(0, e))?)
    }

    /// A capture streamed on standard input (`tcpdump -w - | tailscope analyze -`).
    pub fn open_stdin() -> Result<CaptureReader, CaptureError> {
        Self::from_source(source::open_stream(std::io::stdin()).map_err(|e| io_err(0, e))?)
    }

    fn from_source(src: source::Source) -> Result<CaptureReader, CaptureError> {
        let mut r = Self::from_reader(src.reader, src.compression)?;
        r.consumed = Some(src.consumed);
        Ok(r)
    }

    /// Bytes of the input as stored (compressed or not) read so far: the progress measure.
    pub fn input_offset(&self) -> u64 {
        self.consumed.as_ref().map_or_else(|| self.offset(), |c| c.load(std::sync::atomic::Ordering::Relaxed))
    }

    pub fn from_reader(
        mut reader: Box<dyn Read + Send>,
        compression: Compression,
    ) -> Result<CaptureReader, CaptureError> {
        let mut prefix = vec![0u8; PREFIX];
        let n = source::read_up_to(&mut reader, &mut prefix).map_err(|e| io_err(0, e))?;
        if n == 0 {
            return Err(CaptureError { offset: 0, kind: CaptureErrorKind::EmptyFile });
        }
        prefix.truncate(n);
        let format = match prefix.get(0..4) {
            Some([0x0a, 0x0d, 0x0d, 0x0a]) => CaptureFormat::PcapNg,
            _ => CaptureFormat::Pcap,
        };
        let read_error = Arc::new(Mutex::new(None));
        let stream = NoteErrors { inner: std::io::Cursor::new(prefix).chain(reader), last: read_error.clone() };
        let inner = pcap_parser::create_reader(INITIAL_BUFFER, stream).map_err(|e| {
            let kind = match e {
                PcapError::HeaderNotRecognized => CaptureErrorKind::NotACapture,
                PcapError::Incomplete(_) | PcapError::Eof | PcapError::UnexpectedEof => CaptureErrorKind::Truncated,
                other => CaptureErrorKind::Corrupt(format!("bad file header: {other:?}")),
            };
            CaptureError { offset: 0, kind }
        })?;
        Ok(CaptureReader {
            inner,
            format,
            compression,
            legacy: None,
            interfaces: Vec::new(),
            pending_consume: 0,
            frames: 0,
            last_ts_ns: 0,
            linktypes_seen: Vec::new(),
            sections: 0,
            ng_big_endian: false,
            consumed: None,
            read_error,
        })
    }

    /// Packet records read so far.
    pub fn frames_read(&self) -> u64 {
        self.frames
    }

    /// Bytes of the (decompressed) stream consumed so far.
    pub fn offset(&self) -> u64 {
        (self.inner.consumed() + self.pending_consume) as u64
    }

    fn note_linktype(&mut self, lt: u32) {
        if !self.linktypes_seen.contains(&lt) {
            self.linktypes_seen.push(lt);
        }
    }

    /// The length a record claims in its header, for error messages about oversized records.
    fn claimed_len(&self) -> u64 {
        let d = self.inner.data();
        let le = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u64;
        let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as u64;
        match self.format {
            // Legacy record header: ts_sec, ts_usec, caplen, origlen. We do not know the byte
            // order here, so report the smaller reading (the other is usually absurd).
            CaptureFormat::Pcap if d.len() >= 12 => le(&d[8..12]).min(be(&d[8..12])),
            CaptureFormat::PcapNg if d.len() >= 8 => match self.ng_block_len() {
                Some(n) => u64::from(n),
                None => le(&d[4..8]).min(be(&d[4..8])),
            },
            _ => 0,
        }
    }

    /// The length field of the pcapng block at the front of the buffer, read in its section's
    /// byte order (a Section Header Block's own, from its byte-order magic).
    fn ng_block_len(&self) -> Option<u32> {
        let d = self.inner.data();
        let b = d.get(0..8)?;
        let big_endian = if b[0..4] == [0x0a, 0x0d, 0x0d, 0x0a] {
            match d.get(8..12)? {
                [0x1a, 0x2b, 0x3c, 0x4d] => true,
                [0x4d, 0x3c, 0x2b, 0x1a] => false,
                _ => return None,
            }
        } else {
            self.ng_big_endian
        };
        let f = [b[4], b[5], b[6], b[7]];
        Some(if big_endian { u32::from_be_bytes(f) } else { u32::from_le_bytes(f) })
    }

    /// What is wrong with the pcapng block at the front of the buffer, found before (or instead
    /// of) pcap-parser's verdict, which for these cases is wrong or worse:
    /// - a length below the 12 bytes every block takes: pcap-parser 0.17 checks each block type
    ///   against its own minimum, and the Process Information Block's is 4, so a length of 4 to
    ///   11 underflows `block_len - 12` inside the parser (a panic with overflow checks, a
    ///   runaway buffer without). Fuzz regression `tests::pcapng_block_shorter_than_its_header`.
    /// - `parser_wants_more` although the whole block is buffered: the block's contents claim
    ///   more than its length (say, an Enhanced Packet Block whose captured length runs past
    ///   the block). The parser asks for more input, which would make us buffer up to
    ///   [`MAX_RECORD`] of the file and then call a whole block "truncated" or "too large".
    fn ng_block_defect(&self, parser_wants_more: bool) -> Option<String> {
        if self.format != CaptureFormat::PcapNg {
            return None;
        }
        let len = self.ng_block_len()?;
        if len < 12 {
            return Some(format!("block length {len} is shorter than a block header (12 bytes)"));
        }
        if parser_wants_more && len as usize <= self.inner.data().len() {
            return Some(format!("the block's contents run past its length ({len} bytes)"));
        }
        None
    }

    /// A read error at `offset`, with the stream's own message when it gave one.
    fn read_failed(&self, offset: u64) -> CaptureError {
        let msg = self.read_error.lock().ok().and_then(|m| m.clone());
        io_err(offset, msg.unwrap_or_else(|| "read failed".into()))
    }

    fn corrupt(offset: u64, msg: String) -> CaptureError {
        CaptureError { offset, kind: CaptureErrorKind::Corrupt(msg) }
    }

    /// Make room or read more so that the block at `offset` can be parsed, or the error that
    /// ends the file there.
    fn resume_after(&mut self, stall: Stall, offset: u64) -> Result<(), CaptureError> {
        if !matches!(stall, Stall::ReadError | Stall::Corrupt(_)) {
            if let Some(msg) = self.ng_block_defect(true) {
                return Err(Self::corrupt(offset, msg));
            }
        }
        match stall {
            Stall::Incomplete => {}
            Stall::BufferTooSmall => {
                let claimed = self.claimed_len();
                let cap = self.inner.data().len().max(INITIAL_BUFFER);
                let want = (cap * 2).max(claimed as usize + 64);
                if want > MAX_RECORD || !self.inner.grow(want) {
                    return Err(CaptureError { offset, kind: CaptureErrorKind::RecordTooLarge(claimed) });
                }
            }
            Stall::UnexpectedEof => return Err(CaptureError { offset, kind: CaptureErrorKind::Truncated }),
            Stall::ReadError => return Err(self.read_failed(offset)),
            Stall::Corrupt(msg) => return Err(CaptureError { offset, kind: CaptureErrorKind::Corrupt(msg) }),
        }
        if self.inner.refill().is_err() {
            return Err(self.read_failed(offset));
        }
        Ok(())
    }

    /// The next packet record, or `None` at a clean end of file.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, CaptureError> {
        loop {
            if self.pending_consume > 0 {
                // Without shifting: `consume` moves the unread half of the buffer to its front
                // each time half of it is read (the whole file, copied once more), while
                // `refill`, when the parser needs more, moves only the partial record left.
                self.inner.consume_noshift(self.pending_consume);
                self.pending_consume = 0;
            }
            let offset = self.inner.consumed() as u64;
            if let Some(msg) = self.ng_block_defect(false) {
                return Err(Self::corrupt(offset, msg));
            }
            let base = self.inner.data().as_ptr() as usize;
            // Copy what we need out of the parsed block so the borrow of the reader ends before
            // we hand out the frame (see the slice taken after the match).
            let (consumed, packet) = match self.inner.next() {
                Ok((consumed, block)) => {
                    let packet = match block {
                        PcapBlockOwned::LegacyHeader(hdr) => {
                            let lt = hdr.network.0 as u32;
                            let ups = if hdr.is_nanosecond_precision() { 1_000_000_000 } else { 1_000_000 };
                            self.legacy = Some(Interface {
                                linktype: lt,
                                units_per_sec: ups,
                                ts_offset_s: 0,
                                snaplen: hdr.snaplen,
                            });
                            self.sections += 1;
                            None
                        }
                        PcapBlockOwned::Legacy(b) => {
                            let iface = self.legacy.unwrap_or(Interface {
                                linktype: 1,
                                units_per_sec: 1_000_000,
                                ts_offset_s: 0,
                                snaplen: 0,
                            });
                            let ticks = u64::from(b.ts_sec) * iface.units_per_sec + u64::from(b.ts_usec);
                            let cap = (b.caplen as usize).min(b.data.len());
                            Some((
                                iface.linktype,
                                to_ns(ticks, iface.units_per_sec, 0),
                                b.origlen.max(cap as u32),
                                b.data.as_ptr() as usize - base,
                                cap,
                            ))
                        }
                        PcapBlockOwned::NG(Block::SectionHeader(shb)) => {
                            self.ng_big_endian = shb.big_endian();
                            self.interfaces.clear();
                            self.sections += 1;
                            None
                        }
                        PcapBlockOwned::NG(Block::InterfaceDescription(idb)) => {
                            self.interfaces.push(Interface {
                                linktype: idb.linktype.0 as u32,
                                units_per_sec: units_per_sec(idb.if_tsresol),
                                ts_offset_s: idb.if_tsoffset,
                                snaplen: idb.snaplen,
                            });
                            None
                        }
                        PcapBlockOwned::NG(Block::EnhancedPacket(epb)) => {
                            let cap = (epb.caplen as usize).min(epb.data.len());
                            let ticks = (u64::from(epb.ts_high) << 32) | u64::from(epb.ts_low);
                            let (lt, ts) = match self.interfaces.get(epb.if_id as usize) {
                                Some(i) => (i.linktype, to_ns(ticks, i.units_per_sec, i.ts_offset_s)),
                                None => (LINKTYPE_UNKNOWN_INTERFACE, to_ns(ticks, 1_000_000, 0)),
                            };
                            Some((lt, ts, epb.origlen.max(cap as u32), epb.data.as_ptr() as usize - base, cap))
                        }
                        PcapBlockOwned::NG(Block::SimplePacket(spb)) => {
                            // No timestamp in a Simple Packet Block: keep the previous one, so
                            // the frame still sorts where it was captured.
                            let (lt, snap) = match self.interfaces.first() {
                                Some(i) => (i.linktype, i.snaplen),
                                None => (LINKTYPE_UNKNOWN_INTERFACE, 0),
                            };
                            let mut cap = (spb.origlen as usize).min(spb.data.len());
                            if snap > 0 {
                                cap = cap.min(snap as usize);
                            }
                            Some((
                                lt,
                                self.last_ts_ns,
                                spb.origlen.max(cap as u32),
                                spb.data.as_ptr() as usize - base,
                                cap,
                            ))
                        }
                        PcapBlockOwned::NG(_) => None,
                    };
                    (consumed, packet)
                }
                Err(PcapError::Eof) => return Ok(None),
                Err(e) => {
                    let stall = Stall::of(e);
                    self.resume_after(stall, offset)?;
                    continue;
                }
            };
            match packet {
                None => {
                    self.inner.consume_noshift(consumed);
                }
                Some((linktype, ts_ns, wire_len, start, cap)) => {
                    self.pending_consume = consumed;
                    self.frames += 1;
                    self.last_ts_ns = ts_ns;
                    self.note_linktype(linktype);
                    let data = &self.inner.data()[start..start + cap];
                    return Ok(Some(Frame { number: self.frames, ts_ns, linktype, wire_len, data, offset }));
                }
            }
        }
    }
}

/// Why the parser stopped short of a block, in a form that no longer borrows the buffer.
enum Stall {
    /// More bytes are needed.
    Incomplete,
    /// The block is larger than the buffer.
    BufferTooSmall,
    /// The file ends inside the block.
    UnexpectedEof,
    ReadError,
    Corrupt(String),
}

impl Stall {
    fn of(e: PcapError<&[u8]>) -> Stall {
        match e {
            PcapError::Incomplete(_) => Stall::Incomplete,
            PcapError::BufferTooSmall => Stall::BufferTooSmall,
            PcapError::UnexpectedEof => Stall::UnexpectedEof,
            PcapError::ReadError => Stall::ReadError,
            PcapError::NomError(_, k) | PcapError::OwnedNomError(_, k) => {
                Stall::Corrupt(format!("unparseable block ({k:?})"))
            }
            other => Stall::Corrupt(format!("{other:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsresol_decoding() {
        assert_eq!(units_per_sec(6), 1_000_000);
        assert_eq!(units_per_sec(9), 1_000_000_000);
        assert_eq!(units_per_sec(0x80 | 10), 1024);
        assert_eq!(units_per_sec(100), 0);
        assert_eq!(to_ns(1_500_000, 1_000_000, 0), 1_500_000_000);
        assert_eq!(to_ns(3, 1_000_000_000, 2), 2_000_000_003);
    }

    fn read_all(data: Vec<u8>) -> (u64, Option<CaptureError>) {
        let mut r = match CaptureReader::from_reader(Box::new(std::io::Cursor::new(data)), Compression::None) {
            Ok(r) => r,
            Err(e) => return (0, Some(e)),
        };
        loop {
            match r.next_frame() {
                Ok(Some(_)) => {}
                Ok(None) => return (r.frames_read(), None),
                Err(e) => return (r.frames_read(), Some(e)),
            }
        }
    }

    fn ng_block(btype: u32, body: &[u8], big_endian: bool) -> Vec<u8> {
        let n = (12 + body.len()) as u32;
        let w = |v: u32| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
        [&w(btype)[..], &w(n), body, &w(n)].concat()
    }

    fn shb(big_endian: bool) -> Vec<u8> {
        let mut body = if big_endian { 0x1A2B3C4Du32.to_be_bytes() } else { 0x1A2B3C4Du32.to_le_bytes() }.to_vec();
        body.extend_from_slice(&if big_endian { [0, 1, 0, 0] } else { [1, 0, 0, 0] });
        body.extend_from_slice(&[0xff; 8]);
        ng_block(0x0A0D0D0A, &body, big_endian)
    }

    /// Fuzz regression (capture_reader, `attempt to subtract with overflow` in pcap-parser's
    /// block parser): a Process Information Block (0x80000001) whose length field says 10.
    #[test]
    fn pcapng_block_shorter_than_its_header() {
        for big_endian in [false, true] {
            for len in [0u32, 4, 8, 10, 11] {
                let mut data = shb(big_endian);
                let w = |v: u32| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
                let at = data.len() as u64;
                data.extend_from_slice(&w(0x8000_0001));
                data.extend_from_slice(&w(len));
                data.extend_from_slice(&[0; 40]);
                let (frames, err) = read_all(data);
                let err = err.expect("an error");
                assert_eq!(frames, 0);
                assert_eq!(err.offset, at, "{err}");
                assert!(matches!(err.kind, CaptureErrorKind::Corrupt(_)), "{big_endian} {len}: {err}");
                assert!(err.to_string().contains(&format!("block length {len}")), "{err}");
            }
        }
        // An Enhanced Packet Block whose captured length runs past its block, in a file much
        // larger than the read buffer: a clear "corrupt" at once, not 64 MiB buffered first.
        for big_endian in [false, true] {
            let w = |v: u32| if big_endian { v.to_be_bytes() } else { v.to_le_bytes() };
            let mut data = shb(big_endian);
            data.extend_from_slice(&ng_block(1, &[&w(1)[..2], &[0, 0], &w(0)].concat(), big_endian));
            let at = data.len() as u64;
            let body = [&w(0)[..], &w(0), &w(0), &w(4000), &w(60), &[0u8; 60]].concat();
            data.extend_from_slice(&ng_block(6, &body, big_endian));
            data.extend(std::iter::repeat_n(0u8, 3 * INITIAL_BUFFER));
            let (frames, err) = read_all(data);
            let err = err.expect("an error");
            assert_eq!((frames, err.offset), (0, at), "{err}");
            assert!(err.to_string().contains("contents run past its length (92 bytes)"), "{err}");
        }
        // A well-formed block of another type after the section header is still read past.
        let mut data = shb(false);
        data.extend_from_slice(&ng_block(0x8000_0001, &[0; 8], false));
        assert_eq!(read_all(data), (0, None));
    }

    /// A compressed capture cut short: the decompressor's own message, not pcap-parser's bare
    /// `ReadError`.
    #[test]
    fn cut_gzip_stream_says_why() {
        use std::io::Write;
        let mut pcap = vec![0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 1, 0, 0, 0];
        let mut x = 0x1234_5678u32;
        for i in 0..3000u32 {
            pcap.extend_from_slice(
                &[&i.to_le_bytes()[..], &[0; 4], &100u32.to_le_bytes(), &100u32.to_le_bytes()].concat(),
            );
            // incompressible payload, so the cut lands well inside the records
            pcap.extend((0..100).map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            }));
        }
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&pcap).unwrap();
        let gz = gz.finish().unwrap();
        let path = std::env::temp_dir().join(format!("tailscope-cut-{}.pcap.gz", std::process::id()));
        std::fs::write(&path, &gz[..gz.len() / 2]).unwrap();
        let mut r = CaptureReader::open(&path).unwrap();
        let err = loop {
            match r.next_frame() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("a cut stream read to the end"),
                Err(e) => break e,
            }
        };
        std::fs::remove_file(&path).ok();
        assert!(r.frames_read() > 100, "{}", r.frames_read());
        assert!(matches!(err.kind, CaptureErrorKind::Io(_)), "{err}");
        assert!(err.to_string().contains("deflate"), "{err}");
    }
}
