//! `make bench`: what the filter costs the proxy and the store, how much the
//! deny cache spares the store under abuse, and how accurate the sliding
//! window is. Each part returns a report section; `report` assembles
//! BENCHMARKS.md and the plotting script draws the figures' data.

pub mod accuracy;
pub mod prng;
pub mod report;
pub mod stats;
