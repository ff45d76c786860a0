//! Which frames the user asked for: a time window (`--since`/`--until`) and a capture filter
//! (`--filter`, tcpdump's expression language). Frames left out are counted as skipped under
//! their own reasons, so `read = decoded + skipped` still holds.

use crate::bpf::BpfFilter;
use crate::capture::Frame;
use crate::skip::SkipReason;

#[derive(Default)]
pub struct FrameSelection {
    /// Frames before this instant (ns since the epoch) are left out.
    pub since_ns: Option<i64>,
    /// Frames at or after this instant are left out.
    pub until_ns: Option<i64>,
    pub filter: Option<BpfFilter>,
}

impl FrameSelection {
    pub fn is_empty(&self) -> bool {
        self.since_ns.is_none() && self.until_ns.is_none() && self.filter.is_none()
    }

    /// None when the frame is selected, else the reason it is left out. An error when the filter
    /// cannot apply to the frame's link type.
    pub fn reject(&mut self, frame: &Frame<'_>) -> Result<Option<SkipReason>, String> {
        if self.since_ns.is_some_and(|t| frame.ts_ns < t) || self.until_ns.is_some_and(|t| frame.ts_ns >= t) {
            return Ok(Some(SkipReason::OutsideTimeWindow));
        }
        if let Some(f) = self.filter.as_mut() {
            if !f.matches(frame.linktype, frame.data, frame.wire_len)? {
                return Ok(Some(SkipReason::Filtered));
            }
        }
        Ok(None)
    }
}
