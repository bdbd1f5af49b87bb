//! Leases: a hot client's allowed requests decided in the proxy, with no
//! store call and no pause, never admitting more than the limit.
//!
//! A lease is units the store has already counted as consumed for one
//! identity (every limit of its decision, all or nothing, as a decision
//! consumes them), handed to this proxy to admit the client's next
//! requests itself. Because the units are counted before they are spent,
//! no window ever admits more than its limit across the fleet; what a
//! lease leaves unspent when it ends is admitted by nobody (see
//! docs/leases.md for the bound this puts on under-admission).
//!
//! - `heat`: per worker, how many requests an identity sent in the last
//!   `max_age` (a sliding counter in a fixed table): who is hot, and how
//!   large a lease to ask for.
//! - `plan`: how large a lease to ask for, and until when one holds.
//! - `record`: a lease as shared data holds it.
//! - `table`: the proxy's leases in a fixed number of shared-data slots,
//!   drawn from one request at a time with compare-and-swap, so two
//!   workers never spend one unit twice.

mod heat;
mod plan;
mod record;
mod table;

pub use heat::{Heat, HOT_AFTER};
pub use plan::{ask, expires_at, Granted, LeaseParams, Span};
pub use record::{LeaseRecord, LeasedLimit, LeasedRequest, MAX_LEASED_LIMITS};
pub use table::{LeaseTable, Probe, Spend};
