//! Calling the decision script on a real Redis, production or test build.

use ratelimit::call::ScriptCall;
use ratelimit::decision::Decision;
use ratelimit::digest::sha1;
use ratelimit::script::{BODY, PRELUDE, TEST_CLOCK};

/// The test build of the script: the clock is the last argument.
pub fn test_script() -> String {
    format!("{PRELUDE}{TEST_CLOCK}{BODY}")
}

/// SHA-1 hex of a script text.
pub fn sha1_hex(text: &str) -> String {
    sha1(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Loads `text` into the server's script cache and returns its SHA-1.
pub fn load(conn: &mut redis::Connection, text: &str) -> String {
    redis::cmd("SCRIPT").arg("LOAD").arg(text).query(conn).unwrap()
}

/// Runs one decision by EVALSHA; `clock` is appended for the test build.
pub fn evalsha(
    conn: &mut redis::Connection,
    sha: &str,
    call: &ScriptCall,
    clock: Option<u64>,
) -> Result<Vec<Decision>, String> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha).arg(call.keys.len()).arg(&call.keys).arg(&call.args);
    if let Some(now) = clock {
        cmd.arg(now);
    }
    let reply: Vec<i64> = cmd.query(conn).map_err(|e| e.to_string())?;
    decode(&reply)
}

/// Turns the script's flat reply into decisions.
pub fn decode(reply: &[i64]) -> Result<Vec<Decision>, String> {
    if !reply.len().is_multiple_of(4) {
        return Err(format!("reply of {} integers is not 4 per limit", reply.len()));
    }
    reply
        .chunks(4)
        .map(|c| Decision::from_wire(c[0], c[1], c[2], c[3]).ok_or_else(|| format!("bad decision {c:?}")))
        .collect()
}
