//! The proxy-wasm ABI 0.2.1 hostcalls the module imports, declared here
//! rather than through the Rust SDK: the SDK's wrappers panic on statuses
//! they do not expect (`get_buffer` on a body Envoy could not deliver,
//! `get_map_value` on a non-UTF-8 value), and a panic takes the worker's
//! VM down. Every wrapper returns the host's status as an error, every
//! buffer the host hands back is taken as bytes, and every pointer the
//! host writes is checked before use.

use std::ptr::null_mut;

/// A status the host returned (anything but 0, Ok).
pub type Status = u32;

/// The request's headers.
pub const REQUEST_HEADERS: u32 = 0;
/// The response's headers.
pub const RESPONSE_HEADERS: u32 = 2;
/// An HTTP call's response headers, during its callback.
pub const HTTP_CALL_RESPONSE_HEADERS: u32 = 6;
/// An HTTP call's response body, during its callback.
pub const HTTP_CALL_RESPONSE_BODY: u32 = 4;
/// The request body, during `on_request_body` (all of it the host buffered).
pub const REQUEST_BODY: u32 = 0;
/// The response body, during `on_response_body`.
pub const RESPONSE_BODY: u32 = 1;
/// The plugin's configuration, during `on_configure`.
pub const PLUGIN_CONFIGURATION: u32 = 7;
/// A Redis call's reply, during its callback (Higress's buffer type 9).
#[cfg(feature = "redis")]
pub const REDIS_CALL_RESPONSE: u32 = 9;

#[link(wasm_import_module = "env")]
extern "C" {
    fn proxy_log(level: u32, message: *const u8, size: usize) -> u32;
    fn proxy_get_current_time_nanoseconds(time: *mut u64) -> u32;
    fn proxy_set_tick_period_milliseconds(period: u32) -> u32;
    fn proxy_get_buffer_bytes(kind: u32, start: usize, max: usize, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_set_buffer_bytes(kind: u32, start: usize, length: usize, data: *const u8, size: usize) -> u32;
    fn proxy_get_header_map_pairs(kind: u32, data: *mut *mut u8, size: *mut usize) -> u32;
    fn proxy_get_header_map_value(
        kind: u32,
        key: *const u8,
        key_size: usize,
        value: *mut *mut u8,
        value_size: *mut usize,
    ) -> u32;
    fn proxy_add_header_map_value(
        kind: u32,
        key: *const u8,
        key_size: usize,
        value: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_replace_header_map_value(
        kind: u32,
        key: *const u8,
        key_size: usize,
        value: *const u8,
        value_size: usize,
    ) -> u32;
    fn proxy_remove_header_map_value(kind: u32, key: *const u8, key_size: usize) -> u32;
    fn proxy_get_property(path: *const u8, path_size: usize, value: *mut *mut u8, value_size: *mut usize) -> u32;
    fn proxy_set_property(path: *const u8, path_size: usize, value: *const u8, value_size: usize) -> u32;
    fn proxy_get_shared_data(
        key: *const u8,
        key_size: usize,
        value: *mut *mut u8,
        value_size: *mut usize,
        cas: *mut u32,
    ) -> u32;
    fn proxy_set_shared_data(key: *const u8, key_size: usize, value: *const u8, value_size: usize, cas: u32) -> u32;
    fn proxy_continue_stream(stream: u32) -> u32;
    fn proxy_send_local_response(
        status: u32,
        details: *const u8,
        details_size: usize,
        body: *const u8,
        body_size: usize,
        headers: *const u8,
        headers_size: usize,
        grpc_status: i32,
    ) -> u32;
    fn proxy_http_call(
        upstream: *const u8,
        upstream_size: usize,
        headers: *const u8,
        headers_size: usize,
        body: *const u8,
        body_size: usize,
        trailers: *const u8,
        trailers_size: usize,
        timeout_ms: u32,
        token: *mut u32,
    ) -> u32;
    fn proxy_set_effective_context(context: u32) -> u32;
    fn proxy_define_metric(kind: u32, name: *const u8, name_size: usize, id: *mut u32) -> u32;
    fn proxy_increment_metric(id: u32, offset: i64) -> u32;
    fn proxy_record_metric(id: u32, value: u64) -> u32;
}

fn status(s: u32) -> Result<(), Status> {
    if s == 0 {
        Ok(())
    } else {
        Err(s)
    }
}

/// Takes ownership of a buffer the host allocated through
/// `proxy_on_memory_allocate` and wrote back as (pointer, size).
fn take(data: *mut u8, size: usize) -> Option<Vec<u8>> {
    if data.is_null() {
        return (size == 0).then(Vec::new);
    }
    // SAFETY: the host got `data` from proxy_on_memory_allocate(size)
    // (memory.rs: a boxed slice of exactly `size` bytes) and hands it over.
    Some(unsafe { Vec::from_raw_parts(data, size, size) })
}

/// Calls a hostcall that returns a buffer; `None` for "not found" and
/// other failures alike (the caller treats both as absent).
fn with_buffer(call: impl FnOnce(*mut *mut u8, *mut usize) -> u32) -> Result<Option<Vec<u8>>, Status> {
    let mut data: *mut u8 = null_mut();
    let mut size: usize = 0;
    match call(&mut data, &mut size) {
        0 => Ok(take(data, size)),
        // NotFound (1) and Empty (7): nothing there.
        1 | 7 => Ok(None),
        s => Err(s),
    }
}

/// proxy-wasm's log levels (trace 0 .. error 4) the glue writes at.
pub const LOG_WARN: u32 = 3;
pub const LOG_ERROR: u32 = 4;

/// Writes one log line.
pub fn log(level: u32, message: &str) {
    // SAFETY: a live slice.
    unsafe { proxy_log(level, message.as_ptr(), message.len()) };
}

/// Nanoseconds since the epoch by the host's clock.
pub fn now_ns() -> Option<u64> {
    let mut t = 0u64;
    // SAFETY: a valid out-pointer.
    status(unsafe { proxy_get_current_time_nanoseconds(&mut t) }).ok().map(|()| t)
}

#[link(wasm_import_module = "wasi_snapshot_preview1")]
extern "C" {
    fn random_get(buf: *mut u8, len: usize) -> u32;
}

/// Eight bytes of the host's entropy (WASI `random_get`: Envoy, NGINX-wasm
/// and wasmtime provide it), or `None` if the host refuses.
pub fn entropy() -> Option<u64> {
    let mut b = [0u8; 8];
    // SAFETY: a live buffer of the length given.
    (unsafe { random_get(b.as_mut_ptr(), b.len()) } == 0).then(|| u64::from_le_bytes(b))
}

/// Sets the root context's timer.
pub fn set_tick_period(ms: u32) -> Result<(), Status> {
    // SAFETY: no pointers.
    status(unsafe { proxy_set_tick_period_milliseconds(ms) })
}

/// Bytes `start..start+max` of buffer `kind`.
pub fn buffer(kind: u32, start: usize, max: usize) -> Result<Option<Vec<u8>>, Status> {
    // SAFETY: valid out-pointers.
    with_buffer(|d, s| unsafe { proxy_get_buffer_bytes(kind, start, max, d, s) })
}

/// Replaces bytes `start..start+length` of buffer `kind` with `data`
/// (Envoy: only from the start, or past the end).
pub fn set_buffer(kind: u32, start: usize, length: usize, data: &[u8]) -> Result<(), Status> {
    // SAFETY: a live slice.
    status(unsafe { proxy_set_buffer_bytes(kind, start, length, data.as_ptr(), data.len()) })
}

/// Every pair of header map `kind`, serialized.
pub fn header_pairs(kind: u32) -> Result<Option<Vec<u8>>, Status> {
    // SAFETY: valid out-pointers.
    with_buffer(|d, s| unsafe { proxy_get_header_map_pairs(kind, d, s) })
}

/// The first value of header `name` in map `kind`, as bytes.
pub fn header_value(kind: u32, name: &str) -> Result<Option<Vec<u8>>, Status> {
    // SAFETY: a live slice and valid out-pointers.
    with_buffer(|d, s| unsafe { proxy_get_header_map_value(kind, name.as_ptr(), name.len(), d, s) })
}

/// Adds a header to map `kind`.
pub fn add_header(kind: u32, name: &str, value: &str) -> Result<(), Status> {
    // SAFETY: live slices.
    status(unsafe { proxy_add_header_map_value(kind, name.as_ptr(), name.len(), value.as_ptr(), value.len()) })
}

/// Sets header `name` of map `kind` to `value` (replacing every line of it).
pub fn replace_header(kind: u32, name: &str, value: &str) -> Result<(), Status> {
    // SAFETY: live slices.
    status(unsafe { proxy_replace_header_map_value(kind, name.as_ptr(), name.len(), value.as_ptr(), value.len()) })
}

/// Removes every line of header `name` from map `kind`.
pub fn remove_header(kind: u32, name: &str) -> Result<(), Status> {
    // SAFETY: a live slice.
    status(unsafe { proxy_remove_header_map_value(kind, name.as_ptr(), name.len()) })
}

/// A property by its path segments.
pub fn property(path: &[&str]) -> Result<Option<Vec<u8>>, Status> {
    // Segments separated by NUL (none after the last).
    let mut joined = Vec::new();
    for (i, p) in path.iter().enumerate() {
        if i > 0 {
            joined.push(0);
        }
        joined.extend_from_slice(p.as_bytes());
    }
    // SAFETY: a live slice and valid out-pointers.
    with_buffer(|d, s| unsafe { proxy_get_property(joined.as_ptr(), joined.len(), d, s) })
}

/// Sets the property of one path segment `name` of the effective
/// context (Envoy: the stream's filter state `wasm.<name>`, which the
/// access log prints with `%FILTER_STATE(wasm.<name>:PLAIN)%`).
pub fn set_property(name: &str, value: &[u8]) -> Result<(), Status> {
    // SAFETY: live slices.
    status(unsafe { proxy_set_property(name.as_ptr(), name.len(), value.as_ptr(), value.len()) })
}

/// A shared-data value and its CAS token.
pub fn shared_get(key: &str) -> Result<Option<(Vec<u8>, u32)>, Status> {
    let mut cas = 0u32;
    // SAFETY: a live slice and valid out-pointers.
    let value = with_buffer(|d, s| unsafe { proxy_get_shared_data(key.as_ptr(), key.len(), d, s, &mut cas) })?;
    Ok(value.map(|v| (v, cas)))
}

/// Writes a shared-data value if its CAS token still is `cas` (0: always).
pub fn shared_set(key: &str, value: &[u8], cas: u32) -> Result<(), Status> {
    // SAFETY: live slices.
    status(unsafe { proxy_set_shared_data(key.as_ptr(), key.len(), value.as_ptr(), value.len(), cas) })
}

/// Lets the request of the effective context continue.
pub fn continue_request() -> Result<(), Status> {
    // SAFETY: no pointers.
    status(unsafe { proxy_continue_stream(0) })
}

/// Answers the request of the effective context.
pub fn send_local_response(code: u32, headers: &[u8], body: &[u8]) -> Result<(), Status> {
    // SAFETY: live slices.
    status(unsafe {
        proxy_send_local_response(code, b"".as_ptr(), 0, body.as_ptr(), body.len(), headers.as_ptr(), headers.len(), -1)
    })
}

/// Starts an HTTP call; its token.
pub fn http_call(cluster: &str, headers: &[u8], body: &[u8], timeout_ms: u32) -> Result<u32, Status> {
    let mut token = 0u32;
    // SAFETY: live slices and a valid out-pointer.
    status(unsafe {
        proxy_http_call(
            cluster.as_ptr(),
            cluster.len(),
            headers.as_ptr(),
            headers.len(),
            body.as_ptr(),
            body.len(),
            b"".as_ptr(),
            0,
            timeout_ms,
            &mut token,
        )
    })?;
    Ok(token)
}

/// Makes `context` the one later hostcalls act on.
pub fn set_effective_context(context: u32) -> Result<(), Status> {
    // SAFETY: no pointers.
    status(unsafe { proxy_set_effective_context(context) })
}

/// Defines a metric (0 counter, 1 gauge, 2 histogram); its id.
pub fn define_metric(kind: u32, name: &str) -> Result<u32, Status> {
    let mut id = 0u32;
    // SAFETY: a live slice and a valid out-pointer.
    status(unsafe { proxy_define_metric(kind, name.as_ptr(), name.len(), &mut id) })?;
    Ok(id)
}

/// Adds to a counter.
pub fn increment_metric(id: u32, by: i64) {
    // SAFETY: no pointers.
    unsafe { proxy_increment_metric(id, by) };
}

/// Sets a gauge or records a histogram value.
pub fn record_metric(id: u32, value: u64) {
    // SAFETY: no pointers.
    unsafe { proxy_record_metric(id, value) };
}

/// proxy-wasm's map serialization: a u32 count, the length of each name
/// and value, then each name and value followed by a NUL.
pub fn serialize_pairs(pairs: &[(&str, &str)]) -> Vec<u8> {
    let size = 4 + pairs.iter().map(|(n, v)| 10 + n.len() + v.len()).sum::<usize>();
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&(pairs.len() as u32).to_le_bytes());
    for (n, v) in pairs {
        out.extend_from_slice(&(n.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    }
    for (n, v) in pairs {
        out.extend_from_slice(n.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}
