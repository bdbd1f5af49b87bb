//! Calling the decision script on a real Redis, production or test build.

use ratelimit::outcome::LimitOutcome;
use ratelimit::script::TEST_SCRIPT;
use ratelimit::store::script_call::{DecisionResult, ScriptCall, ScriptReply};

/// The test build of the script: the clock is the last argument.
pub fn test_script() -> String {
    TEST_SCRIPT.to_string()
}

/// The test build wrapped so that Redis never expires a key in real time:
/// the harness expires keys on the simulated clock instead (see
/// `SimulatedExpiry`), so a test holds however slowly the machine runs.
/// The script's `PEXPIRE` and `SET … PX` are taken over: the TTL is noted,
/// and Redis is given one of ten years instead: a real TTL runs on Redis's
/// real clock, and a 1 ms one can be over by the time the call ends (seen
/// once on a loaded machine: `extremes::the_smallest_limits` found gone the
/// log that the step before had written at the same simulated instant).
/// A TTL all the same, so the script's `PTTL` tells a key it gave one from
/// a key written without.
/// After the script's own reply, every key it was given is reported: the
/// TTL the script set (-1: created without a TTL, -2: absent, -3: left
/// untouched, -4: changed, its TTL kept, as INCRBY does).
pub fn sim_expiry_script() -> String {
    // The prelude's one alias of `redis.call` (`local call = redis.call`).
    const ALIAS: &str = "local call = redis.call\n";
    assert_eq!(TEST_SCRIPT.matches(ALIAS).count(), 1, "the wrapper cannot take over the script's TTLs");
    let script = TEST_SCRIPT.replace(ALIAS, "local call = sim_call\n");
    format!(
        "{}local function decide()\n{script}end\n{}",
        r#"local ttls = {}
local LONG = '315360000000'
local function sim_call(cmd, key, ...)
if cmd == 'PEXPIRE' then
if redis.call('PEXPIRE', key, LONG) == 0 then
return 0
end
ttls[key] = tonumber((...))
return 1
end
if cmd == 'SET' then
local args = {...}
local px = nil
for i = 2, #args - 1 do
if args[i] == 'PX' then
px = tonumber(args[i + 1])
args[i + 1] = LONG
break
end
end
ttls[key] = px
return redis.call('SET', key, unpack(args))
end
return redis.call(cmd, key, ...)
end
"#,
        r#"local before = {}
for i = 1, #KEYS do
before[i] = redis.call('DUMP', KEYS[i]) or false
end
local reply = decide()
if reply.err then
return reply
end
local n = #reply
local seen = {}
for i = 1, #KEYS do
local key = KEYS[i]
local ttl = seen[key]
if ttl == nil then
if redis.call('EXISTS', key) == 0 then
ttl = -2
elseif ttls[key] ~= nil then
ttl = ttls[key]
elseif (redis.call('DUMP', key) or false) == before[i] then
ttl = -3
elseif before[i] then
ttl = -4
else
ttl = -1
end
seen[key] = ttl
end
reply[n + i] = ttl
end
return reply
"#
    )
}

/// Loads `text` into the server's script cache and returns its SHA-1.
pub fn load(conn: &mut redis::Connection, text: &str) -> String {
    redis::cmd("SCRIPT").arg("LOAD").arg(text).query(conn).unwrap()
}

/// Runs `call` by EVALSHA (`clock` is appended for the test build) and
/// returns its values as the filter reads them, or Redis's error text.
pub fn evalsha_raw(
    conn: &mut redis::Connection,
    sha: &str,
    call: &ScriptCall,
    clock: Option<u64>,
) -> Result<ScriptReply, String> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(call.keys.len()).arg(&call.keys).arg(&call.args);
    if let Some(now) = clock {
        cmd.arg(now);
    }
    let value: redis::Value = cmd.query(conn).map_err(|e| e.to_string())?;
    reply_of(value)
}

/// The script's reply as the transports read it: integers, and texts (the
/// errors of decisions that failed inside Redis).
pub fn reply_of(value: redis::Value) -> Result<ScriptReply, String> {
    let redis::Value::Array(items) = value else { return Err(format!("not an array: {value:?}")) };
    let mut reply = ScriptReply::with_capacity(items.len());
    for item in items {
        match item {
            redis::Value::Int(i) => reply.push_int(i),
            redis::Value::BulkString(text) => reply.push_text(String::from_utf8_lossy(&text).into_owned()),
            other => return Err(format!("neither an integer nor a text: {other:?}")),
        }
    }
    Ok(reply)
}

/// Runs `call` by EVALSHA and decodes its reply as the filter does: one
/// result per decision.
pub fn evalsha_each(
    conn: &mut redis::Connection,
    sha: &str,
    call: &ScriptCall,
    clock: Option<u64>,
) -> Result<Vec<DecisionResult>, String> {
    let reply = evalsha_raw(conn, sha, call, clock)?;
    call.decode(&reply).map_err(|e| e.to_string())
}

/// Runs `call` by EVALSHA and decodes its reply as the filter does; a
/// decision that failed inside Redis fails the whole: "decision <i>: <why>".
pub fn evalsha(
    conn: &mut redis::Connection,
    sha: &str,
    call: &ScriptCall,
    clock: Option<u64>,
) -> Result<Vec<Vec<LimitOutcome>>, String> {
    every_decided(evalsha_each(conn, sha, call, clock)?)
}

/// The decisions, or the first that failed as "decision <i>: <why>".
pub fn every_decided(results: Vec<DecisionResult>) -> Result<Vec<Vec<LimitOutcome>>, String> {
    results.into_iter().enumerate().map(|(i, r)| r.map_err(|e| format!("decision {i}: {e}"))).collect()
}

/// Key expiry on the simulated clock, for `sim_expiry_script`: a key the
/// script wrote with a TTL is deleted once the simulated time passes it.
#[derive(Default)]
pub struct SimulatedExpiry {
    /// Per key, the last simulated ms it lives (Redis keeps a key while
    /// its clock is at most the expiry time).
    deadlines: std::collections::HashMap<String, u64>,
}

/// What a wrapped call returned.
pub struct Wrapped {
    /// The script's own reply.
    pub reply: ScriptReply,
    /// The keys the call wrote, with the PTTL the script left them.
    pub written: Vec<(String, i64)>,
}

impl SimulatedExpiry {
    /// Deletes the keys whose time is over at `now`.
    pub fn expire(&mut self, conn: &mut redis::Connection, now: u64) {
        let over: Vec<String> = self.deadlines.iter().filter(|(_, &d)| now > d).map(|(k, _)| k.clone()).collect();
        for key in over {
            let _: i64 = redis::cmd("DEL").arg(&key).query(conn).unwrap();
            self.deadlines.remove(&key);
        }
    }

    /// Takes the raw reply of the wrapped script for `call` at `now`.
    /// Panics if the script wrote a key without a TTL.
    pub fn record(&mut self, call: &ScriptCall, now: u64, raw: ScriptReply) -> Wrapped {
        let n = raw.ints.len().checked_sub(call.keys.len()).expect("the wrapper's reply is too short");
        assert!(raw.texts.iter().all(|(i, _)| *i < n), "a text among the TTLs");
        let (reply, tail) = raw.ints.split_at(n);
        let mut written = Vec::new();
        for (key, &ttl) in call.keys.iter().zip(tail) {
            // What is left of the key's TTL after this call, if it wrote it.
            let left = match ttl {
                -3 => None,
                // An operator's override the script rewrote (KEEPTTL):
                // its own TTL, in real time, stands.
                -4 if key.ends_with(":override") => None,
                -4 => {
                    // Its TTL stands: what is left of it on the simulated clock.
                    let deadline =
                        *self.deadlines.get(key).unwrap_or_else(|| panic!("{key} was written without a TTL"));
                    Some(i64::try_from(deadline.saturating_sub(now)).unwrap())
                }
                -2 => {
                    self.deadlines.remove(key);
                    None
                }
                -1 => panic!("{key} was written without a TTL"),
                ttl => {
                    self.deadlines.insert(key.clone(), now + u64::try_from(ttl).unwrap());
                    Some(ttl)
                }
            };
            if let Some(left) = left {
                if !written.iter().any(|(k, _)| k == key) {
                    written.push((key.clone(), left));
                }
            }
        }
        Wrapped { reply: ScriptReply { ints: reply.to_vec(), texts: raw.texts }, written }
    }
}

/// `script` without its comments, and the names it calls Redis by:
/// `redis.call`, `redis.pcall` and the locals bound to them
/// (`local call = redis.call`).
pub fn code_and_callers(script: &str) -> (String, Vec<String>) {
    let code: String = script.lines().map(|l| format!("{}\n", without_comment(l))).collect();
    let mut callers = vec!["redis.call".to_string(), "redis.pcall".to_string()];
    for line in code.lines() {
        let Some((name, value)) = line.trim().strip_prefix("local ").and_then(|l| l.split_once('=')) else { continue };
        if matches!(value.trim(), "redis.call" | "redis.pcall") {
            callers.push(name.trim().to_string());
        }
    }
    (code, callers)
}

/// A line of Lua without its comment (`--` outside a string).
fn without_comment(line: &str) -> &str {
    let mut quote = None;
    let bytes = line.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None if b == b'\'' || b == b'"' => quote = Some(b),
            None if b == b'-' && bytes.get(i + 1) == Some(&b'-') => return &line[..i],
            None => {}
        }
    }
    line
}
