//! The webdis transport: HTTP calls through an Envoy cluster.

use std::time::Duration;

use proxy_wasm::hostcalls;
use proxy_wasm::types::{BufferType, MapType};

use super::root::Plugin;
use super::stream::{self, Shared};
use crate::call::ScriptCall;
use crate::store::flow::{Message, Stage};
use crate::store::webdis;
use crate::store::StoreError;

/// Starts one HTTP call to webdis; its token.
pub fn send(plugin: &Plugin, script: &ScriptCall, message: Message) -> Result<u32, StoreError> {
    let req = match message {
        Message::Evalsha => webdis::evalsha(script),
        Message::LoadScript => webdis::script_load(),
        Message::Eval => return Err(StoreError::Dispatch),
    };
    let store = &plugin.config.store;
    hostcalls::dispatch_http_call(
        &store.cluster,
        vec![(":method", req.method), (":path", req.path), (":authority", &store.authority)],
        Some(&req.body),
        vec![],
        Duration::from_millis(store.timeout_ms),
    )
    .map_err(|_| StoreError::Dispatch)
}

/// Takes webdis's answer to `token` (Envoy reports connect failures as 503
/// and timeouts as 504, through this same callback).
pub fn on_response(shared: &Shared, token: u32, body_size: usize) {
    let status = hostcalls::get_map_value(MapType::HttpCallResponseHeaders, ":status")
        .ok()
        .flatten()
        .and_then(|s| s.parse::<u32>().ok());
    let body = hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size).ok().flatten().unwrap_or_default();
    stream::on_reply(shared, token, |stage, call| match stage {
        Stage::Loading => webdis::decode_script_load(status, &body),
        _ => webdis::decode_evalsha(status, &body, call),
    });
}
