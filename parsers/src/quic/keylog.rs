//! The NSS key log format (`SSLKEYLOGFILE`, as written by browsers, curl, OpenSSL, aioquic and
//! quic-go): one `LABEL <client_random hex> <secret hex>` per line, `#` comments.
//!
//! Only the TLS 1.3 traffic secrets QUIC packet protection needs are kept; other labels (TLS 1.2
//! `CLIENT_RANDOM`, exporter and early secrets) are counted and skipped. Connections are keyed by
//! the ClientHello's 32-byte random, the one value both the log and the wire carry.

use std::collections::HashMap;
use std::io::{self, BufRead};
use std::path::Path;

/// The traffic secrets of one TLS 1.3 connection (32 bytes for SHA-256 suites, 48 for SHA-384).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectionSecrets {
    pub client_handshake: Option<Vec<u8>>,
    pub server_handshake: Option<Vec<u8>>,
    pub client_application: Option<Vec<u8>>,
    pub server_application: Option<Vec<u8>>,
}

impl ConnectionSecrets {
    /// Both application (1-RTT) secrets are known.
    pub fn has_application(&self) -> bool {
        self.client_application.is_some() && self.server_application.is_some()
    }
}

/// What reading a key log met.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyLogStats {
    pub lines: u64,
    /// Secrets kept (one per line of a known label).
    pub secrets: u64,
    /// Lines of labels QUIC does not need.
    pub other_labels: u64,
    /// Lines that are not `LABEL hex hex` with a 32-byte random and a 32- or 48-byte secret.
    pub malformed: u64,
}

/// Secrets by client random.
#[derive(Debug, Clone, Default)]
pub struct KeyLog {
    conns: HashMap<[u8; 32], ConnectionSecrets>,
    pub stats: KeyLogStats,
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

impl KeyLog {
    pub fn new() -> Self {
        KeyLog::default()
    }

    /// Read a key log file and add its secrets (several files may be added; a later line for
    /// the same connection and label wins, as NSS's own readers do).
    pub fn add_file(&mut self, path: &Path) -> io::Result<()> {
        let f = std::fs::File::open(path)?;
        for line in io::BufReader::new(f).lines() {
            self.add_line(&line?);
        }
        Ok(())
    }

    /// Add every line of a key log held in memory.
    pub fn add_text(&mut self, text: &str) {
        for line in text.lines() {
            self.add_line(line);
        }
    }

    pub fn add_line(&mut self, line: &str) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return;
        }
        self.stats.lines += 1;
        let mut parts = line.split_ascii_whitespace();
        let (Some(label), Some(random), Some(secret), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            self.stats.malformed += 1;
            return;
        };
        let parsed = unhex(random).and_then(|r| <[u8; 32]>::try_from(r).ok()).zip(unhex(secret));
        let Some((random, secret)) = parsed else {
            self.stats.malformed += 1;
            return;
        };
        let which = match label {
            "CLIENT_HANDSHAKE_TRAFFIC_SECRET" => 0,
            "SERVER_HANDSHAKE_TRAFFIC_SECRET" => 1,
            "CLIENT_TRAFFIC_SECRET_0" => 2,
            "SERVER_TRAFFIC_SECRET_0" => 3,
            _ => {
                self.stats.other_labels += 1;
                return;
            }
        };
        if secret.len() != 32 && secret.len() != 48 {
            self.stats.malformed += 1;
            return;
        }
        let c = self.conns.entry(random).or_default();
        let slot = match which {
            0 => &mut c.client_handshake,
            1 => &mut c.server_handshake,
            2 => &mut c.client_application,
            _ => &mut c.server_application,
        };
        *slot = Some(secret);
        self.stats.secrets += 1;
    }

    /// The secrets of the connection whose ClientHello carried `client_random`.
    pub fn get(&self, client_random: &[u8; 32]) -> Option<&ConnectionSecrets> {
        self.conns.get(client_random)
    }

    /// Connections with at least one secret.
    pub fn len(&self) -> usize {
        self.conns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_four_secrets_and_counts_the_rest() {
        let r = "ab".repeat(32);
        let s32 = "01".repeat(32);
        let s48 = "02".repeat(48);
        let text = format!(
            "# comment\n\
             CLIENT_HANDSHAKE_TRAFFIC_SECRET {r} {s32}\n\
             SERVER_HANDSHAKE_TRAFFIC_SECRET {r} {s48}\n\
             CLIENT_TRAFFIC_SECRET_0 {r} {s32}\n\
             SERVER_TRAFFIC_SECRET_0 {R} {s32}\n\
             EXPORTER_SECRET {r} {s32}\n\
             CLIENT_RANDOM {r} {s48}\n\
             CLIENT_TRAFFIC_SECRET_0 {r}\n\
             CLIENT_TRAFFIC_SECRET_0 abcd {s32}\n\
             CLIENT_TRAFFIC_SECRET_0 {r} 0102\n\
             \n",
            R = r.to_uppercase()
        );
        let mut log = KeyLog::new();
        log.add_text(&text);
        assert_eq!(log.len(), 1);
        let c = log.get(&[0xab; 32]).unwrap();
        assert_eq!(c.client_handshake.as_deref(), Some(&[1u8; 32][..]));
        assert_eq!(c.server_handshake.as_deref(), Some(&[2u8; 48][..]));
        assert!(c.has_application());
        assert_eq!(log.stats, KeyLogStats { lines: 9, secrets: 4, other_labels: 2, malformed: 3 });
        assert!(log.get(&[0; 32]).is_none());
    }
}
