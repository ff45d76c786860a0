//! Open a capture file, transparently decompressing gzip and zstd (sniffed by magic bytes, not
//! by file name, because rotated files are often renamed by shippers).

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Gzip => "gzip",
            Compression::Zstd => "zstd",
        }
    }

    fn sniff(prefix: &[u8]) -> Compression {
        match prefix {
            [0x1f, 0x8b, ..] => Compression::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Compression::Zstd,
            _ => Compression::None,
        }
    }
}

/// A byte stream over the decompressed capture, plus how it was compressed.
pub struct Source {
    pub reader: Box<dyn Read + Send>,
    pub compression: Compression,
    /// Bytes taken from the file or stream as stored (compressed): progress over a compressed
    /// file follows these, not the decompressed offset.
    pub consumed: Arc<AtomicU64>,
}

/// Counts the bytes read through it.
struct Counting<R> {
    inner: R,
    n: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let k = self.inner.read(buf)?;
        self.n.fetch_add(k as u64, Ordering::Relaxed);
        Ok(k)
    }
}

pub fn open(path: &Path) -> io::Result<Source> {
    open_stream(File::open(path)?)
}

/// Any byte stream as stored (a file, standard input), decompressed when it is gzip or zstd.
pub fn open_stream(stream: impl Read + Send + 'static) -> io::Result<Source> {
    let consumed = Arc::new(AtomicU64::new(0));
    let mut file = BufReader::with_capacity(1 << 16, Counting { inner: stream, n: consumed.clone() });
    let mut magic = [0u8; 4];
    let n = read_up_to(&mut file, &mut magic)?;
    let compression = Compression::sniff(&magic[..n]);
    let raw = io::Cursor::new(magic[..n].to_vec()).chain(file);
    let reader: Box<dyn Read + Send> = match compression {
        Compression::None => Box::new(raw),
        // MultiGzDecoder: `cat a.gz b.gz` is a valid gzip stream and agents may append.
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(raw)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(raw)?),
    };
    Ok(Source { reader, compression, consumed })
}

/// Fill `buf` as far as the stream allows; short only at end of stream.
pub fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
