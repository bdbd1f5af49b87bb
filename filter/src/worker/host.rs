//! What a worker needs from the host (Envoy through the glue, a fake in
//! tests). Every method takes `&self`: the glue's are plain hostcalls.

use super::access_log::Field;
use crate::metrics::Metrics;
use crate::response::LocalReply;
use crate::shared::SharedData;
use crate::store::transport::Wire;
use crate::store::StoreError;
use crate::time::Instant;

/// The host's services.
pub trait Host: SharedData + Metrics {
    /// The wall clock's instant now.
    fn now(&self) -> Instant;
    /// A uniformly random number.
    fn random(&self) -> u64;
    /// Sends `wire` to the store (from the root context, so a call outlives
    /// the stream that started it), re-initializing the connection first
    /// when `reinit` (the Redis transport after NOAUTH); the token its
    /// answer will come back with.
    fn send(&self, wire: &Wire, reinit: bool) -> Result<u32, StoreError>;
    /// Sets a header of the request whose headers callback runs now,
    /// before it leaves for the upstream (a host that cannot: nothing).
    fn set_request_header(&self, name: &str, value: &str);
    /// Replaces the request body (all `len` bytes the host holds) of the
    /// stream whose body callback runs now with `body`, and its
    /// `content-length` if it has one; whether it did.
    fn replace_request_body(&self, len: u64, body: &[u8]) -> bool;
    /// Lets the paused request of stream `stream` continue, leaving `log`
    /// for its access log first (see `annotate`).
    fn resume(&self, stream: u32, log: &[Field]);
    /// Answers the request of stream `stream` with `reply`, leaving `log`
    /// for its access log first (see `annotate`).
    fn reply(&self, stream: u32, reply: &LocalReply, log: &[Field]);
    /// Logs a warning (already bounded and printable).
    fn warn(&self, message: &str);
    /// Leaves `fields` (name, text) where the host's access log reads them
    /// for stream `stream` (Envoy: filter state `wasm.<name>`); a host that
    /// cannot: nothing, and the request goes on all the same.
    fn annotate(&self, stream: u32, fields: &[Field]);
}
