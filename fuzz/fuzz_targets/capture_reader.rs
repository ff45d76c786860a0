//! Bytes as a capture file (pcap or pcapng, sniffed as in production) through
//! `CaptureReader::from_reader`, every frame read. Any panic, hang (libFuzzer `-timeout`) or
//! allocation past `-rss_limit_mb` is a bug; so is breaking one of the reader's promises below.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tailscope_parsers::capture::{CaptureReader, MAX_RECORD};
use tailscope_parsers::Compression;

fuzz_target!(|data: &[u8]| {
    let src = Box::new(std::io::Cursor::new(data.to_vec()));
    let mut reader = match CaptureReader::from_reader(src, Compression::None) {
        Ok(r) => r,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let mut frames = 0u64;
    let mut last_offset = None;
    loop {
        match reader.next_frame() {
            Ok(Some(f)) => {
                frames += 1;
                // Frames are numbered 1, 2, ... as Wireshark does.
                assert_eq!(f.number, frames);
                // Every record takes bytes of the file: a reader that yields frames without
                // consuming input would loop forever on a hostile file.
                assert!(frames <= data.len() as u64, "more frames than bytes");
                assert!(last_offset.is_none_or(|o| f.offset > o), "offset did not advance");
                last_offset = Some(f.offset);
                assert!(f.data.len() <= MAX_RECORD);
                assert!(f.offset as usize + f.data.len() <= data.len(), "frame past the end of the input");
                assert!(f.wire_len as usize >= f.data.len(), "wire length below captured length");
            }
            Ok(None) => break,
            Err(e) => {
                assert!(e.offset <= data.len() as u64, "error offset past the end: {e}");
                let _ = e.to_string();
                break;
            }
        }
    }
    assert_eq!(reader.frames_read(), frames);
    assert!(reader.offset() <= data.len() as u64);
});
