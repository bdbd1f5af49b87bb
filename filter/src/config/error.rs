//! A configuration error: the field path and the reason, one line.

use std::fmt;

/// Why the configuration was refused, e.g.
/// `rules[1].limits[0].limit: must be at least 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Where: `store.timeout_ms`, `rules[1].key[0]`; empty for the whole document.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

impl ConfigError {
    /// An error at `path`.
    #[cold]
    #[inline(never)]
    pub fn at(path: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError { path: path.to_string(), reason: reason.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "configuration: {}", self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}
