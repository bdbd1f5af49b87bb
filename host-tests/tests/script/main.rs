//! The decision script on a real redis-server started by each test.

// A test crate: a failed step in a helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod all_or_nothing;
mod bad_arguments;
mod cases;
mod cluster;
mod concurrency;
mod fixture;
mod properties;
