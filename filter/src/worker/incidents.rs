//! What went wrong on a worker, in the log: store errors, charges that
//! could not be stored, decisions refused because too many wait. Each kind
//! gets at most one line per interval, with the count since its last line,
//! so a failing store cannot flood the log, a new outage is logged at once,
//! and the timer flushes what a burst left uncounted once it stops.

use crate::time::Instant;

/// Minimum time between two lines of one kind on one worker.
pub const LOG_INTERVAL_MS: u64 = 10_000;

/// A kind of thing that went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Incident {
    /// A store call (or one decision in it) failed.
    StoreError,
    /// A charge after a response could not be stored.
    LostCharge,
    /// A decision was refused: too many already wait on this worker.
    Overloaded,
    /// A response's usage could not be read: it was charged as unreadable.
    UnreadableUsage,
    /// A reservation's unused part could not be given back.
    LostRefund,
}

impl Incident {
    const ALL: [Incident; 5] = [
        Incident::StoreError,
        Incident::LostCharge,
        Incident::Overloaded,
        Incident::UnreadableUsage,
        Incident::LostRefund,
    ];
}

#[derive(Debug, Default)]
struct Tally {
    last_logged_ms: Option<u64>,
    since: u64,
    units: u64,
    /// The latest reason (bounded and printable: a `StoreError`'s text).
    reason: String,
}

/// The tallies of one worker.
#[derive(Debug, Default)]
pub struct Incidents {
    tallies: [Tally; 5],
}

impl Incidents {
    /// Counts `n` incidents of `kind` (`units`: charged units lost) at
    /// `now_ms` for `reason`; the line to log when one is due (the first,
    /// or the first after the interval).
    pub fn record(&mut self, kind: Incident, now: Instant, n: u64, units: u64, reason: &str) -> Option<String> {
        let now_ms = now.ms();
        let t = &mut self.tallies[kind as usize];
        t.since = t.since.saturating_add(n);
        t.units = t.units.saturating_add(units);
        if t.reason != reason {
            t.reason.clear();
            t.reason.push_str(reason);
        }
        let due = t.last_logged_ms.is_none_or(|at| now_ms.saturating_sub(at) >= LOG_INTERVAL_MS);
        due.then(|| Self::line(kind, t, now))
    }

    /// Lines for what was counted but not logged, once its interval passed.
    pub fn flush(&mut self, now: Instant) -> Vec<String> {
        let now_ms = now.ms();
        let mut lines = Vec::new();
        for kind in Incident::ALL {
            let t = &mut self.tallies[kind as usize];
            if t.since > 0 && t.last_logged_ms.is_none_or(|at| now_ms.saturating_sub(at) >= LOG_INTERVAL_MS) {
                lines.push(Self::line(kind, t, now));
            }
        }
        lines
    }

    /// Whether something counted still waits for its line.
    pub fn unlogged(&self) -> bool {
        self.tallies.iter().any(|t| t.since > 0)
    }

    fn line(kind: Incident, t: &mut Tally, now: Instant) -> String {
        let now_ms = now.ms();
        t.last_logged_ms = Some(now_ms);
        let (n, units) = (std::mem::take(&mut t.since), std::mem::take(&mut t.units));
        let reason = &t.reason;
        match kind {
            Incident::StoreError => {
                format!("ratelimit: {reason} ({n} store errors on this worker since the last such line)")
            }
            Incident::LostCharge => format!(
                "ratelimit: {n} charges ({units} units) could not be stored since the last such line ({reason}); they were counted in the local fallback bucket"
            ),
            Incident::Overloaded => format!(
                "ratelimit: {n} decisions refused since the last such line: {reason}; their rules' failure policies applied"
            ),
            Incident::UnreadableUsage => format!(
                "ratelimit: the usage of {n} responses could not be read since the last such line ({reason}); they were charged {units} units"
            ),
            Incident::LostRefund => format!(
                "ratelimit: {n} refunds ({units} units) of reservations could not be stored since the last such line ({reason}); those clients stay charged their worst case"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn one_line_per_interval_with_the_count_since_the_last() {
        let mut log = Incidents::default();
        let e = Incident::StoreError;
        assert_eq!(
            log.record(e, Instant::from_ms(0), 1, 0, "store answered HTTP 503").as_deref(),
            Some("ratelimit: store answered HTTP 503 (1 store errors on this worker since the last such line)")
        );
        for t in 1..10_000 {
            assert_eq!(log.record(e, Instant::from_ms(t), 1, 0, "store answered HTTP 503"), None);
        }
        let line = log.record(e, Instant::from_ms(10_000), 1, 0, "store answered HTTP 504").unwrap();
        assert_eq!(
            line,
            "ratelimit: store answered HTTP 504 (10000 store errors on this worker since the last such line)"
        );
        // A new outage long after thousands of errors is logged at once.
        assert!(log.record(e, Instant::from_ms(1_000_000), 1, 0, "x").unwrap().contains("(1 store errors"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_timer_flushes_what_a_burst_left_and_each_kind_keeps_its_own_interval() {
        let mut log = Incidents::default();
        assert!(log.record(Incident::LostCharge, Instant::from_ms(0), 2, 700, "store answered HTTP 503").is_some());
        assert_eq!(log.record(Incident::LostCharge, Instant::from_ms(5), 3, 30, "store answered HTTP 503"), None);
        let first = log.record(Incident::Overloaded, Instant::from_ms(5), 1, 0, "65536 decisions wait").unwrap();
        assert_eq!(
            first,
            "ratelimit: 1 decisions refused since the last such line: 65536 decisions wait; their rules' failure policies applied"
        );
        assert!(log.unlogged());
        assert!(log.flush(Instant::from_ms(9_999)).is_empty(), "not before the interval");
        assert_eq!(
            log.flush(Instant::from_ms(10_000)),
            ["ratelimit: 3 charges (30 units) could not be stored since the last such line (store answered HTTP 503); they were counted in the local fallback bucket"]
        );
        assert!(!log.unlogged());
        assert!(log.flush(Instant::from_ms(100_000)).is_empty(), "nothing new");
    }
}
