//! Community ID v1 (https://github.com/corelight/community-id-spec): a direction-independent
//! flow hash shared by Zeek, Suricata and Wireshark, so our flows join with their logs.

use std::net::IpAddr;

use base64::Engine;
use sha1::{Digest, Sha1};

fn addr_bytes(a: &IpAddr) -> Vec<u8> {
    match a {
        IpAddr::V4(v4) => v4.octets().to_vec(),
        IpAddr::V6(v6) => v6.octets().to_vec(),
    }
}

/// `1:<base64(sha1(seed . saddr . daddr . proto . 0 . sport . dport))>` with the endpoints
/// ordered so that both directions of a flow hash alike.
pub fn community_id_v1(seed: u16, src: IpAddr, sport: u16, dst: IpAddr, dport: u16, proto: u8) -> String {
    let (a, b) = (addr_bytes(&src), addr_bytes(&dst));
    let swap = (a.as_slice(), sport) > (b.as_slice(), dport);
    let (a, ap, b, bp) = if swap { (b, dport, a, sport) } else { (a, sport, b, dport) };
    let mut h = Sha1::new();
    h.update(seed.to_be_bytes());
    h.update(&a);
    h.update(&b);
    h.update([proto, 0]);
    h.update(ap.to_be_bytes());
    h.update(bp.to_be_bytes());
    format!("1:{}", base64::engine::general_purpose::STANDARD.encode(h.finalize()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The published vectors of the Community ID specification (also in Zeek's test suite).
    #[test]
    fn spec_vectors() {
        let cases = [
            (0, "1.2.3.4", 1122, "5.6.7.8", 3344, 6, "1:wCb3OG7yAFWelaUydu0D+125CLM="),
            (0, "1.2.3.4", 1122, "5.6.7.8", 3344, 17, "1:0Mu9InQx6z4ZiCZM/7HXi2WMhOg="),
            (0, "1.2.3.4", 8, "5.6.7.8", 0, 1, "1:crodRHL2FEsHjbv3UkRrfbs4bZ0="),
            (1, "1.2.3.4", 1122, "5.6.7.8", 3344, 6, "1:HhA1B+6CoLbiKPEs5nhNYN4XWfk="),
            (1, "1.2.3.4", 1122, "5.6.7.8", 3344, 17, "1:OShq+iKDAMVouh/4bMxB9Sz4amw="),
            (1, "1.2.3.4", 8, "5.6.7.8", 0, 1, "1:9pr4ZGTICiuZoIh90RRYE2RyXpU="),
        ];
        for (seed, s, sp, d, dp, proto, want) in cases {
            assert_eq!(community_id_v1(seed, ip(s), sp, ip(d), dp, proto), want);
            // Direction independence: the reverse tuple hashes alike.
            assert_eq!(community_id_v1(seed, ip(d), dp, ip(s), sp, proto), want);
        }
    }
}
