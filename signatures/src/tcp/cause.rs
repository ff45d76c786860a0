//! Why a segment was retransmitted: the cause classes of Tstat (Mellia et al., Computer Networks
//! 2008) as the Linux sender decides them — its retransmission timer (RTO), a loss probe (TLP,
//! RFC 8985), ACK-driven recovery (dupACKs, SACK, RACK), a spurious resend (DSACK or an already
//! acknowledged range) or a copy made by the network.

use tailscope_parsers::decode::TCP_SYN;

use super::direction::{DirSeq, RecoveryKind, Unacked};
use super::wireshark::FAST_RETX_WINDOW_NS;
use crate::seq_number::SeqNumber;
use crate::tags::*;

/// A retransmission after at least this share of the RTO estimate is timer-driven.
const RTO_SHARE: f64 = 0.75;
/// A tail loss probe fires no earlier than about this many smoothed RTTs after the last send.
const TLP_MIN_SRTTS: f64 = 1.0;
/// ... and no later than about this many (Linux: two, and jiffies; our estimate may lag the
/// kernel's behind a growing queue).
const TLP_MAX_SRTTS: f64 = 3.0;

/// Whether the sender's retransmission timer has run out by `now`, and how long the sender has
/// been silent: the timer restarts at every ACK that advances and at a send that re-arms it
/// (`DirSeq::rto_armed_ts`: not new data sent while older data is outstanding, as Linux); the
/// silence at every send.
pub(super) fn timer_fired(fwd: &DirSeq, rev: &DirSeq, now: i64) -> (bool, i64) {
    let since = |sent: Option<i64>| {
        let start = match (sent, rev.last_advance_ts) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        };
        start.map_or(i64::MAX, |t| now - t)
    };
    // The retransmission timer runs from its last arming; the silence a loss probe waits for,
    // from the last send of any kind.
    (since(fwd.rto_armed_ts) as f64 >= RTO_SHARE * fwd.est.rto() as f64, since(fwd.last_send_ts))
}

/// Did the network (or the capture), not the sender, repeat the packet `original` (the latest
/// segment sent with this `seq` and length)? The same IP ID as the original, or an exact copy —
/// a sender's own resend changes the ACK, window or timestamp value, or at least comes later
/// than a millisecond. The one definition of a network duplicate: `judge` asks it before any
/// reordering test, since a copy's ID and TSval are the original's, behind what the sender
/// sent since (issue 29 item 7).
pub(super) fn network_copy(
    original: Option<Unacked>,
    seq: u32,
    seglen: u32,
    now: i64,
    ip_id: Option<u32>,
    (ack, win, tsval): (u32, u32, Option<u32>),
) -> bool {
    original.filter(|o| o.seq == seq && o.len == seglen).is_some_and(|o| {
        let same_id = ip_id.is_some_and(|id| id != 0 && o.ip_id == Some(id));
        let same_fields = o.ack == ack && o.win == win && o.tsval == tsval;
        same_id || (same_fields && (tsval.is_some() || now - o.ts_ns < 1_000_000))
    })
}

/// The cause of one retransmission (exactly one RETX_* bit).
#[allow(clippy::too_many_arguments)]
pub(super) fn classify(
    fwd: &DirSeq,
    rev: &DirSeq,
    ta: u32,
    seq: u32,
    seglen: u32,
    flags: u16,
    now: i64,
    ip_id: Option<u32>,
    original: Option<Unacked>,
    (ack, win, tsval): (u32, u32, Option<u32>),
    no_sack: bool,
) -> u32 {
    if ta & SPURIOUS_RETRANSMISSION != 0 {
        return RETX_SPURIOUS;
    }
    if network_copy(original, seq, seglen, now, ip_id, (ack, win, tsval)) {
        return RETX_NETWORK_DUPLICATE;
    }
    if flags & TCP_SYN != 0 {
        return RETX_RTO; // handshake segments are only ever resent by their timer
    }
    let (timer_fired, gap) = timer_fired(fwd, rev, now);
    let probed = matches!(fwd.recovery, Some((RecoveryKind::Tlp, _)));
    // Duplicate ACKs mark a hole lost once (NewReno, RFC 6582; Linux keeps a resend's mark until
    // a timeout): a hole already resent since the ACK reached it, and not shown lost again since
    // (RACK: nothing sent after that resend delivered), is resent again by its timer alone, however
    // many duplicate ACKs came meanwhile (pool seed 213, SACK off: a partial ACK's resend lost to
    // the policer, new data out on every duplicate ACK, the hole again 237 ms later).
    // Its timer runs from that resend at the latest: Linux re-arms the RTO when it resends the
    // head (`tcp_xmit_retransmit_queue`) and not for SACKs or later sends (CI pool draw0014,
    // SACK, a 3 Mbit/s link with a 7-packet queue: the head's resend lost, one resend per
    // SACK every 50 ms, the head again 328 ms after its resend; each send had restarted our
    // clock, and the timeout and its three loss-state resends were called fast retransmits).
    let resent_since_ack = original.is_some_and(|o| {
        o.retransmitted
            && rev.last_advance_ts.is_some_and(|t| o.ts_ns >= t)
            && fwd.delivered_sent_ts <= o.ts_ns
            && (timer_fired || (now - o.ts_ns) as f64 >= RTO_SHARE * fwd.est.rto() as f64)
    });
    match fwd.recovery {
        // A recovery that stalled until the timer fired is an RTO from here on.
        Some((RecoveryKind::Fast, _)) if timer_fired || resent_since_ack => return RETX_RTO,
        // Later retransmissions of an RTO or fast-recovery episode belong to what started it, up
        // to its recovery point; data first sent after that point was set is judged on its own.
        Some((RecoveryKind::Rto, point)) if SeqNumber(seq).before(point) => return RETX_RTO,
        Some((RecoveryKind::Fast, point)) if SeqNumber(seq).before(point) => return RETX_FAST,
        // A loss probe is one packet: what follows it is judged on its own.
        _ => {}
    }
    if resent_since_ack {
        return RETX_RTO;
    }
    if ta & FAST_RETRANSMISSION != 0 {
        return RETX_FAST;
    }
    let dupacks = rev.dupacknum.max(0);
    let sacked_above = rev.sack_high.is_some_and(|h| SeqNumber(h).after(seq));
    let at_hole = rev.lastack == seq;
    let srtt = fwd.est.srtt().unwrap_or(0);
    // An ACK-driven resend follows the ACK that revealed the loss promptly (RACK waits at most
    // a fraction of an RTT); one long after it was the timer, whatever the ACK had shown. From
    // the capture, the ACK must first reach the sender and the resend come back: the half of the
    // round trip on the sender's side, which the peer's samples measure (the peer's data passes
    // the capture, the sender's ACK of it comes back). For a sender next to the capture that is
    // nothing; for one on the far side it is most of the RTT.
    let sender_side = rev.est.srtt().unwrap_or(0);
    // Without SACK there is no RACK to wait out (Linux marks a Reno connection's losses by
    // NewReno's rules, tcp_newreno_mark_lost, and arms no reordering timer): the resend leaves
    // on the ACK itself, or on a paced sender's next slot. One later than that, once the timer
    // could have fired, was the timer's, however many duplicate ACKs came before it (CI seed
    // 37, Reno behind a policer: the hole resent 52 ms after the last of 70 duplicate ACKs, 822
    // ms after the last advance; Reno's reordering threshold, raised by the duplicate ACKs of
    // the loss state before, had let them pass; the kernel counted the timeout).
    let reaction = |slack: i64| {
        if no_sack && timer_fired {
            sender_side + FAST_RETX_WINDOW_NS
        } else {
            sender_side + slack
        }
    };
    let prompt = rev.lastack_ts > 0 && now - rev.lastack_ts <= reaction(srtt).max(FAST_RETX_WINDOW_NS);
    // RACK: a segment sent after this one's latest transmission reached the receiver, so this
    // one is lost (RFC 8985 §6.2), although no SACK above it is in the latest ACK and it is not
    // at the hole (losses found this way once the ACKs that showed them have passed).
    // RACK retransmits on the ACK that delivered the later segment, or when its reordering
    // window (a quarter of the RTT) runs out: a resend later than that was its timer's.
    let rack_prompt = rev.lastack_ts > 0 && now - rev.lastack_ts <= reaction((srtt / 4).max(FAST_RETX_WINDOW_NS));
    let rack_lost = rack_prompt && original.is_some_and(|o| fwd.delivered_sent_ts > o.ts_ns);
    if prompt && (sacked_above || (at_hole && dupacks >= 2) || rack_lost) {
        return RETX_FAST; // dupACK or SACK driven (RFC 5681, RFC 6675, RFC 8985 RACK)
    }
    let highest = seq.wrapping_add(seglen) == fwd.high;
    let probe_shaped = highest && dupacks == 0 && !sacked_above && gap as f64 >= TLP_MIN_SRTTS * srtt as f64;
    // A timer that resends the highest segment while older data is outstanding is the loss
    // probe's, however near the RTO estimate: Linux arms the probe no later than the RTO while
    // no recovery is open (tcp_schedule_loss_probe), and its RTO resends the first unacknowledged
    // segment. The probe waits two smoothed RTTs: one much later than that, or with no RTT
    // measured, is left to the timer (another stack's). (Unseen pool seeds 201-296: four probes
    // 1.8-2.1 smoothed RTTs after the last send, past three quarters of our RTO estimate, were
    // called RTOs; in seed 254, Reno behind a 200 ms queue, so were the SACK-driven resends
    // after two of them, as the RTO's loss-state resends.)
    let probe_not_head = probe_shaped
        && !probed
        && SeqNumber(rev.lastack).before(seq)
        && srtt > 0
        && gap as f64 <= TLP_MAX_SRTTS * srtt as f64;
    if timer_fired && !probe_not_head {
        return RETX_RTO;
    }
    if probed {
        return RETX_RTO; // a probe fires once per episode; the next timer is the RTO
    }
    if probe_shaped {
        return RETX_TLP;
    }
    if prompt && (sacked_above || (at_hole && dupacks >= 1)) {
        return RETX_FAST;
    }
    RETX_UNKNOWN
}
