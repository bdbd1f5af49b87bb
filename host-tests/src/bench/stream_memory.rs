//! What an open stream costs an Envoy in memory: streams on `/v1/hold`
//! opened in steps and held, Envoy read after each step; bytes per stream
//! are the least-squares slope of each reading against the streams held.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};

use super::fit::Line;
use super::proc_memory::{heap_allocated, linear_memory_of, rss_of};
use super::sse_upstream::{HOLD_EVENTS, HOLD_PATH};
use crate::envoy::Envoy;

/// Streams opened at once: opening hundreds at once overflowed the
/// upstream's accept queue and turned streams into 503s.
pub const OPENED_AT_ONCE: usize = 16;

/// Envoy's memory with this many streams open.
#[derive(Clone, Copy, Debug, Default)]
pub struct Reading {
    /// Streams held.
    pub streams: usize,
    /// Envoy's heap in use (admin `/memory` `allocated`).
    pub heap: u64,
    /// The VMs' resident linear memory.
    pub linear: u64,
    /// Envoy's resident set.
    pub rss: u64,
}

impl Reading {
    fn take(envoy: &Envoy, streams: usize) -> Reading {
        let pid = envoy.process.pid();
        Reading {
            streams,
            heap: heap_allocated(&envoy.admin("/memory")).unwrap_or(0),
            linear: linear_memory_of(pid),
            rss: rss_of(pid),
        }
    }
}

/// One Envoy's readings and how many streams failed to open.
#[derive(Clone, Debug, Default)]
pub struct Held {
    /// A reading before the first step and after each.
    pub readings: Vec<Reading>,
    /// Streams that did not answer 200 with their first events.
    pub failed: usize,
}

/// Bytes per stream of one reading: the slope over all readings.
pub fn per_stream(readings: &[Reading], f: fn(&Reading) -> u64) -> Option<f64> {
    let points: Vec<(f64, f64)> = readings.iter().map(|r| (r.streams as f64, f(r) as f64)).collect();
    Line::fit(&points).map(|l| l.b)
}

/// Opens one stream and reads until its first events arrived; `None` if
/// it did not answer 200 with them.
fn open(port: u16) -> Option<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(format!("GET {HOLD_PATH} HTTP/1.1\r\nhost: bench\r\n\r\n").as_bytes()).ok()?;
    Some(s)
}

/// Reads from a just-opened stream until its first events came.
fn wait_events(s: &mut TcpStream) -> bool {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while count(&seen, b"data: ") < HOLD_EVENTS {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    seen.starts_with(b"HTTP/1.1 200")
}

fn count(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len()).filter(|w| *w == needle).count()
}

/// Opens `total` streams in `steps` equal steps, `OPENED_AT_ONCE` at a time,
/// reads Envoy after each step, then closes them all.
pub fn hold(envoy: &Envoy, total: usize, steps: usize) -> Held {
    let mut held = Held { readings: vec![Reading::take(envoy, 0)], failed: 0 };
    let mut open_streams: Vec<TcpStream> = Vec::with_capacity(total);
    let step = total / steps.max(1);
    for _ in 0..steps {
        let mut left = step;
        while left > 0 {
            let n = left.min(OPENED_AT_ONCE);
            let mut group: Vec<TcpStream> = (0..n).filter_map(|_| open(envoy.port)).collect();
            held.failed += n - group.len();
            group.retain_mut(|s| {
                let ok = wait_events(s);
                held.failed += usize::from(!ok);
                ok
            });
            open_streams.extend(group);
            left -= n;
        }
        // Let the counters and the allocator settle before reading.
        std::thread::sleep(Duration::from_millis(300));
        held.readings.push(Reading::take(envoy, open_streams.len()));
    }
    drop(open_streams);
    held
}

/// The readings for the figures file.
pub fn to_json(held: &Held) -> Value {
    json!(held
        .readings
        .iter()
        .map(|r| json!({"streams": r.streams, "heap": r.heap, "linear": r.linear, "rss": r.rss}))
        .collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slope_is_bytes_per_stream() {
        let r = |streams: usize, heap: u64| Reading { streams, heap, linear: 0, rss: 0 };
        let readings = [r(0, 1000), r(200, 1000 + 200 * 640), r(400, 1000 + 400 * 640)];
        assert!((per_stream(&readings, |r| r.heap).unwrap() - 640.0).abs() < 1e-9);
        assert_eq!(per_stream(&readings, |r| r.linear), Some(0.0));
        assert_eq!(per_stream(&readings[..1], |r| r.heap), None);
    }
}
