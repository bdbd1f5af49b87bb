//! `make bench`: what the filter costs the proxy and the store, how much the
//! deny cache spares the store under abuse, and how accurate the sliding
//! window is. Each part returns a report section; `report` assembles
//! BENCHMARKS.md and the plotting script draws the figures' data.

pub mod abuse;
pub mod accuracy;
pub mod envoy_variants;
pub mod http_load;
pub mod machine;
pub mod proc_cpu;
pub mod proxy_cost;
pub mod redis_info;
pub mod report;
pub mod stats;
pub mod store_calls;
pub mod store_cost;
pub mod store_memory;
pub mod wrk;
