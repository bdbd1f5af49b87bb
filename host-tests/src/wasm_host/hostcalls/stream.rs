//! Resuming a paused request and local replies. A module that resumes a
//! request it already answered, or answers one twice, has a bug Envoy
//! would not forgive either: that is a trap here, with the reason.

use wasmtime::{format_err, Caller, Linker, Result};

use crate::wasm_host::header_map::HeaderMap;
use crate::wasm_host::memory::{read, read_str};
use crate::wasm_host::status::{BAD_ARGUMENT, NOT_FOUND, OK};
use crate::wasm_host::stream::{LocalReply, State};
use crate::wasm_host::vm::VmState;

/// Defines the hostcalls of this file.
pub fn add(linker: &mut Linker<VmState>) -> Result<()> {
    linker.func_wrap("env", "proxy_continue_stream", |mut c: Caller<'_, VmState>, kind: i32| {
        let active = c.data().active;
        let Some(stream) = c.data_mut().streams.get_mut(&active) else { return Ok(NOT_FOUND) };
        match kind {
            0 => match stream.state {
                State::Waiting | State::Continued => {
                    stream.state = State::Continued;
                    Ok(OK)
                }
                State::Replied(_) => Err(format_err!("context {active}: resumed a request it already answered")),
            },
            1 => Ok(OK), // the response is never paused by this host
            _ => Ok(BAD_ARGUMENT),
        }
    })?;
    linker.func_wrap(
        "env",
        "proxy_send_local_response",
        |mut c: Caller<'_, VmState>,
         status: i32,
         details_ptr: i32,
         details_len: i32,
         body_ptr: i32,
         body_len: i32,
         headers_ptr: i32,
         headers_len: i32,
         _grpc_status: i32| {
            let details = read_str(&mut c, details_ptr, details_len)?;
            let body = read(&mut c, body_ptr, body_len)?;
            let raw = read(&mut c, headers_ptr, headers_len)?;
            let headers =
                HeaderMap::deserialize(&raw).map_err(|e| format_err!("proxy_send_local_response headers: {e}"))?;
            let active = c.data().active;
            let Some(stream) = c.data_mut().streams.get_mut(&active) else { return Ok(NOT_FOUND) };
            if let State::Replied(first) = &stream.state {
                return Err(format_err!("context {active}: a second local reply ({status}) after {}", first.status));
            }
            if stream.response_headers.is_some() {
                return Err(format_err!("context {active}: a local reply after the backend answered"));
            }
            stream.state = State::Replied(LocalReply { status: status as u32, details, headers, body });
            Ok(OK)
        },
    )?;
    Ok(())
}
