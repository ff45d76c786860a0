//! Prefix-preserving pseudonyms of client addresses: Crypto-PAn (Xu, Fan, Ammar and Moon,
//! "Prefix-Preserving IP Address Anonymization", ICNP 2002), the scheme CAIDA's tools and
//! tcpdpriv's successors use, for IPv4 and IPv6.
//!
//! Bit i of the pseudonym is bit i of the address XOR the first bit of AES_K(the address's first
//! i bits followed by the pad's remaining bits), so two addresses that share a k-bit prefix have
//! pseudonyms that share exactly a k-bit prefix: a /24 maps onto a /24, and per-prefix analysis
//! (carriers, ASNs) still works on pseudonyms. The 32-byte key is the AES-128 key (first half)
//! and the secret the pad is made from (second half), as in the reference implementation, whose
//! published sample trace the tests reproduce.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Aes128;
use arrow_array::{Array, RecordBatch, StringArray, UInt16Array, UInt8Array};

use crate::community_id::community_id_v1;

pub const KEY_LEN: usize = 32;

pub struct CryptoPan {
    cipher: Aes128,
    pad: [u8; 16],
}

impl CryptoPan {
    pub fn new(key: &[u8; KEY_LEN]) -> CryptoPan {
        let cipher = Aes128::new(key[..16].into());
        let mut pad = [0u8; 16];
        pad.copy_from_slice(&key[16..]);
        cipher.encrypt_block((&mut pad).into());
        CryptoPan { cipher, pad }
    }

    /// The first bit of AES_K(block).
    fn first_bit(&self, mut block: [u8; 16]) -> u128 {
        self.cipher.encrypt_block((&mut block).into());
        u128::from(block[0] >> 7)
    }

    /// `bits` (the address, left-aligned in a u128) of which the first `width` count.
    fn anonymize_bits(&self, addr: u128, width: u32) -> u128 {
        let pad = u128::from_be_bytes(self.pad);
        let mut flips = 0u128;
        for i in 0..width {
            // the address's first i bits, then the pad's bits from position i on
            let keep = if i == 0 { 0 } else { !0u128 << (128 - i) };
            let block = (addr & keep) | (pad & !keep);
            flips |= self.first_bit(block.to_be_bytes()) << (127 - i);
        }
        addr ^ flips
    }

    pub fn anonymize_v4(&self, addr: u32) -> u32 {
        (self.anonymize_bits(u128::from(addr) << 96, 32) >> 96) as u32
    }

    pub fn anonymize_v6(&self, addr: u128) -> u128 {
        self.anonymize_bits(addr, 128)
    }

    pub fn anonymize(&self, addr: IpAddr) -> IpAddr {
        match addr {
            IpAddr::V4(a) => IpAddr::V4(self.anonymize_v4(a.into()).into()),
            IpAddr::V6(a) => IpAddr::V6(self.anonymize_v6(a.into()).into()),
        }
    }
}

/// Replaces the client address of every row of a flows batch by its pseudonym and recomputes
/// `community_id` over the pseudonymized tuple (so the hash cannot be matched against a real
/// address either). Server addresses stay real. Pseudonyms of addresses already seen are
/// remembered: a flows batch repeats a few clients many times.
pub struct FlowPseudonymizer {
    pan: CryptoPan,
    seen: HashMap<String, String>,
}

impl FlowPseudonymizer {
    pub fn new(key: &[u8; KEY_LEN]) -> FlowPseudonymizer {
        FlowPseudonymizer { pan: CryptoPan::new(key), seen: HashMap::new() }
    }

    pub fn pan(&self) -> &CryptoPan {
        &self.pan
    }

    fn pseudonym(&mut self, text: &str) -> Result<String, String> {
        if let Some(p) = self.seen.get(text) {
            return Ok(p.clone());
        }
        let addr: IpAddr = text.parse().map_err(|_| format!("client_ip {text:?} is not an address"))?;
        let p = self.pan.anonymize(addr).to_string();
        // Bounded: a flow table's worth of clients is a few MB; past it, start again.
        if self.seen.len() >= 1 << 20 {
            self.seen.clear();
        }
        self.seen.insert(text.to_owned(), p.clone());
        Ok(p)
    }

    pub fn apply(&mut self, batch: &RecordBatch) -> Result<RecordBatch, String> {
        let schema = batch.schema();
        let col = |name: &str| schema.index_of(name).map_err(|_| format!("flows batch without {name}"));
        let (ci, cpi, si, spi, pi, cid) = (
            col("client_ip")?,
            col("client_port")?,
            col("server_ip")?,
            col("server_port")?,
            col("ip_proto")?,
            col("community_id")?,
        );
        let strings = |i: usize| {
            batch.column(i).as_any().downcast_ref::<StringArray>().ok_or("address column is not a string column")
        };
        let client = strings(ci)?;
        let server = strings(si)?;
        let client_port =
            batch.column(cpi).as_any().downcast_ref::<UInt16Array>().ok_or("client_port is not uint16")?;
        let server_port =
            batch.column(spi).as_any().downcast_ref::<UInt16Array>().ok_or("server_port is not uint16")?;
        let proto = batch.column(pi).as_any().downcast_ref::<UInt8Array>().ok_or("ip_proto is not uint8")?;
        let community = strings(cid)?;
        let mut pseudonyms = Vec::with_capacity(batch.num_rows());
        let mut ids = Vec::with_capacity(batch.num_rows());
        for row in 0..batch.num_rows() {
            if client.is_null(row) {
                pseudonyms.push(None);
                ids.push(community.is_valid(row).then(|| community.value(row).to_owned()));
                continue;
            }
            let p = self.pseudonym(client.value(row))?;
            let id = if community.is_null(row) || server.is_null(row) {
                None
            } else {
                let (c, s) = (p.parse().expect("a pseudonym is an address"), server.value(row).parse());
                s.ok()
                    .map(|s| community_id_v1(0, c, client_port.value(row), s, server_port.value(row), proto.value(row)))
            };
            pseudonyms.push(Some(p));
            ids.push(id);
        }
        let mut columns = batch.columns().to_vec();
        columns[ci] = Arc::new(StringArray::from(pseudonyms));
        columns[cid] = Arc::new(StringArray::from(ids));
        RecordBatch::try_new(schema, columns).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sample key of the Crypto-PAn reference distribution.
    const KEY: [u8; 32] = [
        21, 34, 23, 141, 51, 164, 207, 128, 19, 10, 91, 22, 73, 144, 125, 16, 216, 152, 143, 131, 121, 121, 101, 39,
        98, 87, 76, 45, 42, 132, 34, 2,
    ];

    /// Address pairs of the reference distribution's sample_trace_raw.dat and
    /// sample_trace_sanitized.dat (IPv4), and IPv6 vectors published with the Go implementation
    /// of the same construction.
    const VECTORS: &str = include_str!("../testdata/cryptopan_vectors.tsv");

    #[test]
    fn reference_vectors() {
        let pan = CryptoPan::new(&KEY);
        let mut n = 0;
        for line in VECTORS.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let (raw, want) = line.split_once('\t').unwrap();
            let got = pan.anonymize(raw.parse().unwrap());
            assert_eq!(got, want.parse::<IpAddr>().unwrap(), "{raw}");
            n += 1;
        }
        assert!(n >= 70, "{n} vectors");
    }

    fn common_prefix(a: u128, b: u128) -> u32 {
        (a ^ b).leading_zeros()
    }

    /// Prefix preservation, on pseudo-random pairs that share prefixes of every length.
    #[test]
    fn prefixes_are_preserved() {
        let pan = CryptoPan::new(&KEY);
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..300 {
            let a = u128::from(next()) << 64 | u128::from(next());
            let keep = (next() % 129) as u32;
            let mask = if keep == 0 { 0 } else { !0u128 << (128 - keep) };
            let b = (a & mask) | (u128::from(next()) << 64 | u128::from(next())) & !mask;
            assert_eq!(common_prefix(pan.anonymize_v6(a), pan.anonymize_v6(b)), common_prefix(a, b));
            let (a4, b4) = ((a >> 96) as u32, (b >> 96) as u32);
            let (pa, pb) = (pan.anonymize_v4(a4), pan.anonymize_v4(b4));
            assert_eq!((pa ^ pb).leading_zeros(), (a4 ^ b4).leading_zeros());
        }
    }

    #[test]
    fn flows_batch_gets_pseudonyms_and_matching_community_ids() {
        use arrow_schema::{DataType, Field, Schema};
        let schema = Arc::new(Schema::new(vec![
            Field::new("client_ip", DataType::Utf8, true),
            Field::new("client_port", DataType::UInt16, false),
            Field::new("server_ip", DataType::Utf8, true),
            Field::new("server_port", DataType::UInt16, false),
            Field::new("ip_proto", DataType::UInt8, false),
            Field::new("community_id", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec![Some("128.11.68.132"), None])),
                Arc::new(UInt16Array::from(vec![40000, 1])),
                Arc::new(StringArray::from(vec![Some("5.6.7.8"), Some("5.6.7.8")])),
                Arc::new(UInt16Array::from(vec![443, 443])),
                Arc::new(UInt8Array::from(vec![6, 6])),
                Arc::new(StringArray::from(vec![Some("1:real"), None])),
            ],
        )
        .unwrap();
        let out = FlowPseudonymizer::new(&KEY).apply(&batch).unwrap();
        let ips = out.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(ips.value(0), "135.242.180.132");
        assert!(ips.is_null(1));
        let ids = out.column(5).as_any().downcast_ref::<StringArray>().unwrap();
        let want = community_id_v1(0, "135.242.180.132".parse().unwrap(), 40000, "5.6.7.8".parse().unwrap(), 443, 6);
        assert_eq!(ids.value(0), want);
        assert_eq!(out.column(2).as_any().downcast_ref::<StringArray>().unwrap().value(0), "5.6.7.8");
    }
}
