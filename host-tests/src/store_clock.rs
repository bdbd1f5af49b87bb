//! A clock for the store that the test moves: redis-server (and webdis)
//! run unchanged under Debian's libfaketime, which reads the time from a
//! file on every clock read (`FAKETIME_NO_CACHE`). A line without `@`
//! freezes the clock at that instant, so `TIME`, `TIME` inside the script,
//! TTLs and key expiry all stand still until the test writes the next one.
//!
//! libfaketime alone crashes Debian's redis-server at start-up (its
//! jemalloc reads the clock while libfaketime is still starting);
//! preloading mimalloc first serves those allocations and it runs. Only
//! the wall clock is faked: the event loop's monotonic timers keep real
//! time, so the server goes on answering while the test holds its clock.

use crate::process::TempDir;
use std::path::{Path, PathBuf};

/// The two libraries preloaded, in order.
const PRELOAD: [&str; 2] = ["libmimalloc.so.2.0", "faketime/libfaketime.so.1"];

/// The timestamp file the servers started on it read.
pub struct StoreClock {
    dir: TempDir,
    file: PathBuf,
    ms: u64,
}

impl StoreClock {
    /// A clock standing at `ms` since the epoch.
    pub fn at(ms: u64) -> StoreClock {
        let dir = TempDir::new("store-clock");
        let file = dir.path().join("faketime");
        let mut clock = StoreClock { dir, file, ms };
        clock.write(ms);
        clock
    }

    /// The instant the servers read, ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.ms
    }

    /// Sets the servers' clock to `ms` (back too: an NTP correction of the
    /// store's machine).
    pub fn set_ms(&mut self, ms: u64) {
        if ms != self.ms {
            self.write(ms);
        }
    }

    /// Writes the file whole, then renames it into place: a server reading
    /// it meanwhile sees the old instant or the new one, never half a line.
    fn write(&mut self, ms: u64) {
        let next = self.dir.path().join("faketime.next");
        std::fs::write(&next, format!("{}\n", timestamp(ms))).unwrap();
        std::fs::rename(&next, &self.file).unwrap();
        self.ms = ms;
    }

    /// The environment that makes a program run on this clock.
    pub fn env(&self) -> Vec<(String, String)> {
        let preload: Vec<String> = PRELOAD.iter().map(|lib| library(lib).display().to_string()).collect();
        [
            ("LD_PRELOAD", preload.join(" ")),
            ("FAKETIME_TIMESTAMP_FILE", self.file.display().to_string()),
            ("FAKETIME_NO_CACHE", "1".into()),
            ("FAKETIME_DONT_FAKE_MONOTONIC", "1".into()),
            // The file's instant is read as local time.
            ("TZ", "UTC".into()),
        ]
        .map(|(k, v)| (k.to_string(), v))
        .to_vec()
    }
}

/// A library under the machine's multiarch directory (installed by
/// `make setup`: Debian's `libfaketime` and `libmimalloc2.0`).
fn library(name: &str) -> PathBuf {
    let dirs = ["/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"];
    dirs.iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} is not installed (Debian faketime, libmimalloc2.0): run `make setup` first"))
}

/// `YYYY-MM-DD hh:mm:ss.mmm500` in UTC, as libfaketime reads an absolute
/// instant: half a millisecond in, since libfaketime reads the fraction
/// through a double (`.779` at 2023-11-14 22:18:06 reads as 778999 µs,
/// a millisecond early for a script that floors `TIME` to milliseconds).
pub fn timestamp(ms: u64) -> String {
    let (days, of_day) = (ms / 86_400_000, ms % 86_400_000);
    let (y, m, d) = civil(days as i64);
    let (h, min, s, milli) = (of_day / 3_600_000, of_day / 60_000 % 60, of_day / 1000 % 60, of_day % 1000);
    format!("{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{s:02}.{milli:03}500")
}

/// The civil date of `days` since 1970-01-01 (Howard Hinnant's algorithm).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_to_the_millisecond() {
        assert_eq!(timestamp(0), "1970-01-01 00:00:00.000500");
        assert_eq!(timestamp(1_700_000_000_250), "2023-11-14 22:13:20.250500");
        assert_eq!(timestamp(951_782_400_000 + 86_399_999), "2000-02-29 23:59:59.999500");
    }
}
