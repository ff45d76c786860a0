//! Open a capture file, transparently decompressing gzip and zstd (sniffed by magic bytes, not
//! by file name, because rotated files are often renamed by shippers).

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

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
}

pub fn open(path: &Path) -> io::Result<Source> {
    let mut file = BufReader::with_capacity(1 << 16, File::open(path)?);
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
    Ok(Source { reader, compression })
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
