//! `make bench`: what the filter costs the proxy and the store, how much
//! batching and the deny cache spare them, what token streams cost, and how
//! accurate the sliding window is. Each part returns a report section;
//! `report` assembles BENCHMARKS.md and the plotting script draws the
//! figures' data.

pub mod abuse;
pub mod accuracy;
pub mod batching;
pub mod envoy_variants;
pub mod fit;
pub mod http_load;
pub mod machine;
pub mod module_work;
pub mod nginx_cost;
pub mod proc_cpu;
pub mod proc_memory;
pub mod proxy_cost;
pub mod proxy_sitting;
pub mod redis_info;
pub mod report;
pub mod reservation_cost;
pub mod script_instructions;
pub mod sse_upstream;
pub mod stats;
pub mod store_batches;
pub mod store_calls;
pub mod store_cost;
pub mod store_memory;
pub mod stream_memory;
pub mod token_streams;
pub mod wrk;
