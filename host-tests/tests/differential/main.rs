//! The parts of the filter written here although a well-kept crate does
//! the same job, each checked against that crate on generated inputs (see
//! docs/contributing.md, "Dependencies", for why each stays): the strict JSON parser
//! against `serde_json`, the structured-field serializer against `sfv`, the
//! gzip frame (and the inflating around it) against `flate2`.

// A test crate: a failed step in a helper is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod inflate;
mod json;
mod structured_fields;
