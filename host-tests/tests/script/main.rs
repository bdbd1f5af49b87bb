//! The decision script on a real redis-server started by each test.

// A test crate: a failed step in a helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod all_or_nothing;
mod alone;
mod bad_arguments;
mod batches;
mod cases;
mod cluster;
mod compat;
mod concurrency;
mod extremes;
mod fixture;
mod lines;
mod offsets;
mod ops;
mod overrides;
mod properties;
mod slots;
mod stored;
