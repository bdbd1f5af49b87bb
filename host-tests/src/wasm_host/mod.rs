//! A proxy-wasm host on wasmtime that plays Envoy for the compiled filter,
//! deterministically: an injected clock, store calls delivered only when
//! the test runs the host, and faults injected per call.
//!
//! - `Host` (in `host`) drives it: requests, delivery, the clock, faults,
//!   and what the test reads back (calls, stats, logs, shared data).
//! - The module runs in one or more VMs (`vm`), Envoy's worker threads,
//!   over one shared-data store (`shared_data`) and one set of stats
//!   (`metrics`) (`world` is what they share).
//! - `hostcalls/` implements the ABI, each `env.proxy_*` import behind a
//!   wrapper that can return an injected status instead (`statuses`);
//!   header maps hold bytes (`header_map`, `codec`); `proxy_http_call` goes to a real
//!   webdis (`http_client`), Higress's Redis calls to a real redis-server
//!   over one pipelined connection per VM (`redis_link`, `resp`).
//! - A trap fails the test with its message, the module's stderr (where a
//!   Rust panic's message lands) and its last log lines.

pub mod artifact;
pub mod calls;
pub mod clock;
pub mod clusters;
pub mod codec;
mod delivery;
pub mod faults;
pub mod header_map;
pub mod host;
mod hostcalls;
pub mod http_client;
mod memory;
pub mod metrics;
pub mod redis_link;
pub mod resp;
pub mod shared_data;
pub mod status;
pub mod statuses;
pub mod stream;
pub mod vm;
pub mod world;

pub use artifact::Artifact;
pub use calls::{Call, Outcome, Reply};
pub use faults::Fault;
pub use header_map::HeaderMap;
pub use host::{Host, HostBuilder, StreamId, EPOCH_MS};
pub use statuses::{HostcallCount, Times};
pub use stream::{Request, Response, State};
