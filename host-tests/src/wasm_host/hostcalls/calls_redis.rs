//! Higress's Redis calls, as /work/shared/reference/higress-redis-abi.md
//! describes them: `proxy_redis_init` once per VM and cluster, then
//! `proxy_redis_call` with exactly one RESP2 command, answered on the ROOT
//! context through `proxy_on_redis_call_response(root, token, status,
//! size)`. Tokens are 3, 7, 11, ... per VM. The command goes to a real
//! redis-server over this VM's one pipelined connection.
//!
//! Calling init again resets the cluster's connection on this VM: every
//! command in flight on it fails (status 1). Breaking the contract (a query
//! that is not exactly one command, HELLO) is a trap naming the rule broken.

use wasmtime::{format_err, Caller, Linker, Result};

use crate::wasm_host::calls::{Answer, Call, Outcome, Reply, Request, Transport};
use crate::wasm_host::clusters::{Cluster, RedisTarget};
use crate::wasm_host::faults::Fault;
use crate::wasm_host::memory::{read, read_str, write_u32};
use crate::wasm_host::redis_link::{Login, RedisLink};
use crate::wasm_host::resp::parse_command;
use crate::wasm_host::status::{BAD_ARGUMENT, OK};
use crate::wasm_host::vm::{RedisClient, RedisInit, VmState};
use crate::wasm_host::world::lock;

/// Defines the hostcalls of this file.
pub fn add(linker: &mut Linker<VmState>) -> Result<()> {
    linker.func_wrap(
        "env",
        "proxy_redis_init",
        |mut c: Caller<'_, VmState>,
         cluster_ptr: i32,
         cluster_len: i32,
         user_ptr: i32,
         user_len: i32,
         pass_ptr: i32,
         pass_len: i32,
         timeout_ms: i32| {
            let cluster = read_str(&mut c, cluster_ptr, cluster_len)?;
            let username = read_str(&mut c, user_ptr, user_len)?;
            let password = read_str(&mut c, pass_ptr, pass_len)?;
            let timeout_ms = timeout_ms as u32;
            let target = RedisTarget::parse(&cluster).ok();
            let port = target.as_ref().and_then(|t| match lock(&c.data().world).clusters.get(&t.name) {
                Some(Cluster::Redis { port }) => Some(*port),
                _ => None,
            });
            let state = c.data_mut();
            let (status, name) = match (&target, port) {
                (Some(t), Some(port)) => {
                    let login = Login { username: username.clone(), password: password.clone(), db: t.db };
                    let client = RedisClient { port, login, timeout_ms: u64::from(timeout_ms) };
                    state.redis_clients.insert(t.name.clone(), client);
                    (OK, Some(t.name.clone()))
                }
                _ => (BAD_ARGUMENT, None),
            };
            let reset = name.and_then(|n| state.redis_links.remove(&n)).map(|link| link.generation);
            let (vm, now) = (state.index, state.clock.now_ms());
            if let Some(generation) = reset {
                // Printed with a failing test's output: why calls on it saw status 1.
                eprintln!("redis link {generation}: proxy_redis_init again: the link is closed");
                lock(&state.world).calls.fail_connection(vm, generation, now);
            }
            let state = c.data_mut();
            state.redis_inits.push(RedisInit { cluster, username, password, timeout_ms, status });
            Ok(status)
        },
    )?;
    linker.func_wrap(
        "env",
        "proxy_redis_call",
        |mut c: Caller<'_, VmState>,
         cluster_ptr: i32,
         cluster_len: i32,
         query_ptr: i32,
         query_len: i32,
         token_ptr: i32| {
            let cluster = read_str(&mut c, cluster_ptr, cluster_len)?;
            let query = read(&mut c, query_ptr, query_len)?;
            let args = parse_command(&query)
                .map_err(|e| format_err!("proxy_redis_call: not exactly one RESP2 command: {e}"))?;
            let request = Request::Redis { args };
            if request.command() == "HELLO" {
                return Err(format_err!("proxy_redis_call: HELLO is forbidden (the host's decoder knows RESP2 only)"));
            }
            let Ok(target) = RedisTarget::parse(&cluster) else { return Ok(BAD_ARGUMENT) };
            let Some(client) = c.data().redis_clients.get(&target.name).cloned() else { return Ok(BAD_ARGUMENT) };
            let world = c.data().world.clone();
            let fault = lock(&world).faults.take_next();
            if let Fault::DispatchStatus(status) = fault {
                return Ok(status);
            }
            let now = c.data().clock.now_ms();
            let id = lock(&world).calls.next_id();
            let answer = answer(c.data_mut(), &target.name, &client, &fault, id, &query, now)?;
            let state = c.data_mut();
            let token = state.next_redis_token;
            state.next_redis_token = token.wrapping_add(4);
            let vm = state.index;
            write_u32(&mut c, token_ptr, token)?;
            let deadline_ms = if client.timeout_ms == 0 { u64::MAX } else { now + client.timeout_ms };
            lock(&world).calls.push(Call {
                id,
                vm,
                token,
                transport: Transport::Redis,
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

/// Where call `id`'s answer comes from. A command the fault lets through
/// is written now on the VM's connection (opened, with AUTH and SELECT,
/// on first use); a connection that cannot be opened or written is status 1.
fn answer(
    state: &mut VmState,
    cluster: &str,
    client: &RedisClient,
    fault: &Fault,
    id: u64,
    query: &[u8],
    now: u64,
) -> Result<Answer> {
    let ready = |reply| Ok(Answer::Ready { at_ms: now, reply });
    let delay = match fault {
        Fault::Pass | Fault::Twice | Fault::SizeOverclaim(_) | Fault::BodyStatus(_) => 0,
        Fault::Delay(ms) => *ms,
        Fault::Drop => return Ok(Answer::Never),
        Fault::NoCallback => return Ok(Answer::Lost),
        Fault::Timeout | Fault::ConnectFailure => return ready(Reply::RedisNetworkError),
        Fault::Error(text) => return ready(Reply::Redis(format!("-{text}\r\n").into_bytes())),
        Fault::Raw(bytes) => return ready(Reply::Redis(bytes.clone())),
        Fault::Http(..) | Fault::HttpReply(..) | Fault::Reset => {
            return Err(format_err!("{fault:?} is an HTTP fault; this is a Redis call"))
        }
        Fault::DispatchStatus(_) => return Err(format_err!("handled before")),
    };
    if !state.redis_links.contains_key(cluster) {
        state.redis_connections += 1;
        match RedisLink::open(client.port, &client.login, state.redis_connections) {
            Some(link) => {
                state.redis_links.insert(cluster.to_string(), link);
            }
            // Its reason is printed where it is known (RedisLink::open).
            None => return ready(Reply::RedisNetworkError),
        }
    }
    let link = state.redis_links.get_mut(cluster).expect("opened above");
    if !link.send(id, query) {
        state.redis_links.remove(cluster);
        return ready(Reply::RedisNetworkError);
    }
    Ok(Answer::OnConnection { at_ms: now + delay, connection: link.generation })
}
