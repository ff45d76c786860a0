//! TLS records as the start of a TCP segment shows them, without decryption (RFC 8446 §5.1,
//! RFC 5246 §6.2): each record is a 5-byte header - content type, legacy version 3.x, length -
//! and its body. Only headers inside the captured bytes are read (a 128-byte snaplen shows ~60
//! bytes of payload).

pub const CHANGE_CIPHER_SPEC: u8 = 20;
pub const ALERT: u8 = 21;
pub const HANDSHAKE: u8 = 22;
pub const APPLICATION_DATA: u8 = 23;
/// Handshake message type of a ClientHello (RFC 8446 §4).
const CLIENT_HELLO: u8 = 1;

/// A record header's bytes: content type, legacy version, length.
pub const HEADER_LEN: usize = 5;
/// RFC 5246 §6.2.3: a TLSCiphertext fragment is at most 2^14 + 2048 bytes.
const MAX_LEN: usize = (1 << 14) + 2048;
/// Records walked per segment: a handshake flight's few, then it no longer matters.
const MAX_RECORDS: usize = 4;

/// One record header: its content type and body length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub content_type: u8,
    pub length: usize,
}

impl RecordHeader {
    /// The header at the start of `bytes`, if they look like one (a known content type, version
    /// 3.0-3.4, a length TLS allows).
    pub fn parse(bytes: &[u8]) -> Option<RecordHeader> {
        let h = bytes.get(..HEADER_LEN)?;
        let length = usize::from(u16::from_be_bytes([h[3], h[4]]));
        let known = (CHANGE_CIPHER_SPEC..=APPLICATION_DATA).contains(&h[0]);
        (known && h[1] == 3 && h[2] <= 4 && length > 0 && length <= MAX_LEN)
            .then_some(RecordHeader { content_type: h[0], length })
    }
}

/// The records a segment starts with, as far as the captured bytes show their headers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentRecords {
    /// Content types in order (the first `count`).
    pub types: [u8; MAX_RECORDS],
    pub count: usize,
    /// The walk ended exactly at the segment's end: every record in it is listed.
    pub complete: bool,
    /// The first record is a handshake record holding a ClientHello.
    pub client_hello: bool,
    /// The first record's body length (0 when the segment is `continued`).
    pub first_length: usize,
    /// Beyond the records listed (`MAX_RECORDS`), the walk reads on as far as the captured bytes
    /// go, for these three: the largest body length of every record read,
    pub max_length: usize,
    /// every record read was application data,
    pub only_application_data: bool,
    /// and the records read end exactly at the segment's end, or the next header lies beyond the
    /// captured bytes (a snaplen: the records there are unknown).
    pub read_to_end_or_snap: bool,
    /// Where the last record listed ends, from the segment's first byte: beyond `seglen` when
    /// that record continues in the next segments (a ~1.5 kB ClientHello, a large response record).
    pub end: usize,
    /// The segment starts inside a record begun in an earlier one: `types[0]` is that record's
    /// type, known from its header there (see `continuing`).
    pub continued: bool,
}

impl SegmentRecords {
    /// Walk the records from the segment's first byte: `captured` its bytes the capture kept,
    /// `seglen` its payload length on the wire. None when it does not start with a record
    /// header (no TLS, or the middle of a record).
    pub fn walk(captured: &[u8], seglen: usize) -> Option<SegmentRecords> {
        let first = RecordHeader::parse(captured)?;
        let mut out = SegmentRecords {
            client_hello: first.content_type == HANDSHAKE && captured.get(HEADER_LEN) == Some(&CLIENT_HELLO),
            first_length: first.length,
            ..SegmentRecords::default()
        };
        // The first `MAX_RECORDS` are listed; the walk reads on past them, as far as the captured
        // bytes go, for `max_length` and the rest (HTTP/2 clients send a dozen 43-byte
        // WINDOW_UPDATE records in one segment when their reader falls behind).
        let mut at = 0;
        out.only_application_data = true;
        loop {
            let Some(h) = RecordHeader::parse(captured.get(at..).unwrap_or_default()) else {
                out.read_to_end_or_snap = captured.len() < at + HEADER_LEN;
                break;
            };
            out.max_length = out.max_length.max(h.length);
            out.only_application_data &= h.content_type == APPLICATION_DATA;
            let listed = out.count < MAX_RECORDS;
            at += HEADER_LEN + h.length;
            if listed {
                out.types[out.count] = h.content_type;
                out.count += 1;
                out.end = at;
            }
            if at >= seglen {
                out.complete = listed && at == seglen;
                out.read_to_end_or_snap = at == seglen;
                break;
            }
        }
        Some(out)
    }

    /// A segment whose first `body` bytes end a record of type `content_type` whose header an
    /// earlier segment showed; the records after them walked as `walk` does (their headers are
    /// read only inside `captured`).
    pub fn continuing(content_type: u8, body: usize, captured: &[u8], seglen: usize) -> SegmentRecords {
        // A continued record's length is not known here: `max_length` and the rest say nothing
        // (left at their defaults: no record read).
        let mut out = SegmentRecords { continued: true, end: body, ..SegmentRecords::default() };
        out.types[0] = content_type;
        out.count = 1;
        if body >= seglen {
            out.complete = body == seglen;
            return out;
        }
        if let Some(rest) = SegmentRecords::walk(captured.get(body..).unwrap_or_default(), seglen - body) {
            let n = rest.count.min(MAX_RECORDS - 1);
            out.types[1..=n].copy_from_slice(&rest.types[..n]);
            out.count += n;
            out.complete = rest.complete && n == rest.count;
            out.end = body + rest.end;
        }
        out
    }

    /// The type of the last record listed and where it ends (sequence-relative, from the segment's
    /// first byte), if it continues beyond the segment's `seglen` bytes.
    pub fn spill(&self, seglen: usize) -> Option<(u8, usize)> {
        (self.count > 0 && self.end > seglen).then(|| (self.types[self.count - 1], self.end))
    }

    pub fn types(&self) -> &[u8] {
        &self.types[..self.count]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(ty: u8, len: usize) -> Vec<u8> {
        let mut r = vec![ty, 3, 3, (len >> 8) as u8, len as u8];
        r.resize(HEADER_LEN + len, 0xab);
        r
    }

    /// Go's HTTP/2 client: ten WINDOW_UPDATE records in one segment, four of them kept by a
    /// 256-byte snaplen; then a request's small HEADERS record with a large DATA record behind.
    #[test]
    fn records_beyond_the_listed_are_read_as_far_as_the_capture_goes() {
        let seg: Vec<u8> = (0..10).flat_map(|_| record(APPLICATION_DATA, 38)).collect();
        let r = SegmentRecords::walk(&seg[..202], seg.len()).unwrap();
        assert_eq!(
            (r.count, r.complete, r.max_length, r.only_application_data, r.read_to_end_or_snap),
            (4, false, 38, true, true)
        );
        let whole = SegmentRecords::walk(&seg, seg.len()).unwrap();
        assert!(whole.read_to_end_or_snap && !whole.complete);
        let mut post = record(APPLICATION_DATA, 38);
        post.extend(record(APPLICATION_DATA, 1200));
        let r = SegmentRecords::walk(&post[..202], post.len()).unwrap();
        assert_eq!((r.max_length, r.read_to_end_or_snap), (1200, true));
        let mut garbage = record(APPLICATION_DATA, 38);
        garbage.extend([0u8; 60]);
        assert!(!SegmentRecords::walk(&garbage, garbage.len()).unwrap().read_to_end_or_snap);
    }

    #[test]
    fn a_tls13_finished_flight_is_walked_whole() {
        let seg = [record(CHANGE_CIPHER_SPEC, 1), record(APPLICATION_DATA, 69)].concat();
        let r = SegmentRecords::walk(&seg, seg.len()).unwrap();
        assert_eq!(r.types(), &[CHANGE_CIPHER_SPEC, APPLICATION_DATA]);
        assert!(r.complete && !r.client_hello);
    }

    #[test]
    fn headers_beyond_the_snaplen_are_not_read() {
        let seg = [record(CHANGE_CIPHER_SPEC, 1), record(APPLICATION_DATA, 69), record(APPLICATION_DATA, 300)].concat();
        let r = SegmentRecords::walk(&seg[..62], seg.len()).unwrap();
        assert_eq!(r.types(), &[CHANGE_CIPHER_SPEC, APPLICATION_DATA]);
        assert!(!r.complete);
    }

    #[test]
    fn a_client_hello_and_what_is_no_record() {
        let mut hello = record(HANDSHAKE, 512);
        hello[HEADER_LEN] = CLIENT_HELLO;
        let r = SegmentRecords::walk(&hello[..60], hello.len()).unwrap();
        assert!(r.client_hello && r.complete, "one record, as long as the segment");
        assert_eq!(SegmentRecords::walk(b"GET / HTTP/1.1\r\n", 16), None);
        assert_eq!(SegmentRecords::walk(&[APPLICATION_DATA, 3, 3], 3), None);
        assert_eq!(SegmentRecords::walk(&[APPLICATION_DATA, 3, 9, 0, 10], 15), None, "version 3.9");
    }

    #[test]
    fn a_record_over_two_segments_and_what_follows_it() {
        // A 1,523-byte ClientHello record (X25519MLKEM768 key share) in segments of 1,448 bytes.
        let hello = record(HANDSHAKE, 1518);
        let first = SegmentRecords::walk(&hello[..250], 1448).unwrap();
        assert_eq!(first.spill(1448), Some((HANDSHAKE, 1523)));
        let second = SegmentRecords::continuing(HANDSHAKE, 75, &hello[1448..], 75);
        assert_eq!((second.types(), second.complete, second.continued), (&[HANDSHAKE][..], true, true));
        assert_eq!(second.spill(75), None);
        // The rest of a record, then an application-data record running on.
        let seg = [vec![0xab; 20], record(APPLICATION_DATA, 4000)].concat();
        let r = SegmentRecords::continuing(HANDSHAKE, 20, &seg[..200], 1448);
        assert_eq!((r.types(), r.complete), (&[HANDSHAKE, APPLICATION_DATA][..], false));
        assert_eq!(r.spill(1448), Some((APPLICATION_DATA, 20 + 5 + 4000)));
        assert_eq!(r.first_length, 0, "no header of its first record was read");
    }
}
