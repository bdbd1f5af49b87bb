//! The JSON access log the shipped Envoy configurations write on Envoy's
//! stdout (which the tests' Envoy shares with its log file): one object
//! per request, read back as it is flushed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::envoy::Envoy;

/// One request's line.
#[derive(Clone, Debug)]
pub struct Line(pub Value);

impl Line {
    /// A field's text: `None` when it is null or absent (the filter told
    /// nothing for it), a number written as text.
    pub fn get(&self, name: &str) -> Option<String> {
        match self.0.get(name)? {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            other => Some(other.to_string()),
        }
    }

    /// The response status.
    pub fn status(&self) -> u16 {
        self.0.get("status").and_then(Value::as_u64).map_or(0, |s| s as u16)
    }

    /// The rate limiter's fields, by name without the `ratelimit_` prefix
    /// (only those it told).
    pub fn ratelimit(&self) -> BTreeMap<String, String> {
        let Value::Object(members) = &self.0 else { return BTreeMap::new() };
        members.iter().filter_map(|(k, _)| Some((k.strip_prefix("ratelimit_")?.to_string(), self.get(k)?))).collect()
    }
}

/// Every access-log line `envoy` has written so far, in order.
pub fn lines(envoy: &Envoy) -> Vec<Line> {
    envoy
        .log()
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("status").is_some())
        .map(Line)
        .collect()
}

/// Waits until `envoy` has written at least `n` lines (Envoy flushes its
/// access log every 200 ms in the tests, or later on a loaded machine),
/// then returns them; fails after 20 s.
pub fn wait_for(envoy: &Envoy, n: usize) -> Vec<Line> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = lines(envoy);
        if got.len() >= n {
            return got;
        }
        assert!(Instant::now() < deadline, "{} access-log lines after 20 s, {n} expected", got.len());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `envoy` has written a line `wanted` says is there, then
/// returns every line so far; fails after 20 s.
pub fn wait_until(envoy: &Envoy, wanted: impl Fn(&Line) -> bool) -> Vec<Line> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = lines(envoy);
        if got.iter().any(&wanted) {
            return got;
        }
        assert!(Instant::now() < deadline, "the line is not logged after 20 s: {got:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Fields as `Line::ratelimit` gives them.
pub fn fields(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}
