//! `overrides`: `{"enabled": true, "within": "1s"}`. Each worker then
//! polls the index of overrides every half of `within`, and a decision of
//! a client it names reads its client's overrides, which an operator
//! writes in Redis (a limit, a block, a reset: `lua/override.lua`). Every
//! proxy applies a change within twice `within`: an answer of the index
//! is trusted `within` after its poll (`store::override_index`), and no
//! cached denial nor lease of this proxy longer than that after the store
//! decided it.

use super::duration::{parse_ms, DURATION_HELP};
use super::error::ConfigError;
use super::json::{Obj, Result};
use crate::json::Value;
use crate::time::Millis;

/// The bound when the configuration gives none.
pub const DEFAULT_WITHIN: Millis = Millis::of(1_000);

/// Overrides read by the decisions of the clients the index names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overrides {
    /// How long after an override is written every proxy applies it: what
    /// a cached denial or a lease is trusted for at most.
    pub within: Millis,
}

/// Parses `overrides`; `None` when they are off.
pub fn parse_overrides(v: &Value) -> Result<Option<Overrides>> {
    let o = Obj::new(v, "overrides", &["enabled", "within"])?;
    let within = match o.str("within")? {
        None => DEFAULT_WITHIN,
        Some(text) => {
            let ms = parse_ms(text).ok_or_else(|| ConfigError::at(&o.path_of("within"), DURATION_HELP))?;
            if !(100..=3_600_000).contains(&ms) {
                return Err(ConfigError::at(&o.path_of("within"), "must be from 100ms to 1h"));
            }
            Millis::of(ms)
        }
    };
    Ok(o.bool("enabled")?.unwrap_or(true).then_some(Overrides { within }))
}
