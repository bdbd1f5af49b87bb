//! Answering one store call into its VM: the reply, or the timeout that
//! fired first. Both transports answer on the ROOT context, as Envoy
//! (HTTP calls belong to the root context in proxy-wasm-cpp-host) and
//! Higress (Redis calls) do; the module finds the stream itself. A Redis
//! timeout closes the VM's connection and fails every command still on it
//! (status 1), as Higress's op timeout does.

use wasmtime::Val;

use super::calls::{Answer, Call, Outcome, Reply, Transport};
use super::clusters::RedisTarget;
use super::faults::Fault;
use super::http_client;
use super::vm::{Callback, Vm, ROOT_ID};
use super::world::{lock, WorldRef};

/// How the callback misreports the reply, by the call's fault.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Misreport {
    /// Bytes claimed beyond what the reply holds.
    pub size_extra: u32,
    /// What reading the reply answers instead of its bytes.
    pub body_status: Option<i32>,
}

/// Delivers call `id` (it is due) at the clock's instant.
pub fn deliver(vms: &mut [Vm], world: &WorldRef, id: u64) {
    let (call, now) = {
        let mut w = lock(world);
        let now = w.clock.now_ms();
        let Some(call) = w.calls.settle(id, now) else { return };
        (call, now)
    };
    let times = if call.fault == Fault::Twice { 2 } else { 1 };
    let misreport = Misreport {
        size_extra: if let Fault::SizeOverclaim(n) = call.fault { n } else { 0 },
        body_status: if let Fault::BodyStatus(s) = call.fault { Some(s) } else { None },
    };
    let vm = &mut vms[call.vm];
    let reply = match call.transport {
        Transport::Http { .. } => match (&call.outcome, &call.answer) {
            (Outcome::Delivered(_), Answer::Ready { reply, .. }) => reply.clone(),
            _ => http_client::timeout(),
        },
        Transport::Redis => redis_reply(vm, world, &call, now),
    };
    let from_store = matches!(call.outcome, Outcome::Delivered(_))
        && call.fault.reaches_store()
        && match &reply {
            Reply::Http { headers, .. } => headers.first(":status") == Some(b"200"),
            Reply::Redis(_) => true,
            Reply::HttpReset | Reply::RedisNetworkError => false,
        };
    lock(world).calls.note_answer(call.id, from_store);
    for _ in 0..times {
        callback(vm, call.token, &reply, misreport);
    }
}

/// Calls the module back on the root context with `reply` for `token`:
/// `proxy_on_http_call_response` for an HTTP reply or failure,
/// `proxy_on_redis_call_response` for a Redis reply or network error.
pub fn callback(vm: &mut Vm, token: u32, reply: &Reply, misreport: Misreport) {
    let extra = misreport.size_extra as usize;
    match reply {
        Reply::Http { .. } | Reply::HttpReset => {
            let (response, headers, size) = match reply {
                Reply::Http { headers, body } => (Some((headers.clone(), body.clone())), headers.len(), body.len()),
                _ => (None, 0, 0),
            };
            let args = [ROOT_ID, token, headers as u32, (size + extra) as u32, 0].map(|n| Val::I32(n as i32));
            vm.store.data_mut().callback = Some(Callback::Http { response, body_status: misreport.body_status });
            vm.enter(ROOT_ID, "proxy_on_http_call_response", &args);
        }
        Reply::Redis(_) | Reply::RedisNetworkError => {
            let (status, bytes) = match reply {
                Reply::Redis(bytes) => (0, bytes.clone()),
                _ => (1, Vec::new()),
            };
            let args = [ROOT_ID, token, status, (bytes.len() + extra) as u32].map(|n| Val::I32(n as i32));
            if status == 0 {
                vm.store.data_mut().callback = Some(Callback::Redis { bytes, body_status: misreport.body_status });
            }
            vm.enter(ROOT_ID, "proxy_on_redis_call_response", &args);
        }
    }
}

/// The reply of a due Redis call, read from the VM's connection if it went there.
fn redis_reply(vm: &mut Vm, world: &WorldRef, call: &Call, now: u64) -> Reply {
    let name = RedisTarget::parse(&call.cluster).map(|t| t.name).unwrap_or_default();
    let links = &mut vm.store.data_mut().redis_links;
    match (&call.outcome, &call.answer) {
        (Outcome::Delivered(_), Answer::Ready { reply, .. }) => reply.clone(),
        (Outcome::Delivered(_), Answer::OnConnection { connection, .. }) => {
            let reply = match links.get_mut(&name) {
                Some(link) if link.generation == *connection => link.reply(call.id),
                other => {
                    let now_on = other.map(|l| l.generation);
                    eprintln!(
                        "redis link {connection}: call {} is due, but the link is gone (now: {now_on:?})",
                        call.id
                    );
                    None
                }
            };
            match reply {
                Some(bytes) => Reply::Redis(bytes),
                None => {
                    close(links, &name, *connection, world, call.vm, now);
                    Reply::RedisNetworkError
                }
            }
        }
        (outcome, Answer::OnConnection { connection, .. }) => {
            eprintln!("redis link {connection}: call {} ended {outcome:?}, not delivered: the link is closed", call.id);
            close(links, &name, *connection, world, call.vm, now);
            Reply::RedisNetworkError
        }
        _ => Reply::RedisNetworkError,
    }
}

/// Closes connection `generation` of VM `vm`: every command still on it
/// fails now with status 1.
fn close(
    links: &mut std::collections::BTreeMap<String, super::redis_link::RedisLink>,
    name: &str,
    generation: u64,
    world: &WorldRef,
    vm: usize,
    now: u64,
) {
    if links.get(name).is_some_and(|l| l.generation == generation) {
        links.remove(name);
    }
    lock(world).calls.fail_connection(vm, generation, now);
}
