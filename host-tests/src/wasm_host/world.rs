//! What every VM of one host shares, like the Envoy process around its
//! worker threads: the clock, shared data, stats, clusters, the store calls
//! in flight, the faults and statuses to inject, the module's log and the
//! traps recorded.

use std::sync::{Arc, Mutex, MutexGuard};

use super::calls::Calls;
use super::clock::Clock;
use super::clusters::Clusters;
use super::faults::FaultPlan;
use super::metrics::Metrics;
use super::shared_data::SharedData;
use super::statuses::StatusPlan;

/// One line the module logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogLine {
    /// The VM (worker) that logged it.
    pub vm: usize,
    /// proxy-wasm log level: 0 trace .. 5 critical.
    pub level: u32,
    /// The text.
    pub message: String,
}

/// The shared state.
#[derive(Debug)]
pub struct World {
    /// The injected clock.
    pub clock: Clock,
    /// Shared data (one store for all VMs).
    pub shared: SharedData,
    /// Stats.
    pub metrics: Metrics,
    /// Where cluster names lead.
    pub clusters: Clusters,
    /// Faults for the next calls.
    pub faults: FaultPlan,
    /// Store calls, in flight and done.
    pub calls: Calls,
    /// Statuses to return instead of hostcalls' work.
    pub statuses: StatusPlan,
    /// Everything the module logged.
    pub logs: Vec<LogLine>,
    /// Keep a trap as a failed VM (as Envoy does) instead of failing the test.
    pub record_traps: bool,
    /// The traps recorded, each with its report.
    pub traps: Vec<String>,
}

/// A handle every VM holds.
pub type WorldRef = Arc<Mutex<World>>;

/// Locks the world; a poisoned lock means an earlier step already failed
/// the test, so its state is still worth reading.
pub fn lock(world: &WorldRef) -> MutexGuard<'_, World> {
    world.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
