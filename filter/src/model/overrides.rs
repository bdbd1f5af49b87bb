//! Operators' overrides as the model reads them: the same words as
//! `lua/override.lua`, kept per client and rule.

use std::collections::BTreeMap;

use crate::algorithm::Algorithm;
use crate::spec::{LimitSpec, TOP};

/// One client's override of one rule.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelOverride {
    /// Its time left (ms): a block's reset and retry.
    pub ttl_ms: u64,
    /// Every request-time decision of the rule is refused.
    pub block: bool,
    /// The rule's counts start afresh at its next request-time decision.
    pub reset: bool,
    /// Limits by the name `<code>:<window ms>` (`cc` for concurrency).
    limits: BTreeMap<String, u64>,
    /// Its words but `block` and `reset` (what a reset leaves of it).
    words: usize,
}

impl ModelOverride {
    /// `text` as the script reads it, with `ttl_ms` left.
    pub fn parse(text: &str, ttl_ms: u64) -> ModelOverride {
        let mut o = ModelOverride { ttl_ms: ttl_ms.min(TOP), ..ModelOverride::default() };
        for word in text.split_whitespace() {
            match word {
                "block" => o.block = true,
                "reset" => o.reset = true,
                _ => {
                    o.words += 1;
                    let Some((name, n)) = word.split_once('=') else { continue };
                    let named = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b':');
                    let digits = !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
                    if named && digits {
                        // As the script's posint: a later word of the same name wins, even one it ignores.
                        match n.parse::<u64>().ok().filter(|n| (1..=TOP).contains(n)) {
                            Some(n) => o.limits.insert(name.to_string(), n),
                            None => o.limits.remove(name),
                        };
                    }
                }
            }
        }
        o
    }

    /// The spec `spec` is decided with under this override, when its
    /// limit changes.
    pub fn spec_of(&self, spec: &LimitSpec) -> Option<LimitSpec> {
        let name = match spec.algorithm {
            Algorithm::Concurrency => "cc".to_string(),
            a => format!("{}:{}", a.code(), spec.window_ms),
        };
        let n = *self.limits.get(&name)?;
        (n != spec.limit).then(|| spec.overridden(n)).flatten()
    }

    /// Whether it says nothing once its reset is applied.
    pub fn is_empty(&self) -> bool {
        !self.block && !self.reset && self.words == 0
    }
}
