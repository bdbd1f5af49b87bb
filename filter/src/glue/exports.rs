//! The callbacks the host calls (proxy-wasm ABI 0.2.1): those the filter
//! needs, and at the end those it does not, as no-ops, because NGINX's
//! ngx_wasm_module calls them whether the module exports them or not (a
//! missing `proxy_on_done` crashed its worker process at every request's
//! end). Envoy skips a callback that is not exported; with these it makes
//! one more call into the VM per body chunk, trailer block and stream end.

use super::abi;
use super::answers::{answer_bound, read_answer};
use super::host::{HostCalls, HostRequest, HostResponse};
use super::vm::{defer, end_context, with_vm, Deferred, Plugin};
use crate::store::transport::Answer;
#[cfg(feature = "redis")]
use crate::store::StoreError;
use crate::worker::{Action, BodyAction, Host, Worker};

const CONTINUE: u32 = 0;
const PAUSE: u32 = 1;
/// `FilterDataStatus::StopIterationAndBuffer`: the host keeps the chunk
/// with those before it (Envoy: up to the connection's buffer limit, past
/// which it answers 413 itself).
const STOP_AND_BUFFER: u32 = 1;
/// `FilterDataStatus::StopIterationAndWatermark`: the host keeps the chunk
/// under flow control (it stops reading the client past its buffer limit).
const STOP_AND_WATERMARK: u32 = 2;
/// A context id no host hands out (ids count up from 1).
const NO_SUCH_CONTEXT: u32 = u32::MAX - 1;

#[no_mangle]
pub extern "C" fn proxy_on_vm_start(_root: u32, _size: usize) -> u32 {
    1
}

#[no_mangle]
pub extern "C" fn proxy_on_context_create(context: u32, parent: u32) {
    if parent == 0 {
        return;
    }
    with_vm(|vm| {
        if vm.plugins.contains_key(&parent) {
            vm.streams.insert(context, parent);
        }
    });
}

#[no_mangle]
pub extern "C" fn proxy_on_configure(root: u32, size: usize) -> u32 {
    let bytes = abi::buffer(abi::PLUGIN_CONFIGURATION, 0, size).ok().flatten().unwrap_or_default();
    match crate::config::load(&bytes) {
        Ok(config) => {
            log::info!(
                "ratelimit: {} rules, store {} via cluster {}, script {}",
                config.rules.len(),
                match config.store.transport {
                    crate::store::Transport::Webdis => "webdis",
                    crate::store::Transport::Redis => "redis",
                },
                config.store.cluster,
                crate::script::sha1_hex()
            );
            // A host that accepts a context id that cannot exist ignores
            // the call altogether (NGINX's ngx_wasm_module): it answers a
            // store call in the context that made it.
            let pinned = abi::set_effective_context(NO_SUCH_CONTEXT).is_ok();
            let _ = abi::set_effective_context(root);
            if pinned {
                log::info!("ratelimit: the host ignores proxy_set_effective_context: each request's decisions go out in its own call, the rest on the timer");
            }
            let plugin = Plugin::new(root, config, pinned);
            if pinned && crate::worker::body_tick_ms(plugin.worker.config()).is_some() {
                log::warn!("ratelimit: this host does not hand request bodies to the filter: rules reading the body (body:, match.body) answer 501 to every request they apply to");
            }
            #[cfg(feature = "redis")]
            if plugin.target.transport == crate::store::Transport::Redis {
                plugin.redis.init(&plugin.target.cluster);
            }
            if pinned {
                // A worker process started after one found a request let
                // through (it crashed) refuses at once.
                plugin.guard.settle();
            }
            plugin.sync_tick(None, false);
            u32::from(with_vm(|vm| vm.plugins.insert(root, plugin)).is_some())
        }
        Err(e) => {
            log::error!("ratelimit: configuration refused: {e}");
            0
        }
    }
}

#[no_mangle]
pub extern "C" fn proxy_on_tick(root: u32) {
    defer(Deferred::Tick(root));
}

/// A request's headers. Pausing holds them (and, on Envoy with
/// `allow_on_headers_stop_iteration`, lets the body come to
/// `proxy_on_request_body` while they wait). A pinned host that let a
/// paused request through is never paused again (`pause_guard`).
#[no_mangle]
pub extern "C" fn proxy_on_request_headers(context: u32, _headers: usize, end_of_stream: u32) -> u32 {
    let action = with_vm(|vm| {
        let root = *vm.streams.get(&context)?;
        let plugin = vm.plugins.get_mut(&root)?;
        let (worker, host) = plugin.split(Some(context));
        if host.pinned && host.guard.refused() {
            host.reply(context, &crate::response::unavailable(), &[]);
            return Some(Action::Pause);
        }
        let action = worker.on_request_headers(&host, context, &HostRequest, end_of_stream != 0);
        if host.pinned && action == Action::Pause {
            host.guard.paused(context);
        }
        plugin.sync_tick(Some(context), false);
        Some(action)
    });
    match action.flatten() {
        Some(Action::Pause) => PAUSE,
        _ => CONTINUE,
    }
}

#[no_mangle]
pub extern "C" fn proxy_on_response_headers(context: u32, _headers: usize, end_of_stream: u32) -> u32 {
    // Busy: this is the response of our own local reply, which carries its headers.
    let headers = with_vm(|vm| {
        let root = *vm.streams.get(&context)?;
        let plugin = vm.plugins.get_mut(&root)?;
        let (worker, host) = plugin.split(Some(context));
        if let_through(worker, &host, context) {
            return None;
        }
        let headers = worker.on_response_headers(&host, context, &HostResponse, end_of_stream != 0);
        let rewrites = worker.rewrites_body(context);
        plugin.sync_tick(Some(context), false);
        Some((headers, rewrites))
    });
    let (headers, rewrites) = headers.flatten().unwrap_or_default();
    for (name, value) in headers {
        let _ = abi::add_header(abi::RESPONSE_HEADERS, name, &value);
    }
    if rewrites {
        // The body changes as it passes: its length is no longer known.
        let _ = abi::remove_header(abi::RESPONSE_HEADERS, "content-length");
    }
    CONTINUE
}

/// Whether a pinned host let stream `context` through before its decision
/// (its response starts: NGINX skips the headers' callback of such a
/// request while its call is out, so the body's may be the first). The
/// stream is then forgotten, never resumed or answered.
#[inline(never)]
fn let_through(worker: &mut Worker, host: &HostCalls<'_>, context: u32) -> bool {
    if !host.pinned || !host.guard.responding(context) {
        return false;
    }
    worker.on_stream_end(host, context);
    host.guard.settle();
    true
}

/// A chunk of the response body: read only while a charge waits for the
/// usage in it, or while the usage the filter asked for is taken out of it
/// (then what passes on is changed).
#[no_mangle]
pub extern "C" fn proxy_on_response_body(context: u32, size: usize, end_of_stream: u32) -> u32 {
    with_vm(|vm| {
        let root = *vm.streams.get(&context)?;
        let plugin = vm.plugins.get_mut(&root)?;
        let (worker, host) = plugin.split(Some(context));
        if let_through(worker, &host, context) {
            return None;
        }
        if !worker.reads_body(context) {
            return None;
        }
        // A chunk the host cannot hand over reads as nothing: the usage
        // then comes out missing or garbled, and the default is charged.
        let chunk = abi::buffer(abi::RESPONSE_BODY, 0, size).ok().flatten().unwrap_or_default();
        if let Some(sent) = worker.on_response_body(&host, context, &chunk, end_of_stream != 0) {
            if sent != chunk {
                let _ = abi::set_buffer(abi::RESPONSE_BODY, 0, size, &sent);
            }
        }
        plugin.sync_tick(Some(context), false);
        Some(())
    });
    CONTINUE
}

/// An HTTP call's answer (on the root: calls are made from it; NGINX,
/// which ignores that, names the root too and runs in the request that
/// made the call).
#[no_mangle]
pub extern "C" fn proxy_on_http_call_response(root: u32, token: u32, _headers: usize, size: usize, _trailers: usize) {
    let status = abi::header_value(abi::HTTP_CALL_RESPONSE_HEADERS, ":status")
        .ok()
        .flatten()
        .filter(|s| !s.is_empty() && s.len() <= 3 && s.iter().all(u8::is_ascii_digit))
        .and_then(|s| std::str::from_utf8(&s).ok()?.parse::<u32>().ok());
    let bound = answer_bound(root, token);
    let answer = match read_answer(abi::HTTP_CALL_RESPONSE_BODY, size, bound) {
        Ok(body) => Answer::Http { status, body },
        Err(e) => Answer::Failed(e),
    };
    defer(Deferred::Answer { root, token, answer });
}

/// A Redis call's answer (Higress; on the root context that made the call).
#[cfg(feature = "redis")]
#[no_mangle]
pub extern "C" fn proxy_on_redis_call_response(root: u32, token: u32, status: u32, size: usize) {
    let answer = if status != 0 {
        Answer::Failed(StoreError::Network)
    } else {
        match read_answer(abi::REDIS_CALL_RESPONSE, size, answer_bound(root, token)) {
            Ok(bytes) => Answer::Resp(bytes),
            Err(e) => Answer::Failed(e),
        }
    };
    defer(Deferred::Answer { root, token, answer });
}

#[no_mangle]
pub extern "C" fn proxy_on_delete(context: u32) {
    if with_vm(|vm| end_context(vm, context)).is_none() {
        defer(Deferred::Delete(context));
    }
}

/// A chunk of the request body (`size`: all of it the host holds so far).
/// Buffered while the request's decision waits for it; read once, whole.
#[no_mangle]
pub extern "C" fn proxy_on_request_body(context: u32, size: usize, end_of_stream: u32) -> u32 {
    let action = with_vm(|vm| {
        let root = *vm.streams.get(&context)?;
        let plugin = vm.plugins.get_mut(&root)?;
        let (worker, host) = plugin.split(Some(context));
        let read = |n: u64| abi::buffer(abi::REQUEST_BODY, 0, usize::try_from(n).ok()?).ok().flatten();
        let action = worker.on_request_body(&host, context, &HostRequest, size as u64, end_of_stream != 0, read);
        plugin.sync_tick(Some(context), false);
        Some(action)
    });
    match action {
        // Not a stream of ours, or one not waiting for its body.
        Some(None | Some(BodyAction::Continue)) => CONTINUE,
        // Busy (never expected here): hold it; a request still waiting is
        // answered by its timeout, never let through undecided.
        None | Some(Some(BodyAction::Buffer)) => STOP_AND_BUFFER,
        Some(Some(BodyAction::Hold)) => STOP_AND_WATERMARK,
    }
}

/// A request's trailers: its body (if any) is whole. A request waiting for
/// its body is decided now; one whose decision is out stays held (Envoy
/// resumes a paused stream on a Continue here, decided or not).
#[no_mangle]
pub extern "C" fn proxy_on_request_trailers(context: u32, _trailers: usize) -> u32 {
    let action = with_vm(|vm| {
        let root = *vm.streams.get(&context)?;
        let plugin = vm.plugins.get_mut(&root)?;
        let (worker, host) = plugin.split(Some(context));
        // What the host buffered (nothing: no body came, an empty one).
        let read =
            |n: u64| abi::buffer(abi::REQUEST_BODY, 0, usize::try_from(n).ok()?).ok().map(Option::unwrap_or_default);
        let action = worker.on_request_trailers(&host, context, &HostRequest, read);
        plugin.sync_tick(Some(context), false);
        Some(action)
    });
    match action {
        // Not a stream of ours, or one decided.
        Some(None | Some(Action::Continue)) => CONTINUE,
        // Busy (never expected here): held, never let through undecided.
        None | Some(Some(Action::Pause)) => PAUSE,
    }
}

/// A response's trailers: its body is whole, and the usage read from it
/// is charged now. (An event the usage was being taken out of that never
/// ended cannot be sent here: readers drop such an event anyway.)
#[no_mangle]
pub extern "C" fn proxy_on_response_trailers(context: u32, _trailers: usize) -> u32 {
    with_vm(|vm| {
        let root = *vm.streams.get(&context)?;
        let plugin = vm.plugins.get_mut(&root)?;
        let (worker, host) = plugin.split(Some(context));
        if worker.reads_body(context) {
            let _ = worker.on_response_body(&host, context, &[], true);
            plugin.sync_tick(Some(context), false);
        }
        Some(())
    });
    CONTINUE
}

/// The stream may be deleted at once (the filter ends a stream in
/// `proxy_on_delete`).
#[no_mangle]
pub extern "C" fn proxy_on_done(_context: u32) -> u32 {
    1
}

#[no_mangle]
pub extern "C" fn proxy_on_log(_context: u32) {}

#[no_mangle]
pub extern "C" fn proxy_on_queue_ready(_root: u32, _queue: u32) {}
