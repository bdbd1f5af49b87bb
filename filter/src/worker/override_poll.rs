//! Polling the index of overrides (`store::override_index`): with
//! `overrides` on, every half of `overrides.within` on the timer, one
//! `SMEMBERS` at a time. A decision reads its client's overrides only
//! when the index names one of its rules' override keys, or when the index
//! is unknown or older than `within`: a change is read by every store
//! decision within `within` of being indexed.

use super::{Host, Worker};
use crate::keys::{override_index_key, override_key};
use crate::spec::DecisionCall;
use crate::store::override_index::{OverrideIndex, MAX_INDEX_BYTES};
use crate::store::transport;
use crate::store::StoreError;
use crate::time::Instant;

/// The worker's poll: the index as last answered, and the poll in flight.
#[derive(Debug, Default)]
pub(super) struct OverridePoll {
    index: OverrideIndex,
    /// The poll in flight: its token, and when it was sent.
    in_flight: Option<(u32, Instant)>,
    /// When the latest poll was sent.
    last_sent: Option<Instant>,
}

impl Worker {
    /// Sends a poll when one is due (half of `within` after the last) and
    /// none is in flight; forgets one unanswered past the store's timeout.
    pub(super) fn poll_overrides<H: Host>(&mut self, host: &H, now: Instant) {
        let Some(overrides) = self.config.overrides else { return };
        let deadline = self.config.store.timeout.ms().saturating_add(super::UNANSWERED_GRACE_MS);
        let poll = &mut self.overrides;
        if poll.in_flight.is_some_and(|(_, sent)| now.since(sent) > deadline) {
            poll.in_flight = None;
            poll.index.take(Err(StoreError::Unanswered), now);
        }
        let due = poll.last_sent.is_none_or(|t| now.since(t) >= overrides.within.ms() / 2);
        if poll.in_flight.is_some() || !due {
            return;
        }
        poll.last_sent = Some(now);
        let wire = transport::members(self.config.store.transport, &override_index_key(&self.config.domain));
        match host.send(&wire, false) {
            Ok(token) => poll.in_flight = Some((token, now)),
            Err(e) => poll.index.take(Err(e), now),
        }
    }

    /// The timer period polling needs: a quarter of `within`, so a poll
    /// goes out between a half and three quarters of it after the last.
    pub(super) fn poll_tick_ms(&self) -> Option<u64> {
        self.config.overrides.map(|o| o.within.ms() / 4)
    }

    /// Takes the answer to token `token` if it is the poll's; whether it was.
    pub(super) fn on_poll_answer(&mut self, token: u32, answer: transport::Answer) -> Result<(), transport::Answer> {
        match self.overrides.in_flight {
            Some((t, sent)) if t == token => {
                self.overrides.in_flight = None;
                self.overrides.index.take(transport::decode_members(answer), sent);
                Ok(())
            }
            _ => Err(answer),
        }
    }

    /// How large the answer to `token` may be, if it is the poll's.
    pub(super) fn max_poll_answer_bytes(&self, token: u32) -> Option<usize> {
        self.overrides.in_flight.is_some_and(|(t, _)| t == token).then_some(MAX_INDEX_BYTES)
    }

    /// Whether decision `d`, in a call at `now`, reads its client's
    /// overrides: overrides are on, and the index names the override key
    /// of one of its rules (or is unknown or stale).
    pub(super) fn reads_overrides(&self, now: Instant, d: &DecisionCall<'_>) -> bool {
        let Some(overrides) = self.config.overrides else { return false };
        let index = &self.overrides.index;
        if index.none_at(now, overrides.within) {
            return false;
        }
        let domain = &self.config.domain;
        d.limits.iter().any(|l| index.must_read(now, overrides.within, &override_key(domain, d.identity, l.rule)))
    }
}
