//! What the store says about one limit: the values the headers are made of.

/// The outcome of one limit for one request. Nothing is computed twice to
/// make headers: these are the header values, in milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LimitOutcome {
    /// Whether this limit admits the request.
    pub allowed: bool,
    /// Requests of cost 1 still admissible now (after this one, if allowed).
    pub remaining: u64,
    /// Milliseconds until the limit is fully available again (for
    /// fixed_window: until the window ends).
    pub reset_ms: u64,
    /// Milliseconds until a request of this cost could be admitted: 0 when
    /// allowed, `None` when its cost can never fit.
    pub retry_after_ms: Option<u64>,
    /// What an operator's override of the client made of the limit, when
    /// one applied (`lua/override.lua`).
    pub overridden: Option<Overridden>,
}

/// An operator's override as the store applied it to one limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overridden {
    /// The limit it was decided with; 0 when the client is blocked.
    pub limit: u64,
    /// Whether this decision applied the override's reset.
    pub reset: bool,
}

impl Overridden {
    /// Whether the override blocks the client.
    pub fn blocked(self) -> bool {
        self.limit == 0
    }
}

impl LimitOutcome {
    /// The limit it was decided with: an override's, else `configured`.
    pub fn limit_or(&self, configured: u64) -> u64 {
        self.overridden.map(|o| o.limit).filter(|&l| l > 0).unwrap_or(configured)
    }

    /// Whether an override blocks the client.
    pub fn blocked(&self) -> bool {
        self.overridden.is_some_and(Overridden::blocked)
    }

    /// Builds an outcome from the script's four integers per limit.
    pub fn from_wire(allowed: i64, remaining: i64, reset_ms: i64, retry_after_ms: i64) -> Option<LimitOutcome> {
        let allowed = match allowed {
            1 => true,
            0 => false,
            _ => return None,
        };
        Some(LimitOutcome {
            allowed,
            remaining: u64::try_from(remaining).ok()?,
            reset_ms: u64::try_from(reset_ms).ok()?,
            retry_after_ms: match retry_after_ms {
                -1 => None,
                ms => Some(u64::try_from(ms).ok()?),
            },
            overridden: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn wire_values_map_to_a_decision() {
        assert_eq!(
            LimitOutcome::from_wire(0, 0, 1500, -1),
            Some(LimitOutcome { allowed: false, remaining: 0, reset_ms: 1500, retry_after_ms: None, overridden: None })
        );
        assert_eq!(
            LimitOutcome::from_wire(1, 4, 1000, 0),
            Some(LimitOutcome {
                allowed: true,
                remaining: 4,
                reset_ms: 1000,
                retry_after_ms: Some(0),
                overridden: None
            })
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn impossible_wire_values_are_refused() {
        assert_eq!(LimitOutcome::from_wire(2, 0, 0, 0), None);
        assert_eq!(LimitOutcome::from_wire(1, -3, 0, 0), None);
        assert_eq!(LimitOutcome::from_wire(1, 0, -1, 0), None);
        assert_eq!(LimitOutcome::from_wire(0, 0, 0, -2), None);
    }
}
