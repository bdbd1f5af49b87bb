//! Metrics the module defines. As in Envoy, one name is one stat for the
//! whole proxy: every VM (worker) that defines it adds to the same value,
//! so a test reads the proxy-wide total.

use std::collections::BTreeMap;

/// The kind of a metric (`MetricType` in the ABI).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only grows.
    Counter,
    /// Goes up and down.
    Gauge,
    /// Recorded samples.
    Histogram,
}

impl Kind {
    /// The ABI's number, if it is one.
    pub fn from_abi(n: i32) -> Option<Kind> {
        match n {
            0 => Some(Kind::Counter),
            1 => Some(Kind::Gauge),
            2 => Some(Kind::Histogram),
            _ => None,
        }
    }
}

/// One stat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Metric {
    /// Its kind.
    pub kind: Kind,
    /// Counter or gauge value.
    pub value: i64,
    /// Histogram samples, in the order recorded.
    pub samples: Vec<u64>,
}

/// Every stat by name.
#[derive(Debug, Default)]
pub struct Metrics {
    stats: BTreeMap<String, Metric>,
}

impl Metrics {
    /// Defines `name` (again: the same stat).
    pub fn define(&mut self, name: &str, kind: Kind) -> Result<(), String> {
        let m = self.stats.entry(name.to_string()).or_insert(Metric { kind, value: 0, samples: Vec::new() });
        if m.kind != kind {
            return Err(format!("metric {name} defined as {:?} and as {kind:?}", m.kind));
        }
        Ok(())
    }

    /// `proxy_increment_metric`: counters take positive offsets only,
    /// gauges any, histograms none (Envoy answers BadArgument).
    pub fn increment(&mut self, name: &str, offset: i64) -> bool {
        match self.stats.get_mut(name) {
            Some(m) if m.kind == Kind::Counter && offset > 0 => m.value += offset,
            Some(m) if m.kind == Kind::Gauge => m.value += offset,
            _ => return false,
        }
        true
    }

    /// `proxy_record_metric`: adds to a counter, sets a gauge, samples a histogram.
    pub fn record(&mut self, name: &str, value: u64) -> bool {
        let Some(m) = self.stats.get_mut(name) else { return false };
        let v = i64::try_from(value).unwrap_or(i64::MAX);
        match m.kind {
            Kind::Counter => m.value += v,
            Kind::Gauge => m.value = v,
            Kind::Histogram => m.samples.push(value),
        }
        true
    }

    /// A stat by name.
    pub fn get(&self, name: &str) -> Option<&Metric> {
        self.stats.get(name)
    }

    /// Every stat's name.
    pub fn names(&self) -> Vec<String> {
        self.stats.keys().cloned().collect()
    }
}
