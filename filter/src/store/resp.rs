//! RESP2, the Redis wire protocol, for the Redis-call transport: one command
//! out, one reply in. Decoding is bounded (depth, element count, bulk size)
//! and total: truncated, oversized or wrongly typed input is an error,
//! never a trap.

use super::{flatten, redis_error, Reply, StoreError};
use crate::call::ScriptCall;
use crate::script::{sha1_hex, SCRIPT};

/// Most elements in a reply array (4 per limit, 64 limits).
const MAX_ELEMENTS: usize = 256;
/// Longest bulk string accepted.
const MAX_BULK: usize = 64 * 1024;

/// A decoded reply value (only what a decision can contain).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// `+OK`
    Simple(String),
    /// `-ERR ...`
    Error(String),
    /// `:42`
    Int(i64),
    /// `$3\r\nabc` or the nil `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*2\r\n...` or the nil `*-1`.
    Array(Option<Vec<Value>>),
}

/// Encodes one command as a RESP2 array of bulk strings.
pub fn command(parts: &[&str]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + parts.iter().map(|p| p.len() + 16).sum::<usize>());
    out.extend_from_slice(format!("*{}\r\n", parts.len()).as_bytes());
    for p in parts {
        out.extend_from_slice(format!("${}\r\n", p.len()).as_bytes());
        out.extend_from_slice(p.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn script_command(verb: &str, body: &str, call: &ScriptCall) -> Vec<u8> {
    let n = call.keys.len().to_string();
    let mut parts: Vec<&str> = Vec::with_capacity(3 + call.keys.len() + call.args.len());
    parts.extend([verb, body, n.as_str()]);
    parts.extend(call.keys.iter().map(String::as_str));
    parts.extend(call.args.iter().map(String::as_str));
    command(&parts)
}

/// `EVALSHA <sha> <n> <keys> <args>`.
pub fn evalsha(call: &ScriptCall) -> Vec<u8> {
    script_command("EVALSHA", sha1_hex(), call)
}

/// `EVAL <script> <n> <keys> <args>`: decides and caches the script.
pub fn eval(call: &ScriptCall) -> Vec<u8> {
    script_command("EVAL", SCRIPT, call)
}

/// The `INFO` text from a RESP reply.
pub fn decode_info(input: &[u8]) -> Result<String, StoreError> {
    match decode(input)? {
        Value::Bulk(Some(text)) => Ok(String::from_utf8_lossy(&text).into_owned()),
        Value::Error(e) => Err(redis_error(&e)),
        _ => Err(StoreError::Malformed("INFO reply")),
    }
}

/// Decodes exactly one value filling all of `input`.
pub fn decode(input: &[u8]) -> Result<Value, StoreError> {
    let mut pos = 0;
    let v = value(input, &mut pos, 0)?;
    if pos != input.len() {
        return Err(StoreError::Malformed("bytes after the reply"));
    }
    Ok(v)
}

/// Decodes the reply to the EVALSHA or EVAL of `call`.
pub fn decode_decision(input: &[u8], call: &ScriptCall) -> Result<Reply, StoreError> {
    match decode(input)? {
        Value::Array(Some(items)) => {
            let ints: Option<Vec<i64>> =
                items.iter().map(|v| if let Value::Int(i) = v { Some(*i) } else { None }).collect();
            let ints = ints.ok_or(StoreError::Malformed("non-integer in the decision"))?;
            Ok(Reply::Decisions(flatten(call.decode(&ints)?)))
        }
        Value::Error(e) if e.starts_with("NOSCRIPT") => Ok(Reply::NoScript),
        Value::Error(e) if e.starts_with("NOAUTH") => Ok(Reply::NoAuth),
        Value::Error(e) => Err(redis_error(&e)),
        _ => Err(StoreError::Malformed("the decision is not an array")),
    }
}

fn line<'a>(input: &'a [u8], pos: &mut usize) -> Result<&'a [u8], StoreError> {
    let rest = input.get(*pos..).ok_or(StoreError::Malformed("truncated reply"))?;
    let end = rest.windows(2).position(|w| w == b"\r\n").ok_or(StoreError::Malformed("truncated reply"))?;
    *pos += end + 2;
    Ok(&rest[..end])
}

fn int(bytes: &[u8]) -> Result<i64, StoreError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or(StoreError::Malformed("bad integer in the reply"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn value(input: &[u8], pos: &mut usize, depth: usize) -> Result<Value, StoreError> {
    if depth > 2 {
        return Err(StoreError::Malformed("reply nested too deep"));
    }
    let kind = *input.get(*pos).ok_or(StoreError::Malformed("truncated reply"))?;
    *pos += 1;
    let head = line(input, pos)?;
    match kind {
        b'+' => Ok(Value::Simple(text(head))),
        b'-' => Ok(Value::Error(text(head))),
        b':' => Ok(Value::Int(int(head)?)),
        b'$' => {
            let len = int(head)?;
            if len == -1 {
                return Ok(Value::Bulk(None));
            }
            let len = usize::try_from(len)
                .ok()
                .filter(|l| *l <= MAX_BULK)
                .ok_or(StoreError::Malformed("bulk length out of range"))?;
            let end = pos.checked_add(len).ok_or(StoreError::Malformed("bulk length out of range"))?;
            let data = input.get(*pos..end).ok_or(StoreError::Malformed("truncated reply"))?.to_vec();
            if input.get(end..end + 2) != Some(b"\r\n".as_slice()) {
                return Err(StoreError::Malformed("truncated reply"));
            }
            *pos = end + 2;
            Ok(Value::Bulk(Some(data)))
        }
        b'*' => {
            let n = int(head)?;
            if n == -1 {
                return Ok(Value::Array(None));
            }
            let n = usize::try_from(n)
                .ok()
                .filter(|n| *n <= MAX_ELEMENTS)
                .ok_or(StoreError::Malformed("array length out of range"))?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(value(input, pos, depth + 1)?);
            }
            Ok(Value::Array(Some(items)))
        }
        _ => Err(StoreError::Malformed("unknown reply type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::call::{DecisionCall, LimitCall, Op};
    use crate::decision::Decision;
    use crate::model::LimitSpec;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn commands_are_one_array_of_bulk_strings() {
        assert_eq!(command(&["GET", "k{x}"]), b"*2\r\n$3\r\nGET\r\n$4\r\nk{x}\r\n".to_vec());
        let call = one_limit();
        let cmd = String::from_utf8(evalsha(&call)).unwrap();
        assert!(
            cmd.starts_with(&format!(
                "*16\r\n$7\r\nEVALSHA\r\n$40\r\n{}\r\n$1\r\n1\r\n$18\r\nrl:{{a}}:r:fw:1000:5\r\n",
                sha1_hex()
            )),
            "{cmd}"
        );
        assert!(String::from_utf8(eval(&call)).unwrap().starts_with("*16\r\n$4\r\nEVAL\r\n"));
    }

    /// One fixed window of 5 per second, used once by "a".
    fn one_limit() -> ScriptCall {
        let spec = LimitSpec { algorithm: Algorithm::FixedWindow, limit: 5, window_ms: 1000, burst: 5 };
        let limits = [LimitCall { rule: "r", spec, op: Op::Use(1), offset_ms: None }];
        ScriptCall::new("rl", 5000, &[DecisionCall { identity: "a", limits: &limits }])
    }

    #[test]
    #[wasm_bindgen_test]
    fn decisions_and_error_replies_decode() {
        let d = decode_decision(b"*4\r\n:1\r\n:4\r\n:1000\r\n:0\r\n", &one_limit()).unwrap();
        assert_eq!(
            d,
            Reply::Decisions(vec![Decision { allowed: true, remaining: 4, reset_ms: 1000, retry_after_ms: Some(0) }])
        );
        assert_eq!(decode_decision(b"-NOSCRIPT No matching script.\r\n", &one_limit()), Ok(Reply::NoScript));
        assert_eq!(decode_decision(b"-NOAUTH Authentication required.\r\n", &one_limit()), Ok(Reply::NoAuth));
        assert_eq!(
            decode_decision(b"-ERR ratelimit: x\r\n", &one_limit()),
            Err(StoreError::Redis("ERR ratelimit: x".into()))
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn malformed_replies_are_errors_not_traps() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "truncated reply"),
            (b"*4\r\n:1\r\n:4\r\n", "truncated reply"),
            (b"*4\r\n:1\r\n:4\r\n:1000\r\n:0", "truncated reply"),
            (b"*999999999\r\n", "array length out of range"),
            (b"*-7\r\n", "array length out of range"),
            (b"$99999999999\r\n", "bulk length out of range"),
            (b"$5\r\nab\r\n", "truncated reply"),
            (b"*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "reply nested too deep"),
            (b"*4\r\n:1\r\n$1\r\n4\r\n:0\r\n:0\r\n", "non-integer in the decision"),
            (b":x\r\n", "bad integer in the reply"),
            (b"?\r\n", "unknown reply type"),
            (b"+OK\r\n", "the decision is not an array"),
            (b"*4\r\n:1\r\n:4\r\n:0\r\n:0\r\nextra", "bytes after the reply"),
            (b"*4\r\n:3\r\n:4\r\n:0\r\n:0\r\n", "impossible decision values"),
            (b"*3\r\n:1\r\n:4\r\n:0\r\n", "wrong number of values for the limits asked"),
        ];
        for (input, want) in cases {
            assert_eq!(
                decode_decision(input, &one_limit()),
                Err(StoreError::Malformed(want)),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }
}
