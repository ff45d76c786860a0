//! Why a frame was not decoded into a TCP/UDP packet. Every frame read is either decoded or
//! counted under exactly one of these reasons, so `read = decoded + sum(skipped)` always holds.

/// One counted reason for not decoding a frame. The `name()`s are part of the output contract
/// (run manifest, CLI summary): rename only with a schema version bump.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum SkipReason {
    UnsupportedLinkType = 0,
    TruncatedLinkHeader,
    NotIp,
    TruncatedIpHeader,
    MalformedIpHeader,
    IpFragment,
    NotTcpUdp,
    TruncatedTcpHeader,
    MalformedTcpHeader,
    TruncatedUdpHeader,
    TunnelTooDeep,
    EmptyFrame,
    UndecodedGre,
    UndecodedErspan,
    UndecodedEsp,
    UndecodedL2tp,
    UndecodedEtherIp,
    UndecodedProtected80211,
    /// Left out by the user's capture filter (`--filter`, tcpdump's expression language).
    Filtered,
    /// Outside the user's `--since`/`--until` window.
    OutsideTimeWindow,
}

impl SkipReason {
    pub const ALL: [SkipReason; 20] = [
        SkipReason::UnsupportedLinkType,
        SkipReason::TruncatedLinkHeader,
        SkipReason::NotIp,
        SkipReason::TruncatedIpHeader,
        SkipReason::MalformedIpHeader,
        SkipReason::IpFragment,
        SkipReason::NotTcpUdp,
        SkipReason::TruncatedTcpHeader,
        SkipReason::MalformedTcpHeader,
        SkipReason::TruncatedUdpHeader,
        SkipReason::TunnelTooDeep,
        SkipReason::EmptyFrame,
        SkipReason::UndecodedGre,
        SkipReason::UndecodedErspan,
        SkipReason::UndecodedEsp,
        SkipReason::UndecodedL2tp,
        SkipReason::UndecodedEtherIp,
        SkipReason::UndecodedProtected80211,
        SkipReason::Filtered,
        SkipReason::OutsideTimeWindow,
    ];

    pub fn name(self) -> &'static str {
        match self {
            SkipReason::UnsupportedLinkType => "unsupported_link_type",
            SkipReason::TruncatedLinkHeader => "truncated_link_header",
            SkipReason::NotIp => "not_ip",
            SkipReason::TruncatedIpHeader => "truncated_ip_header",
            SkipReason::MalformedIpHeader => "malformed_ip_header",
            SkipReason::IpFragment => "ip_fragment",
            SkipReason::NotTcpUdp => "not_tcp_udp",
            SkipReason::TruncatedTcpHeader => "truncated_tcp_header",
            SkipReason::MalformedTcpHeader => "malformed_tcp_header",
            SkipReason::TruncatedUdpHeader => "truncated_udp_header",
            SkipReason::TunnelTooDeep => "tunnel_too_deep",
            SkipReason::EmptyFrame => "empty_frame",
            SkipReason::UndecodedGre => "undecoded_gre",
            SkipReason::UndecodedErspan => "undecoded_erspan",
            SkipReason::UndecodedEsp => "undecoded_esp",
            SkipReason::UndecodedL2tp => "undecoded_l2tpv3",
            SkipReason::UndecodedEtherIp => "undecoded_etherip",
            SkipReason::UndecodedProtected80211 => "undecoded_80211_protected",
            SkipReason::Filtered => "filtered",
            SkipReason::OutsideTimeWindow => "outside_time_window",
        }
    }
}

/// Counters per reason, cheap to update in the hot loop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SkipCounts {
    counts: [u64; SkipReason::ALL.len()],
}

impl SkipCounts {
    pub fn add(&mut self, reason: SkipReason) {
        self.counts[reason as usize] += 1;
    }
    pub fn get(&self, reason: SkipReason) -> u64 {
        self.counts[reason as usize]
    }
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }
    pub fn merge(&mut self, other: &SkipCounts) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
    }
    /// Non-zero counters, by name.
    pub fn nonzero(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        SkipReason::ALL.iter().map(|r| (r.name(), self.get(*r))).filter(|(_, n)| *n > 0)
    }
}
