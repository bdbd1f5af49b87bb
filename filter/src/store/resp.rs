//! RESP2, the Redis wire protocol, for the Redis-call transport: one command
//! out, one reply in. Decoding is bounded (depth, element count, bulk size)
//! and total: truncated, oversized or wrongly typed input is an error,
//! never a trap.

use super::{redis_error, Reply, StoreError};
use crate::script::{sha1_hex, SCRIPT};
use crate::store::override_index::{members_of, MAX_MEMBERS};
use crate::store::script_call::{ScriptCall, ScriptReply};

/// Longest bulk string accepted (INFO is the longest reply, a few KB).
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
    match decode(input, 0)? {
        Value::Bulk(Some(text)) => Ok(String::from_utf8_lossy(&text).into_owned()),
        Value::Error(e) => Err(redis_error(&e)),
        _ => Err(StoreError::Malformed("INFO reply")),
    }
}

/// The members from a RESP reply to `SMEMBERS`, at most `MAX_MEMBERS`
/// (a longer array is refused before it is read).
pub fn decode_members(input: &[u8]) -> Result<Vec<String>, StoreError> {
    match decode(input, MAX_MEMBERS)? {
        Value::Array(Some(items)) => {
            let mut members = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::Bulk(Some(m)) => members.push(m),
                    _ => return Err(StoreError::Malformed("a member is not a string")),
                }
            }
            Ok(members_of(members))
        }
        Value::Error(e) => Err(redis_error(&e)),
        _ => Err(StoreError::Malformed("SMEMBERS reply")),
    }
}

/// Decodes exactly one value filling all of `input`; arrays hold at most
/// `max_elements` values.
pub fn decode(input: &[u8], max_elements: usize) -> Result<Value, StoreError> {
    let mut pos = 0;
    let v = value(input, &mut pos, 0, max_elements)?;
    if pos != input.len() {
        return Err(StoreError::Malformed("bytes after the reply"));
    }
    Ok(v)
}

/// Decodes the reply to EVALSHA or EVAL that holds at most `expected`
/// values (a longer array is refused before it is read): integers, and
/// the texts of decisions that failed inside Redis (bulk strings).
pub fn decode_decision(input: &[u8], expected: usize) -> Result<Reply, StoreError> {
    match decode(input, expected)? {
        Value::Array(Some(items)) => {
            let mut reply = ScriptReply::with_capacity(items.len());
            for item in items {
                match item {
                    Value::Int(i) => reply.push_int(i),
                    Value::Bulk(Some(text)) => reply.push_text(String::from_utf8_lossy(&text).into_owned()),
                    _ => return Err(StoreError::Malformed("non-integer in the decision")),
                }
            }
            Ok(Reply::Values(reply))
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

fn value(input: &[u8], pos: &mut usize, depth: usize, max_elements: usize) -> Result<Value, StoreError> {
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
                .filter(|n| *n <= max_elements)
                .ok_or(StoreError::Malformed("array length out of range"))?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(value(input, pos, depth + 1, max_elements)?);
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
    use crate::spec::LimitSpec;
    use crate::spec::{DecisionCall, LimitCall, Op};
    use crate::time::Instant;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn commands_are_one_array_of_bulk_strings() {
        assert_eq!(command(&["GET", "k{x}"]), b"*2\r\n$3\r\nGET\r\n$4\r\nk{x}\r\n".to_vec());
        let spec = LimitSpec { algorithm: Algorithm::FixedWindow, limit: 5, window_ms: 1000, burst: 5 };
        let limits = [LimitCall { rule: "r", spec, op: Op::Use(1), offset_ms: None }];
        let call = ScriptCall::new("rl", Instant::from_ms(5000), &[DecisionCall { identity: "a", limits: &limits }]);
        let cmd = String::from_utf8(evalsha(&call)).unwrap();
        assert!(
            cmd.starts_with(&format!(
                "*{}\r\n$7\r\nEVALSHA\r\n$40\r\n{}\r\n$1\r\n1\r\n$18\r\nrl:{{a}}:r:fw:1000:5\r\n",
                3 + call.keys.len() + call.args.len(),
                sha1_hex()
            )),
            "{cmd}"
        );
        assert!(String::from_utf8(eval(&call))
            .unwrap()
            .starts_with(&format!("*{}\r\n$4\r\nEVAL\r\n", 3 + call.keys.len() + call.args.len())));
    }

    #[test]
    #[wasm_bindgen_test]
    fn integers_and_error_replies_decode() {
        assert_eq!(
            decode_decision(b"*4\r\n:1\r\n:4\r\n:1000\r\n:0\r\n", 4),
            Ok(Reply::Values(vec![1, 4, 1000, 0].into()))
        );
        // A decision that failed inside Redis: its text, as the script sent it.
        let mut failed = ScriptReply::default();
        failed.push_text("WRONGTYPE x".into());
        [0, 0, 0].iter().for_each(|&v| failed.push_int(v));
        assert_eq!(decode_decision(b"*4\r\n$11\r\nWRONGTYPE x\r\n:0\r\n:0\r\n:0\r\n", 4), Ok(Reply::Values(failed)));
        assert_eq!(decode_decision(b"-NOSCRIPT No matching script.\r\n", 4), Ok(Reply::NoScript));
        assert_eq!(decode_decision(b"-NOAUTH Authentication required.\r\n", 4), Ok(Reply::NoAuth));
        assert_eq!(decode_decision(b"-ERR ratelimit: x\r\n", 4), Err(StoreError::Redis("ERR ratelimit: x".into())));
    }

    #[test]
    #[wasm_bindgen_test]
    fn malformed_replies_are_errors_not_traps() {
        let cases: &[(&[u8], &str)] = &[
            (b"", "truncated reply"),
            (b"*4\r\n:1\r\n:4\r\n", "truncated reply"),
            (b"*4\r\n:1\r\n:4\r\n:1000\r\n:0", "truncated reply"),
            (b"*5\r\n", "array length out of range"),
            (b"*999999999\r\n", "array length out of range"),
            (b"*-7\r\n", "array length out of range"),
            (b"$99999999999\r\n", "bulk length out of range"),
            (b"$5\r\nab\r\n", "truncated reply"),
            (b"*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "reply nested too deep"),
            (b"*4\r\n:1\r\n$-1\r\n:0\r\n:0\r\n", "non-integer in the decision"),
            (b"*4\r\n:1\r\n*1\r\n:4\r\n:0\r\n:0\r\n", "non-integer in the decision"),
            (b"*4\r\n:1\r\n+OK\r\n:0\r\n:0\r\n", "non-integer in the decision"),
            (b":x\r\n", "bad integer in the reply"),
            (b"?\r\n", "unknown reply type"),
            (b"+OK\r\n", "the decision is not an array"),
            (b"*4\r\n:1\r\n:4\r\n:0\r\n:0\r\nextra", "bytes after the reply"),
        ];
        for (input, want) in cases {
            assert_eq!(
                decode_decision(input, 4),
                Err(StoreError::Malformed(want)),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    #[wasm_bindgen_test]
    fn index_members_decode_and_hostile_replies_are_errors() {
        assert_eq!(decode_members(b"*0\r\n"), Ok(vec![]));
        assert_eq!(
            decode_members(b"*3\r\n$3\r\nd:a\r\n$3\r\n\xff\xfex\r\n$0\r\n\r\n"),
            Ok(vec!["d:a".to_string(), String::new()]),
            "a member that is not UTF-8 is no key the filter reads"
        );
        let cases: &[(&[u8], StoreError)] = &[
            (b"$3\r\nabc\r\n", StoreError::Malformed("SMEMBERS reply")),
            (b"*-1\r\n", StoreError::Malformed("SMEMBERS reply")),
            (b"*1\r\n:1\r\n", StoreError::Malformed("a member is not a string")),
            (b"*1\r\n$-1\r\n", StoreError::Malformed("a member is not a string")),
            (b"*1\r\n*0\r\n", StoreError::Malformed("a member is not a string")),
            (b"*10001\r\n", StoreError::Malformed("array length out of range")),
            (b"*2\r\n$1\r\na\r\n", StoreError::Malformed("truncated reply")),
            (b"-NOPERM no\r\n", StoreError::Redis("NOPERM no".into())),
        ];
        for (input, want) in cases {
            assert_eq!(&decode_members(input), &Err(want.clone()), "{:?}", String::from_utf8_lossy(input));
        }
        let mut many = format!("*{MAX_MEMBERS}\r\n").into_bytes();
        (0..MAX_MEMBERS)
            .for_each(|i| many.extend_from_slice(format!("${}\r\n{i}\r\n", i.to_string().len()).as_bytes()));
        assert_eq!(decode_members(&many).map(|m| m.len()), Ok(MAX_MEMBERS));
    }
}
