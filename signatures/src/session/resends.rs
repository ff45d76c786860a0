//! Resends held back until a D-SACK can no longer prove them spurious.
//!
//! A D-SACK (RFC 2883) reports a duplicate the receiver got: the resend it covers was spurious,
//! though its packet row was judged (RTO, fast retransmit...) when it passed. Each resend's row
//! and events wait here for [`HOLD_NS`] of capture time — about a round trip and a half on the
//! worst paths our users see (the field study's RTT p99 is 2.3 s) — so a D-SACK that arrives
//! within it relabels them; then they join the output batch like any row. The reach is defined in
//! capture time, not by where an output batch happens to end, so the rows do not depend on the
//! batch size or on how a capture's flows are spread over shards (session/shards.rs). A file's
//! end releases everything: a D-SACK in the next file relabels nothing (the local engine writes
//! a file's rows out at its end). Rows that are not resends pass straight through.

use std::collections::VecDeque;

use crate::tables::{events, EventRow, PacketRow};
use crate::tags;

/// How long (capture time) a resend's rows wait for a D-SACK.
pub const HOLD_NS: i64 = 5_000_000_000;
/// At most this many resends wait; past it the oldest goes out early (a burst of resends this
/// large within HOLD_NS is a broken capture, and memory stays bounded: ~200 bytes each).
const HOLD_MAX: usize = 262_144;

/// The tag bits of a judged resend: the rows a D-SACK can relabel.
pub const RESEND_CAUSES: u32 =
    tags::RETX_RTO | tags::RETX_FAST | tags::RETX_TLP | tags::RETX_NETWORK_DUPLICATE | tags::RETX_UNKNOWN;

#[derive(Default)]
pub struct Resends {
    rows: VecDeque<PacketRow>,
    /// The held rows' events, in the same order.
    events: VecDeque<EventRow>,
}

impl Resends {
    pub fn is_resend(row: &PacketRow) -> bool {
        row.tags & RESEND_CAUSES != 0
    }

    pub fn hold(&mut self, row: PacketRow, row_events: impl IntoIterator<Item = EventRow>) {
        self.events.extend(row_events);
        self.rows.push_back(row);
    }

    /// Hand `out_row` the rows (and `out_event` their events) held since before `now_ns -
    /// HOLD_NS`, or all of them with `now_ns` = `i64::MAX`.
    pub fn release(&mut self, now_ns: i64, mut out_row: impl FnMut(PacketRow), out_events: &mut Vec<EventRow>) {
        let cutoff = now_ns.saturating_sub(HOLD_NS);
        while let Some(front) = self.rows.front() {
            if !(front.ts_ns < cutoff || now_ns == i64::MAX || self.rows.len() > HOLD_MAX) {
                break;
            }
            let row = self.rows.pop_front().expect("front exists");
            // a row's events were held with it, right after the previous held row's
            while self.events.front().is_some_and(|e| e.flow_id == row.flow_id && e.frame == row.frame) {
                out_events.push(self.events.pop_front().expect("front exists"));
            }
            out_row(row);
        }
    }

    /// A D-SACK proved the latest held resend of `seq` on this flow direction spurious: its row
    /// and events say so, and it was no tail loss. Returns whether one was held.
    pub fn prove_spurious(&mut self, flow_id: i64, c2s: bool, seq: u32) -> bool {
        let Some(row) = self
            .rows
            .iter_mut()
            .rev()
            .find(|r| r.flow_id == flow_id && r.c2s == c2s && r.seq == Some(seq) && Self::is_resend(r))
        else {
            return false;
        };
        row.tags = (row.tags & !(RESEND_CAUSES | tags::TAIL_LOSS)) | tags::RETX_SPURIOUS;
        events::relabel_spurious(&mut self.events, flow_id, row.frame);
        true
    }
}
