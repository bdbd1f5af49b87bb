//! `proxy_http_call`: Envoy's HTTP callout, carried to a real server (or
//! answered by a fault). As in proxy-wasm-cpp-host the call belongs to the
//! ROOT context: its reply comes back through `proxy_on_http_call_response`
//! with the root's id, also after the stream that made it ended. The
//! request runs when it is dispatched; its reply waits until the test runs
//! the host. Tokens are 4, 8, 12, ... per VM.

use wasmtime::{format_err, Caller, Linker, Result};

use crate::wasm_host::calls::{Answer, Call, Outcome, Reply, Request, Transport};
use crate::wasm_host::clusters::Cluster;
use crate::wasm_host::faults::Fault;
use crate::wasm_host::header_map::HeaderMap;
use crate::wasm_host::http_client;
use crate::wasm_host::memory::{read, read_str, write_u32};
use crate::wasm_host::status::{BAD_ARGUMENT, OK};
use crate::wasm_host::vm::VmState;
use crate::wasm_host::world::lock;

/// Defines the hostcalls of this file.
pub fn add(linker: &mut Linker<VmState>) -> Result<()> {
    linker.func_wrap(
        "env",
        "proxy_http_call",
        |mut c: Caller<'_, VmState>,
         upstream_ptr: i32,
         upstream_len: i32,
         headers_ptr: i32,
         headers_len: i32,
         body_ptr: i32,
         body_len: i32,
         trailers_ptr: i32,
         trailers_len: i32,
         timeout_ms: i32,
         token_ptr: i32| {
            let cluster = read_str(&mut c, upstream_ptr, upstream_len)?;
            let raw = read(&mut c, headers_ptr, headers_len)?;
            let headers = HeaderMap::deserialize(&raw).map_err(|e| format_err!("proxy_http_call headers: {e}"))?;
            let body = read(&mut c, body_ptr, body_len)?;
            let _trailers = read(&mut c, trailers_ptr, trailers_len)?;
            write_u32(&mut c, token_ptr, 0)?;
            // Envoy refuses a negative timeout, an unknown cluster, and a
            // call without these headers.
            let has = |name: &str| headers.first(name).is_some();
            if timeout_ms < 0 || !(has(":method") && has(":path") && has(":authority")) {
                return Ok(BAD_ARGUMENT);
            }
            let world = c.data().world.clone();
            let (port, fault) = {
                let mut w = lock(&world);
                let Some(Cluster::Http { port }) = w.clusters.get(&cluster).cloned() else { return Ok(BAD_ARGUMENT) };
                (port, w.faults.take_next())
            };
            if let Fault::DispatchStatus(status) = fault {
                return Ok(status);
            }
            let now = c.data().clock.now_ms();
            let request = Request::Http { headers, body };
            let answer = answer(&fault, port, &request, now)?;
            let state = c.data_mut();
            let token = state.next_http_token;
            state.next_http_token = token.wrapping_add(4).max(4);
            let (vm, context) = (state.index, state.active);
            write_u32(&mut c, token_ptr, token)?;
            // Envoy: a timeout of 0 means none.
            let deadline_ms = if timeout_ms == 0 { u64::MAX } else { now + timeout_ms as u64 };
            lock(&world).calls.push(Call {
                id: 0,
                vm,
                token,
                transport: Transport::Http { context },
                cluster,
                request,
                fault,
                dispatched_ms: now,
                deadline_ms,
                answer,
                outcome: Outcome::Pending,
            });
            Ok(OK)
        },
    )?;
    Ok(())
}

/// What the call will be answered, by its fault; the real server is asked
/// now when the fault lets the command through.
fn answer(fault: &Fault, port: u16, request: &Request, now: u64) -> Result<Answer> {
    let Request::Http { headers, body } = request else { unreachable!("an HTTP call carries an HTTP request") };
    let ready = |reply| Ok(Answer::Ready { at_ms: now, reply });
    match fault {
        Fault::Pass | Fault::Twice | Fault::SizeOverclaim(_) | Fault::BodyStatus(_) => {
            ready(http_client::send(port, headers, body))
        }
        Fault::Delay(ms) => Ok(Answer::Ready { at_ms: now + ms, reply: http_client::send(port, headers, body) }),
        Fault::Drop => Ok(Answer::Never),
        Fault::NoCallback => Ok(Answer::Lost),
        Fault::Timeout => ready(http_client::timeout()),
        Fault::ConnectFailure => ready(http_client::connect_failure()),
        Fault::Error(text) => {
            let doc = serde_json::json!({ request.command().split(' ').next().unwrap_or(""): [false, text] });
            ready(json_200(doc.to_string().into_bytes()))
        }
        Fault::Raw(bytes) => ready(json_200(bytes.clone())),
        Fault::Http(status, body) => ready(Reply::Http {
            headers: HeaderMap::from_text(&[
                (":status", &status.to_string()),
                ("content-length", &body.len().to_string()),
            ]),
            body: body.clone(),
        }),
        Fault::HttpReply(headers, body) => ready(Reply::Http { headers: headers.clone(), body: body.clone() }),
        Fault::Reset => ready(Reply::HttpReset),
        Fault::DispatchStatus(_) => Err(format_err!("handled before")),
    }
}

fn json_200(body: Vec<u8>) -> Reply {
    let headers = HeaderMap::from_text(&[
        (":status", "200"),
        ("content-type", "application/json"),
        ("content-length", &body.len().to_string()),
    ]);
    Reply::Http { headers, body }
}
