//! The Redis-call transport: the Higress hostcalls (`proxy_redis_init`,
//! `proxy_redis_call`; the callback `proxy_on_redis_call_response` on the
//! root context is in `exports`, the reply in buffer type 9). Only in the
//! `redis` build: a host without these imports refuses the whole module.

use std::cell::Cell;

use crate::config::StoreSettings;
use crate::secret::Secret;
use crate::store::StoreError;

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_redis_init(
        cluster: *const u8,
        cluster_len: usize,
        username: *const u8,
        username_len: usize,
        password: *const u8,
        password_len: usize,
        timeout_ms: u32,
    ) -> u32;
    fn proxy_redis_call(
        cluster: *const u8,
        cluster_len: usize,
        query: *const u8,
        query_len: usize,
        token: *mut u32,
    ) -> u32;
}

/// The cluster's connection state on this VM.
pub struct RedisLink {
    username: String,
    password: Secret,
    timeout_ms: u32,
    ready: Cell<bool>,
}

impl RedisLink {
    /// Not initialized yet.
    pub fn new(store: &StoreSettings) -> RedisLink {
        RedisLink {
            username: store.username.clone(),
            password: store.password.clone(),
            timeout_ms: u32::try_from(store.timeout.ms()).unwrap_or(u32::MAX),
            ready: Cell::new(false),
        }
    }

    /// Initializes the cluster's connections on this VM (once; again only
    /// on NOAUTH or after a failed attempt). A cluster the control plane
    /// has not pushed yet (BadArgument) is retried before the next call.
    pub fn init(&self, cluster: &str) -> bool {
        let (c, u, p) = (cluster.as_bytes(), self.username.as_bytes(), self.password.expose().as_bytes());
        // SAFETY: pointers and lengths of live slices; the host copies them.
        let status =
            unsafe { proxy_redis_init(c.as_ptr(), c.len(), u.as_ptr(), u.len(), p.as_ptr(), p.len(), self.timeout_ms) };
        self.ready.set(status == 0);
        if status != 0 {
            log::warn!(
                "ratelimit: proxy_redis_init for cluster {} returned status {status}; retrying before the next call",
                crate::json::printable(cluster)
            );
        }
        status == 0
    }

    /// Sends one RESP command; its token.
    pub fn call(&self, cluster: &str, query: &[u8], reinit: bool) -> Result<u32, StoreError> {
        if (reinit || !self.ready.get()) && !self.init(cluster) {
            return Err(StoreError::Dispatch);
        }
        let mut token = 0u32;
        // SAFETY: pointers and lengths of live slices; `token` is a valid out-pointer.
        let status =
            unsafe { proxy_redis_call(cluster.as_ptr(), cluster.len(), query.as_ptr(), query.len(), &mut token) };
        if status != 0 {
            return Err(StoreError::Dispatch);
        }
        Ok(token)
    }
}
