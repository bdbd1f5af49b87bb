//! Answering one store call into its VM: the reply, or the timeout that
//! fired first. HTTP-call replies go to the context that made the call;
//! Redis replies go to the root context, as Higress delivers them. A Redis
//! timeout closes the VM's connection and fails every command still on it
//! (status 1), as Higress's op timeout does.

use wasmtime::Val;

use super::calls::{Answer, Call, Outcome, Reply, Transport};
use super::clusters::RedisTarget;
use super::http_client;
use super::vm::{Callback, Vm, ROOT_ID};
use super::world::{lock, WorldRef};

/// Delivers call number `index` (it is due) at the clock's instant.
pub fn deliver(vms: &mut [Vm], world: &WorldRef, index: usize) {
    let (call, now) = {
        let mut w = lock(world);
        let now = w.clock.now_ms();
        let call = &mut w.calls.all[index];
        call.outcome = if call.reply_first() { Outcome::Delivered(now) } else { Outcome::TimedOut(now) };
        (call.clone(), now)
    };
    let vm = &mut vms[call.vm];
    match call.transport {
        Transport::Http { context } => {
            let reply = match (&call.outcome, &call.answer) {
                (Outcome::Delivered(_), Answer::Ready { reply, .. }) => reply.clone(),
                _ => http_client::timeout(),
            };
            let (headers, body) = match reply {
                Reply::Http { headers, body } => (headers, body),
                _ => (Vec::new(), Vec::new()), // a reset: nothing at all
            };
            let args = [context, call.token, headers.len() as u32, body.len() as u32, 0].map(|n| Val::I32(n as i32));
            vm.store.data_mut().callback = Some(Callback::Http { headers, body });
            vm.enter(context, "proxy_on_http_call_response", &args);
        }
        Transport::Redis => {
            let reply = redis_reply(vm, world, &call, now);
            let (status, bytes) = match reply {
                Reply::Redis(bytes) => (0, bytes),
                _ => (1, Vec::new()),
            };
            let args = [ROOT_ID, call.token, status, bytes.len() as u32].map(|n| Val::I32(n as i32));
            if status == 0 {
                vm.store.data_mut().callback = Some(Callback::Redis(bytes));
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
            let reply = links.get_mut(&name).filter(|l| l.generation == *connection).and_then(|l| l.reply(call.id));
            match reply {
                Some(bytes) => Reply::Redis(bytes),
                None => {
                    close(links, &name, *connection, world, call.vm, now);
                    Reply::RedisNetworkError
                }
            }
        }
        (_, Answer::OnConnection { connection, .. }) => {
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
