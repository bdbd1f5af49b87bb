//! `log` records to the host's log.

use super::abi;

struct HostLog;

static LOGGER: HostLog = HostLog;

impl log::Log for HostLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &log::Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        // proxy-wasm levels: trace 0 .. error 4.
        let level = match record.level() {
            log::Level::Trace => 0,
            log::Level::Debug => 1,
            log::Level::Info => 2,
            log::Level::Warn => 3,
            log::Level::Error => 4,
        };
        abi::log(level, &record.args().to_string());
    }

    fn flush(&self) {}
}

/// Routes `log` to the host, at info and above.
pub fn install() {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
}
