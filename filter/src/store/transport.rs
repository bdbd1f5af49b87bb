//! One interface over the two transports: what a call puts on the wire,
//! how large an answer may be (decided before reading it), and how the
//! answer decodes. The hostcalls themselves are the glue's.

use super::flow::{Message, Stage};
use super::{resp, webdis, Reply, StoreError};
use crate::store::script_call::ScriptCall;

/// How the filter reaches Redis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// HTTP calls to a webdis gateway (stock Envoy).
    Webdis,
    /// The Redis-call hostcalls of Higress-built Envoy (`ratelimit-redis.wasm`).
    Redis,
}

/// What goes on the wire for one store call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wire {
    /// webdis: an HTTP request through `dispatch_http_call`.
    Http {
        /// POST, PUT or GET.
        method: &'static str,
        /// The path.
        path: &'static str,
        /// The body.
        body: Vec<u8>,
    },
    /// redis: one RESP2 command through `proxy_redis_call`.
    Resp(Vec<u8>),
}

/// What came back for one store call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// webdis: the HTTP status (if the host gave a readable one) and body.
    Http {
        /// `:status`.
        status: Option<u32>,
        /// The body.
        body: Vec<u8>,
    },
    /// redis: the raw RESP reply.
    Resp(Vec<u8>),
    /// The host reported a failure, or the answer could not be read.
    Failed(StoreError),
}

/// The longest INFO reply read.
const MAX_INFO_BYTES: usize = 64 * 1024;

/// The largest answer worth reading for a call expecting `expected`
/// integers: each at most 20 digits and a separator, plus the envelope or
/// an error message. A failed decision's text (`script_call::ERROR_TEXT` bytes at
/// most) and the zeros after it fit in the room of its four integers. A
/// larger answer is a store error without being read.
pub fn max_answer_bytes(expected: usize) -> usize {
    expected.saturating_mul(22).saturating_add(1024)
}

/// The largest INFO answer read.
pub fn max_info_bytes() -> usize {
    MAX_INFO_BYTES
}

/// The request for `message` of `call`; `None` when this transport has no
/// such step (it would be a bug in the call's state machine).
pub fn encode(transport: Transport, message: Message, call: &ScriptCall) -> Option<Wire> {
    match (transport, message) {
        (Transport::Webdis, Message::Evalsha) => Some(webdis_wire(webdis::evalsha(call))),
        (Transport::Webdis, Message::LoadScript) => Some(webdis_wire(webdis::script_load())),
        (Transport::Redis, Message::Evalsha) => Some(Wire::Resp(resp::evalsha(call))),
        (Transport::Redis, Message::Eval) => Some(Wire::Resp(resp::eval(call))),
        _ => None,
    }
}

/// The request for the store's INFO.
pub fn info(transport: Transport) -> Wire {
    match transport {
        Transport::Webdis => webdis_wire(webdis::info()),
        Transport::Redis => Wire::Resp(resp::command(&["INFO"])),
    }
}

/// The request for the index of overrides, the set `key` (`SMEMBERS`).
pub fn members(transport: Transport, key: &str) -> Wire {
    match transport {
        Transport::Webdis => webdis_wire(webdis::smembers(key)),
        Transport::Redis => Wire::Resp(resp::command(&["SMEMBERS", key])),
    }
}

fn webdis_wire(r: webdis::WebdisRequest) -> Wire {
    Wire::Http { method: r.method, path: r.path, body: r.body }
}

/// Decodes the answer to a call in `stage` expecting at most `expected` values.
pub fn decode(stage: Stage, answer: Answer, expected: usize) -> Result<Reply, StoreError> {
    match answer {
        Answer::Failed(e) => Err(e),
        Answer::Http { status, body } if stage == Stage::Loading => webdis::decode_script_load(status, &body),
        Answer::Http { status, body } => webdis::decode_evalsha(status, &body, expected),
        Answer::Resp(bytes) => resp::decode_decision(&bytes, expected),
    }
}

/// Decodes the answer to INFO.
pub fn decode_info(answer: Answer) -> Result<String, StoreError> {
    match answer {
        Answer::Failed(e) => Err(e),
        Answer::Http { status, body } => webdis::decode_info(status, &body),
        Answer::Resp(bytes) => resp::decode_info(&bytes),
    }
}

/// Decodes the answer to `members`.
pub fn decode_members(answer: Answer) -> Result<Vec<String>, StoreError> {
    match answer {
        Answer::Failed(e) => Err(e),
        Answer::Http { status, body } => webdis::decode_members(status, &body),
        Answer::Resp(bytes) => resp::decode_members(&bytes),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::script_call::ERROR_TEXT;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn a_reply_whose_every_decision_failed_fits_the_answer_bound() {
        let text = "W".repeat(ERROR_TEXT);
        for decisions in [1, 16, 256] {
            // One limit each (the least room): the text, then three zeros.
            let mut resp = format!("*{}\r\n", decisions * 4);
            let mut json = String::from(r#"{"EVALSHA":["#);
            for d in 0..decisions {
                resp.push_str(&format!("${ERROR_TEXT}\r\n{text}\r\n:0\r\n:0\r\n:0\r\n"));
                json.push_str(&format!(r#"{}"{text}",0,0,0"#, if d > 0 { "," } else { "" }));
            }
            json.push_str("]}");
            let bound = max_answer_bytes(decisions * 4);
            assert!(resp.len() <= bound && json.len() <= bound, "{decisions}: {} {} > {bound}", resp.len(), json.len());
        }
    }
}
