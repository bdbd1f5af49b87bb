//! webdis: Redis commands over HTTP (stock Envoy's `dispatch_http_call`).
//!
//! EVALSHA goes as `POST /` with the body `EVALSHA/<sha>/<n>/<keys>/<args>`,
//! every argument percent-encoded; the last argument is always a number, so
//! webdis's output-format suffixes (`.json`, `.txt`) can never be triggered.
//! webdis 0.1.9 stalls on POST bodies beyond about 4 KB, so the script is
//! loaded with `PUT /SCRIPT/LOAD` (the raw body becomes the argument) and
//! configurations whose worst-case call would exceed the bound are refused.
//! Redis errors arrive as HTTP 200 with `[false, "<message>"]`. With
//! `store.username` and `store.password` every call carries them as HTTP
//! basic auth, which webdis's ACL compares with its `http_basic_auth`.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::{redis_error, Reply, StoreError};
use crate::json::{self, Value};
use crate::percent::encode_into;
use crate::script::sha1_hex;
use crate::secret::Secret;
use crate::spec::LimitSpec;
use crate::store::override_index::MAX_MEMBERS;
use crate::store::script_call::{ScriptCall, ScriptReply};

/// The largest EVALSHA body webdis reliably takes.
pub const MAX_BODY: usize = 4000;

/// An HTTP request to webdis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WebdisRequest {
    /// POST or PUT.
    pub method: &'static str,
    /// The path.
    pub path: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

/// The EVALSHA request for `call`.
pub fn evalsha(call: &ScriptCall) -> WebdisRequest {
    let mut body =
        String::with_capacity(64 + call.keys.iter().map(|k| k.len() + 8).sum::<usize>() + call.args.len() * 8);
    body.push_str("EVALSHA/");
    body.push_str(sha1_hex());
    body.push('/');
    body.push_str(&call.keys.len().to_string());
    for part in call.keys.iter().chain(call.args.iter()) {
        body.push('/');
        encode_into(&mut body, part);
    }
    WebdisRequest { method: "POST", path: "/", body: body.into_bytes() }
}

/// The request that loads the script into Redis's cache.
pub fn script_load() -> WebdisRequest {
    WebdisRequest { method: "PUT", path: "/SCRIPT/LOAD", body: crate::script::SCRIPT.as_bytes().to_vec() }
}

/// The same command as a `GET` whose path carries it all: for a host that
/// writes a request's body apart from its headers (NGINX's
/// ngx_wasm_module), which webdis 0.1.9 never answers. `POST /` with the
/// body `CMD/arg/...` becomes `/CMD/arg/...` (its arguments are
/// percent-encoded already); `PUT /SCRIPT/LOAD` with a raw body becomes
/// `/SCRIPT/LOAD/<the body percent-encoded>`.
pub fn get_path(method: &str, path: &str, body: &[u8]) -> String {
    let mut out = String::with_capacity(path.len() + body.len() * 3 + 1);
    match method {
        "POST" => {
            out.push('/');
            out.push_str(&String::from_utf8_lossy(body));
        }
        "PUT" => {
            out.push_str(path);
            out.push('/');
            crate::percent::encode_bytes_into(&mut out, body);
        }
        _ => out.push_str(path),
    }
    out
}

/// The request for the store's `INFO` (memory, evictions, policy).
pub fn info() -> WebdisRequest {
    WebdisRequest { method: "GET", path: "/INFO", body: Vec::new() }
}

/// The request for the members of the set `key` (`SMEMBERS`: the index
/// of overrides). Its one argument is a key ending in letters, never an
/// output-format suffix.
pub fn smembers(key: &str) -> WebdisRequest {
    let mut body = String::from("SMEMBERS/");
    encode_into(&mut body, key);
    WebdisRequest { method: "POST", path: "/", body: body.into_bytes() }
}

/// The `Authorization` value for webdis's ACL: `Basic ` and the base64 of
/// `username:password` (padded, one line: webdis compares the text as is);
/// `None` without a credential.
pub fn authorization(username: &str, password: &Secret) -> Option<Secret> {
    if username.is_empty() && password.is_empty() {
        return None;
    }
    let mut value = String::from("Basic ");
    STANDARD.encode_string(format!("{username}:{}", password.expose()), &mut value);
    Some(Secret::new(value))
}

/// The header list of one webdis call.
pub fn headers<'a>(
    method: &'a str,
    path: &'a str,
    authority: &'a str,
    authorization: Option<&'a Secret>,
) -> Vec<(&'a str, &'a str)> {
    let mut headers = vec![(":method", method), (":path", path), (":authority", authority)];
    if let Some(value) = authorization {
        headers.push(("authorization", value.expose()));
    }
    headers
}

/// The `INFO` text from webdis's reply. webdis parses INFO into an object
/// of field to value (a section title ends up inside the key of its first
/// field); this turns it back into `field:value` lines.
pub fn decode_info(status: Option<u32>, body: &[u8]) -> Result<String, StoreError> {
    match decode(status, body, "INFO")? {
        Value::String(text) => Ok(text),
        Value::Object(fields) => {
            Ok(fields.iter().filter_map(|(k, v)| v.as_str().map(|v| format!("{k}:{v}\n"))).collect())
        }
        _ => Err(StoreError::Malformed("INFO reply")),
    }
}

/// The members from webdis's reply to `SMEMBERS` (JSON strings: UTF-8).
pub fn decode_members(status: Option<u32>, body: &[u8]) -> Result<Vec<String>, StoreError> {
    match decode(status, body, "SMEMBERS")? {
        Value::Array(items) => match items.first() {
            Some(Value::Bool(false)) => Err(redis_error(items.get(1).and_then(Value::as_str).unwrap_or(""))),
            _ if items.len() > MAX_MEMBERS => Err(StoreError::Malformed("too many members")),
            _ => {
                let mut members = Vec::with_capacity(items.len());
                for item in items {
                    match item {
                        Value::String(m) => members.push(m),
                        _ => return Err(StoreError::Malformed("a member is not a string")),
                    }
                }
                Ok(members)
            }
        },
        _ => Err(StoreError::Malformed("SMEMBERS reply")),
    }
}

/// Decodes the reply to an EVALSHA that holds at most `expected` values.
pub fn decode_evalsha(status: Option<u32>, body: &[u8], expected: usize) -> Result<Reply, StoreError> {
    match decode(status, body, "EVALSHA")? {
        Value::Array(items) => match items.first() {
            Some(Value::Bool(false)) => {
                let msg = items.get(1).and_then(Value::as_str).unwrap_or("");
                if msg.starts_with("NOSCRIPT") {
                    Ok(Reply::NoScript)
                } else {
                    Err(redis_error(msg))
                }
            }
            // At most `expected` (a decision reading overrides may say no more than its state).
            _ if items.len() > expected => Err(StoreError::Malformed("wrong number of values for the limits asked")),
            _ => {
                // Integers, and the texts of decisions that failed inside Redis.
                let mut reply = ScriptReply::with_capacity(items.len());
                for item in &items {
                    match (item.as_i64(), item.as_str()) {
                        (Some(i), _) => reply.push_int(i),
                        (None, Some(text)) => reply.push_text(text.to_string()),
                        (None, None) => return Err(StoreError::Malformed("non-integer in the decision")),
                    }
                }
                Ok(Reply::Values(reply))
            }
        },
        _ => Err(StoreError::Malformed("the decision is not an array")),
    }
}

/// Checks the reply to `script_load`: the store must name the same SHA-1.
pub fn decode_script_load(status: Option<u32>, body: &[u8]) -> Result<Reply, StoreError> {
    match decode(status, body, "SCRIPT")? {
        Value::String(sha) if sha == sha1_hex() => Ok(Reply::Loaded),
        Value::String(_) => Err(StoreError::Malformed("the store hashed the script differently")),
        Value::Array(items) => Err(redis_error(items.get(1).and_then(Value::as_str).unwrap_or(""))),
        _ => Err(StoreError::Malformed("SCRIPT LOAD reply")),
    }
}

fn decode(status: Option<u32>, body: &[u8], command: &str) -> Result<Value, StoreError> {
    match status {
        Some(200) => {}
        Some(s) => return Err(StoreError::Status(s)),
        None => return Err(StoreError::Malformed("no :status")),
    }
    let doc = json::parse(body).map_err(|_| StoreError::Malformed("not JSON"))?;
    match doc {
        Value::Object(members) => members
            .into_iter()
            .find(|(k, _)| k == command)
            .map(|(_, v)| v)
            .ok_or(StoreError::Malformed("reply names another command")),
        _ => Err(StoreError::Malformed("reply names another command")),
    }
}

/// An upper bound of the bytes one decision adds to an EVALSHA body:
/// its keys percent-encoded (`{`, `}` and `:` take three bytes; the
/// identity is already escaped to unreserved bytes), its shape index, and
/// its shape and a spec-table entry for each of its limits (the batch may
/// be the first to do that, or use that spec); with `overrides`, an
/// override key and a run in its shape's text for each rule.
pub fn decision_size(domain: &str, identity: &str, limits: &[(&str, LimitSpec)], overrides: bool) -> usize {
    // Per key: braces and 4 colons encoded, a code, a window and an index of up to 20 digits each.
    const KEY_EXTRA: usize = 6 * 3 + 2 + 20 + 20 + 2;
    // Per limit: spec index, op, amount, offset and their slashes; a spec entry.
    const LIMIT_ARGS: usize = 4 + 3 + 1 + 20 + 20 + 4 * 20;
    let key = domain.len() + identity.len() + KEY_EXTRA;
    // Its shape's index and limit count, with their slashes.
    let mut size = 8;
    let mut previous = None;
    for (rule, spec) in limits {
        let keys = if spec.algorithm == crate::algorithm::Algorithm::SlidingWindow { 2 } else { 1 };
        size += keys * (key + rule.len()) + LIMIT_ARGS;
        // A rule's run: its override key, and a count of up to 3 digits with its comma.
        if overrides && previous != Some(*rule) {
            size += key + rule.len() + 4;
        }
        previous = Some(*rule);
    }
    size
}

/// Bytes of an EVALSHA body before its decisions: the command, the SHA-1,
/// the key count, now and the counts (specs, shapes, decisions).
pub const BODY_HEAD: usize = 8 + 40 + 5 * 21;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::keys::MAX_IDENTITY;
    use crate::spec::{DecisionCall, LimitCall, Op};
    use crate::time::Instant;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn call() -> ScriptCall {
        let spec = LimitSpec { algorithm: Algorithm::FixedWindow, limit: 5, window_ms: 1000, burst: 5 };
        let limits = [LimitCall { rule: "api", spec, op: Op::Use(1), offset_ms: None }];
        ScriptCall::new("rl", Instant::from_ms(5_000), &[DecisionCall { identity: "1.2.3.4", limits: &limits }])
    }

    #[test]
    #[wasm_bindgen_test]
    fn evalsha_body_encodes_keys_and_ends_with_a_number() {
        let req = evalsha(&call());
        let body = String::from_utf8(req.body).unwrap();
        assert_eq!(
            body,
            format!(
                "EVALSHA/{}/1/rl%3A%7B1.2.3.4%7D%3Aapi%3Afw%3A1000%3A5/5000/1/fw/5/1000/5/1/1/1/u/1/0/1/1",
                sha1_hex()
            )
        );
        assert_eq!((req.method, req.path), ("POST", "/"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_credential_goes_as_basic_auth_on_every_call() {
        // RFC 7617's example: Aladdin / open sesame.
        let value = authorization("Aladdin", &Secret::new("open sesame")).unwrap();
        assert_eq!(value.expose(), "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==");
        // Non-ASCII is sent as its UTF-8 bytes, padded.
        let value = authorization("ratelimit", &Secret::new("pässwörd")).unwrap();
        assert_eq!(value.expose(), "Basic cmF0ZWxpbWl0OnDDpHNzd8O2cmQ=");
        assert_eq!(authorization("", &Secret::default()), None);
        assert_eq!(format!("{value:?}"), "Secret(redacted)");
        assert_eq!(
            headers("POST", "/", "webdis", Some(&value)),
            [
                (":method", "POST"),
                (":path", "/"),
                (":authority", "webdis"),
                ("authorization", "Basic cmF0ZWxpbWl0OnDDpHNzd8O2cmQ="),
            ]
        );
        assert_eq!(
            headers("GET", "/INFO", "webdis", None),
            [(":method", "GET"), (":path", "/INFO"), (":authority", "webdis")]
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn decisions_noscript_and_errors_are_told_apart() {
        let ok = decode_evalsha(Some(200), br#"{"EVALSHA":[1,4,1000,0]}"#, 4).unwrap();
        assert_eq!(ok, Reply::Values(vec![1, 4, 1000, 0].into()));
        // A decision that failed inside Redis: its text, as the script sent it.
        let failed = decode_evalsha(Some(200), br#"{"EVALSHA":["WRONGTYPE x",0,0,0]}"#, 4).unwrap();
        let mut want = ScriptReply::default();
        want.push_text("WRONGTYPE x".into());
        [0, 0, 0].iter().for_each(|&v| want.push_int(v));
        assert_eq!(failed, Reply::Values(want));
        let noscript = br#"{"EVALSHA":[false,"NOSCRIPT No matching script. Please use EVAL."]}"#;
        assert_eq!(decode_evalsha(Some(200), noscript, 4), Ok(Reply::NoScript));
        let err = br#"{"EVALSHA":[false,"ERR ratelimit: limit 1: cost must be a positive integer"]}"#;
        assert_eq!(
            decode_evalsha(Some(200), err, 4),
            Err(StoreError::Redis("ERR ratelimit: limit 1: cost must be a positive integer".into()))
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn statuses_and_garbage_are_store_errors() {
        assert_eq!(decode_evalsha(Some(503), b"upstream connect error", 4), Err(StoreError::Status(503)));
        assert_eq!(decode_evalsha(Some(504), b"upstream request timeout", 4), Err(StoreError::Status(504)));
        assert_eq!(decode_evalsha(None, b"", 4), Err(StoreError::Malformed("no :status")));
        assert_eq!(decode_evalsha(Some(200), b"{\"EVALSHA\":[1,4", 1), Err(StoreError::Malformed("not JSON")));
        assert_eq!(
            decode_evalsha(Some(200), br#"{"GET":[1,4,0,0]}"#, 4),
            Err(StoreError::Malformed("reply names another command"))
        );
        // More than the call can hear; fewer (a decision reading overrides
        // says its limits only when one applied) are `ScriptCall::decode`'s to judge.
        assert_eq!(
            decode_evalsha(Some(200), br#"{"EVALSHA":[1,4,0,0,0]}"#, 4),
            Err(StoreError::Malformed("wrong number of values for the limits asked"))
        );
        assert_eq!(
            decode_evalsha(Some(200), br#"{"EVALSHA":[1,null,0,0]}"#, 4),
            Err(StoreError::Malformed("non-integer in the decision"))
        );
        assert_eq!(
            decode_evalsha(Some(200), br#"{"EVALSHA":[1,[4],0,0]}"#, 4),
            Err(StoreError::Malformed("non-integer in the decision"))
        );
        assert_eq!(
            decode_evalsha(Some(200), br#"{"EVALSHA":"OK"}"#, 4),
            Err(StoreError::Malformed("the decision is not an array"))
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn info_comes_back_as_webdis_object_of_fields() {
        let body = br##"{"INFO":{"# Server\r\nredis_version":"7.0.15","# Memory\r\nused_memory":"1024","maxmemory_policy":"allkeys-lru","evicted_keys":"3"}}"##;
        let text = decode_info(Some(200), body).unwrap();
        let stats = crate::store::stats::StoreStats::parse(&text).unwrap();
        assert_eq!((stats.used_memory, stats.evicted_keys, stats.policy.as_str()), (1024, 3, "allkeys-lru"));
    }

    #[test]
    #[wasm_bindgen_test]
    fn script_load_must_name_our_sha() {
        let ok = format!("{{\"SCRIPT\":\"{}\"}}", sha1_hex());
        assert_eq!(decode_script_load(Some(200), ok.as_bytes()), Ok(Reply::Loaded));
        assert_eq!(
            decode_script_load(Some(200), br#"{"SCRIPT":"0000"}"#),
            Err(StoreError::Malformed("the store hashed the script differently"))
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn decision_size_bounds_the_real_body() {
        let specs = [
            LimitSpec {
                algorithm: Algorithm::SlidingWindow,
                limit: 9_007_199,
                window_ms: 999_999_999,
                burst: 9_007_199,
            },
            LimitSpec { algorithm: Algorithm::FixedWindow, limit: 1, window_ms: 86_400_000, burst: 1 },
        ];
        let identity = "x".repeat(MAX_IDENTITY);
        let limits: Vec<LimitCall> = specs
            .iter()
            .map(|&spec| LimitCall {
                rule: "a-long-rule-name",
                spec,
                op: Op::Charge(1_000_000_000),
                offset_ms: Some(86_399_999),
            })
            .collect();
        let decision = DecisionCall { identity: &identity, limits: &limits };
        let now = 9_999_999_999_999;
        let one = evalsha(&ScriptCall::new("domain.x", Instant::from_ms(now), &[decision])).body.len();
        let bound: Vec<(&str, LimitSpec)> = specs.iter().map(|s| ("a-long-rule-name", *s)).collect();
        let size = decision_size("domain.x", &identity, &bound, false);
        assert!(one <= BODY_HEAD + size, "{one}");
        // Reading overrides: an override key per rule, here two.
        let two_rules: Vec<LimitCall> = limits
            .iter()
            .zip(["a-long-rule-name", "b-long-rule-name"])
            .map(|(l, rule)| LimitCall { rule, ..*l })
            .collect();
        let decision = DecisionCall { identity: &identity, limits: &two_rules };
        let read = evalsha(&ScriptCall::with_overrides("domain.x", Instant::from_ms(now), &[decision], true)).body;
        let bound: Vec<(&str, LimitSpec)> = two_rules.iter().map(|l| (l.rule, l.spec)).collect();
        let size_read = decision_size("domain.x", &identity, &bound, true);
        assert!(read.len() <= BODY_HEAD + size_read, "{}", read.len());
        assert!(read.len() > one + 2 * identity.len(), "two override keys more");
        // Many decisions, each of its own shape (a charge of its own amount).
        let mut charges: Vec<Vec<LimitCall>> = Vec::new();
        for i in 0..300 {
            charges.push(limits.iter().map(|l| LimitCall { op: Op::Charge(1_000_000_000 + i), ..*l }).collect());
        }
        let batch: Vec<DecisionCall> =
            charges.iter().map(|c| DecisionCall { identity: &identity, limits: c }).collect();
        let many = evalsha(&ScriptCall::new("domain.x", Instant::from_ms(now), &batch)).body.len();
        assert!(many <= BODY_HEAD + 300 * size, "{many}");
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_command_rides_in_the_path_of_a_get_when_the_body_cannot() {
        let r = evalsha(&call());
        assert_eq!(get_path(r.method, r.path, &r.body), format!("/{}", String::from_utf8(r.body.clone()).unwrap()));
        let load = script_load();
        let path = get_path(load.method, load.path, &load.body);
        assert!(path.starts_with("/SCRIPT/LOAD/"));
        // Every byte of the script but the unreserved ones escaped: no '/'
        // splits it, and its last segment ends in no '.json'-like suffix.
        let tail = &path["/SCRIPT/LOAD/".len()..];
        assert!(!tail.contains('/') && !tail.contains(' '));
        assert_eq!(crate::percent::decode(tail.as_bytes(), false), crate::script::SCRIPT.as_bytes());
        assert!(!tail.rsplit('%').next().unwrap_or("").contains('.'), "{}", &tail[tail.len() - 20..]);
        assert_eq!(get_path("GET", "/INFO", b""), "/INFO");
    }
}
