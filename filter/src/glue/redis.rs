//! The Redis-call transport: the Higress hostcalls (`proxy_redis_init`,
//! `proxy_redis_call`, the callback `proxy_on_redis_call_response` on the
//! root context, the reply in buffer type 9). Only in the `redis` build:
//! a host without these imports refuses the whole module.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ptr::null_mut;
use std::rc::{Rc, Weak};

use proxy_wasm::hostcalls;

use super::root::Plugin;
use super::stream::{self, Shared, Stream};
use crate::call::ScriptCall;
use crate::config::Store;
use crate::store::flow::Message;
use crate::store::{resp, StoreError};

/// The buffer holding a Redis reply during its callback.
const REDIS_CALL_RESPONSE: u32 = 9;

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
    // The SDK declares this import with its own BufferType, which stops at 8.
    #[allow(clashing_extern_declarations)]
    #[link_name = "proxy_get_buffer_bytes"]
    fn get_buffer_bytes(buffer: u32, start: usize, max: usize, data: *mut *mut u8, size: *mut usize) -> u32;
}

/// Where a reply goes.
enum Route {
    /// An HTTP context (its id) and its stream.
    Stream(u32, Weak<RefCell<Stream>>),
    /// The root context's INFO call.
    Info,
}

thread_local! {
    /// Token -> route.
    static CALLS: RefCell<HashMap<u32, Route>> = RefCell::new(HashMap::new());
    /// Whether `proxy_redis_init` succeeded on this VM.
    static READY: Cell<bool> = const { Cell::new(false) };
    /// The last INFO reply, for the root context's next tick; and whether
    /// one is in flight.
    static INFO: RefCell<(Option<Result<String, StoreError>>, bool)> = const { RefCell::new((None, false)) };
}

/// Initializes the cluster's connections on this VM (once; again only on
/// NOAUTH or after a failed attempt). A cluster the control plane has not
/// pushed yet (BadArgument) is retried lazily before the next call.
pub fn init(store: &Store) -> bool {
    let (c, u, p) = (store.cluster.as_bytes(), store.username.as_bytes(), store.password.as_bytes());
    let timeout = u32::try_from(store.timeout_ms).unwrap_or(u32::MAX);
    // SAFETY: pointers and lengths of live slices; the host copies them.
    let status = unsafe { proxy_redis_init(c.as_ptr(), c.len(), u.as_ptr(), u.len(), p.as_ptr(), p.len(), timeout) };
    READY.with(|r| r.set(status == 0));
    if status != 0 {
        log::warn!(
            "ratelimit: proxy_redis_init for cluster {} returned status {status}; retrying before the next call",
            store.cluster
        );
    }
    status == 0
}

/// Sends one query to the store; its token, routed to `route`.
fn call(store: &Store, query: &[u8], reinit: bool, route: Route) -> Result<u32, StoreError> {
    if (reinit || !READY.with(Cell::get)) && !init(store) {
        return Err(StoreError::Dispatch);
    }
    let cluster = store.cluster.as_bytes();
    let mut token = 0u32;
    // SAFETY: pointers and lengths of live slices; `token` is a valid out-pointer.
    let status = unsafe { proxy_redis_call(cluster.as_ptr(), cluster.len(), query.as_ptr(), query.len(), &mut token) };
    if status != 0 {
        return Err(StoreError::Dispatch);
    }
    CALLS.with(|c| c.borrow_mut().insert(token, route));
    Ok(token)
}

/// Sends one decision command for a stream; its token.
pub fn send(
    shared: &Shared,
    plugin: &Plugin,
    script: &ScriptCall,
    message: Message,
    reinit: bool,
) -> Result<u32, StoreError> {
    let query = match message {
        Message::Evalsha => resp::evalsha(script),
        Message::Eval => resp::eval(script),
        Message::LoadScript => return Err(StoreError::Dispatch),
    };
    let id = shared.borrow().id;
    call(&plugin.config.store, &query, reinit, Route::Stream(id, Rc::downgrade(shared)))
}

/// Asks the store for INFO, unless an answer is still awaited.
pub fn request_info(store: &Store) {
    if INFO.with(|i| i.borrow().1) {
        return;
    }
    let sent = call(store, &resp::command(&["INFO"]), false, Route::Info).is_ok();
    INFO.with(|i| i.borrow_mut().1 = sent);
}

/// The INFO reply that arrived since the last tick, if any.
pub fn take_info() -> Option<Result<String, StoreError>> {
    INFO.with(|i| i.borrow_mut().0.take())
}

/// Copies the reply out of buffer 9 (readable only during the callback).
fn read_reply(size: usize) -> Option<Vec<u8>> {
    let mut data: *mut u8 = null_mut();
    let mut len: usize = 0;
    // SAFETY: the host writes a pointer it allocated through
    // proxy_on_memory_allocate (a boxed slice of `len` bytes), which we own.
    unsafe {
        if get_buffer_bytes(REDIS_CALL_RESPONSE, 0, size, &mut data, &mut len) != 0 || data.is_null() {
            return None;
        }
        Some(Vec::from_raw_parts(data, len, len))
    }
}

/// The host's callback: arrives on the root context; mapped back to the
/// HTTP context that made the call. Replies for streams that are gone are
/// dropped.
#[no_mangle]
pub extern "C" fn proxy_on_redis_call_response(_root_id: u32, token: u32, status: u32, size: usize) {
    let (id, weak) = match CALLS.with(|c| c.borrow_mut().remove(&token)) {
        Some(Route::Stream(id, weak)) => (id, weak),
        Some(Route::Info) => {
            let info = match (status, read_reply(size)) {
                (0, Some(bytes)) => resp::decode_info(&bytes),
                _ => Err(StoreError::Network),
            };
            INFO.with(|i| *i.borrow_mut() = (Some(info), false));
            return;
        }
        None => return,
    };
    let Some(shared) = weak.upgrade() else { return };
    if hostcalls::set_effective_context(id).is_err() {
        return;
    }
    let reply = if status == 0 { read_reply(size) } else { None };
    stream::on_reply(&shared, token, |_, call| match (status, reply) {
        (0, Some(bytes)) => resp::decode_decision(&bytes, call),
        (0, None) => Err(StoreError::Malformed("empty reply")),
        _ => Err(StoreError::Network),
    });
}
