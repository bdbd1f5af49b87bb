use super::*;
use wasm_bindgen_test::wasm_bindgen_test;

use BodyFormat::{EventStream, Json};

fn fields(spec: &[&str]) -> UsageFields {
    UsageFields::parse(spec).unwrap()
}

/// The usage of `body` fed in pieces of `size` bytes.
fn read_in(spec: &[&str], format: BodyFormat, body: &[u8], size: usize) -> Usage {
    let mut reader = UsageReader::new(&fields(spec), format, u64::MAX);
    for piece in body.chunks(size.max(1)) {
        reader.feed(piece);
    }
    reader.finish()
}

fn read(spec: &[&str], format: BodyFormat, body: &str) -> Usage {
    read_in(spec, format, body.as_bytes(), body.len())
}

/// The same result whole, split in two at every position, and byte by byte.
fn assert_any_chunking(spec: &[&str], format: BodyFormat, body: &str, expected: Usage) {
    let body = body.as_bytes();
    assert_eq!(read_in(spec, format, body, body.len()), expected, "whole");
    assert_eq!(read_in(spec, format, body, 1), expected, "byte by byte");
    for at in 0..=body.len() {
        let mut reader = UsageReader::new(&fields(spec), format, u64::MAX);
        reader.feed(&body[..at]);
        reader.feed(&body[at..]);
        assert_eq!(reader.finish(), expected, "split at {at}");
    }
}

const OPENAI_CHAT: &str = r#"{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "gpt-4.1-2025-04-14",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "Hello! How can I assist you today? \"usage\": {\"total_tokens\": 999}",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 19,
    "completion_tokens": 10,
    "total_tokens": 29,
    "prompt_tokens_details": { "cached_tokens": 0, "audio_tokens": 0 },
    "completion_tokens_details": { "reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0 }
  },
  "service_tier": "default"
}"#;

const OPENAI_RESPONSES: &str = r#"{"id":"resp_67ccd2bed1ec8190b14f964abc054267","object":"response","created_at":1741476542,"status":"completed","error":null,"model":"gpt-4.1-2025-04-14","output":[{"type":"message","id":"msg_67ccd2bf17f0819081ff3bb2cf6508e6","status":"completed","role":"assistant","content":[{"type":"output_text","text":"In a peaceful grove beneath a silver moon...","annotations":[]}]}],"parallel_tool_calls":true,"reasoning":{"effort":null,"summary":null},"store":true,"temperature":1.0,"tool_choice":"auto","tools":[],"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":36,"input_tokens_details":{"cached_tokens":0},"output_tokens":87,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":123},"user":null,"metadata":{}}"#;

const ANTHROPIC: &str = r#"{"id":"msg_013Zva2CMHLNnXjNJJKqJ2EF","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"Hi! My name is Claude."}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":2095,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":503,"service_tier":"standard"}}"#;

const OPENAI_CHAT_STREAM: &str = "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,\"finish_reason\":\"stop\"}],\"usage\":null}\n\n\
data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1694268190,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":12,\"total_tokens\":21,\"prompt_tokens_details\":{\"cached_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0}}}\n\n\
data: [DONE]\n\n";

const OPENAI_RESPONSES_STREAM: &str = "event: response.created\n\
data: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"in_progress\",\"output\":[],\"usage\":null}}\n\n\
event: response.output_text.delta\n\
data: {\"type\":\"response.output_text.delta\",\"sequence_number\":4,\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hi\"}\n\n\
event: response.completed\n\
data: {\"type\":\"response.completed\",\"sequence_number\":9,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"completed\",\"output\":[{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hi there!\",\"annotations\":[]}]}],\"usage\":{\"input_tokens\":37,\"input_tokens_details\":{\"cached_tokens\":0},\"output_tokens\":11,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":48}}}\n\n";

const ANTHROPIC_STREAM: &str = "event: message_start\r\n\
data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\r\n\r\n\
event: content_block_start\r\n\
data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\r\n\r\n\
event: ping\r\n\
data: {\"type\": \"ping\"}\r\n\r\n\
event: content_block_delta\r\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello\"}}\r\n\r\n\
event: content_block_stop\r\n\
data: {\"type\":\"content_block_stop\",\"index\":0}\r\n\r\n\
event: message_delta\r\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":15}}\r\n\r\n\
event: message_stop\r\n\
data: {\"type\":\"message_stop\"}\r\n\r\n";

const ANTHROPIC_STREAM_PATHS: &[&str] = &["message.usage.input_tokens", "usage.output_tokens"];

#[test]
#[wasm_bindgen_test]
fn openai_chat_completions() {
    assert_eq!(read(&["usage.total_tokens"], Json, OPENAI_CHAT), Usage::Found(29));
    assert_eq!(read(&["usage.prompt_tokens", "usage.completion_tokens"], Json, OPENAI_CHAT), Usage::Found(29));
    assert_eq!(read(&["usage.completion_tokens"], Json, OPENAI_CHAT), Usage::Found(10));
}

#[test]
#[wasm_bindgen_test]
fn openai_responses_api() {
    assert_eq!(read(&["usage.total_tokens"], Json, OPENAI_RESPONSES), Usage::Found(123));
    assert_eq!(read(&["usage.input_tokens", "usage.output_tokens"], Json, OPENAI_RESPONSES), Usage::Found(123));
    assert_eq!(read(&["usage.input_tokens_details.cached_tokens"], Json, OPENAI_RESPONSES), Usage::Found(0));
}

#[test]
#[wasm_bindgen_test]
fn anthropic_messages() {
    assert_eq!(read(&["usage.input_tokens", "usage.output_tokens"], Json, ANTHROPIC), Usage::Found(2598));
    let with_cache = [
        "usage.input_tokens",
        "usage.output_tokens",
        "usage.cache_creation_input_tokens",
        "usage.cache_read_input_tokens",
    ];
    assert_eq!(read(&with_cache, Json, ANTHROPIC), Usage::Found(2598));
}

#[test]
#[wasm_bindgen_test]
fn openai_chat_stream_counts_the_last_event_and_ignores_null_and_done() {
    assert_eq!(read(&["usage.total_tokens"], EventStream, OPENAI_CHAT_STREAM), Usage::Found(21));
    assert_eq!(
        read(&["usage.prompt_tokens", "usage.completion_tokens"], EventStream, OPENAI_CHAT_STREAM),
        Usage::Found(21)
    );
}

#[test]
#[wasm_bindgen_test]
fn openai_responses_stream() {
    assert_eq!(read(&["response.usage.total_tokens"], EventStream, OPENAI_RESPONSES_STREAM), Usage::Found(48));
    // The non-streamed path finds nothing in the stream, and vice versa.
    assert_eq!(read(&["usage.total_tokens"], EventStream, OPENAI_RESPONSES_STREAM), Usage::Missing);
    assert_eq!(read(&["response.usage.total_tokens"], Json, OPENAI_RESPONSES), Usage::Missing);
}

#[test]
#[wasm_bindgen_test]
fn anthropic_stream_sums_input_from_message_start_and_output_from_message_delta() {
    assert_eq!(read(ANTHROPIC_STREAM_PATHS, EventStream, ANTHROPIC_STREAM), Usage::Found(40));
    // message_delta's output count is cumulative: the last one counts.
    let two_deltas = ANTHROPIC_STREAM.replace(
        "event: message_stop",
        "event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":31}}\r\n\r\nevent: message_stop",
    );
    assert_eq!(read(ANTHROPIC_STREAM_PATHS, EventStream, &two_deltas), Usage::Found(56));
}

#[test]
#[wasm_bindgen_test]
fn every_chunking_of_every_shape_gives_the_same_count() {
    assert_any_chunking(&["usage.total_tokens"], Json, OPENAI_CHAT, Usage::Found(29));
    assert_any_chunking(&["usage.input_tokens", "usage.output_tokens"], Json, OPENAI_RESPONSES, Usage::Found(123));
    assert_any_chunking(&["usage.input_tokens", "usage.output_tokens"], Json, ANTHROPIC, Usage::Found(2598));
    assert_any_chunking(&["usage.total_tokens"], EventStream, OPENAI_CHAT_STREAM, Usage::Found(21));
    assert_any_chunking(&["response.usage.total_tokens"], EventStream, OPENAI_RESPONSES_STREAM, Usage::Found(48));
    assert_any_chunking(ANTHROPIC_STREAM_PATHS, EventStream, ANTHROPIC_STREAM, Usage::Found(40));
}

#[test]
#[wasm_bindgen_test]
fn every_three_way_split_of_a_small_body_with_escapes() {
    let body =
        "\u{feff}{\"a\":[1,{\"usage\":2}],\"us\\u0061ge\":{\"n\":-1.5e3,\"t\\\"\":\"\\\\\",\"total\":12.0},\"z\":null}";
    let spec = ["usage.total"];
    let bytes = body.as_bytes();
    for i in 0..=bytes.len() {
        for j in i..=bytes.len() {
            let mut reader = UsageReader::new(&fields(&spec), Json, u64::MAX);
            for piece in [&bytes[..i], &bytes[i..j], &bytes[j..]] {
                reader.feed(piece);
            }
            assert_eq!(reader.finish(), Usage::Found(12), "split at {i} and {j}");
        }
    }
}

#[test]
#[wasm_bindgen_test]
fn a_missing_or_null_field_is_missing() {
    assert_eq!(read(&["usage.total_tokens"], Json, r#"{"id":"x","choices":[]}"#), Usage::Missing);
    assert_eq!(read(&["usage.total_tokens"], Json, r#"{"usage":null}"#), Usage::Missing);
    assert_eq!(read(&["usage.total_tokens"], Json, r#"{"usage":{"total_tokens":null}}"#), Usage::Missing);
    assert_eq!(
        read(&["usage.total_tokens"], Json, r#"{"usage":5}"#),
        Usage::Missing,
        "a count where an object should be"
    );
    assert_eq!(read(&["usage.total_tokens"], Json, r#"[{"usage":{"total_tokens":5}}]"#), Usage::Missing);
    assert_eq!(read(&["usage.total_tokens"], EventStream, "data: {\"a\":1}\n\ndata: [DONE]\n\n"), Usage::Missing);
    assert_eq!(read(&["usage.total_tokens"], EventStream, ""), Usage::Missing);
}

#[test]
#[wasm_bindgen_test]
fn one_of_several_fields_is_enough() {
    let spec = ["usage.input_tokens", "usage.output_tokens"];
    assert_eq!(read(&spec, Json, r#"{"usage":{"output_tokens":7}}"#), Usage::Found(7));
}

#[test]
#[wasm_bindgen_test]
fn values_inside_arrays_never_match() {
    let body =
        r#"{"choices":[{"usage":{"total_tokens":5}}],"usage":[{"total_tokens":6}],"x":{"usage":{"total_tokens":7}}}"#;
    assert_eq!(read(&["usage.total_tokens"], Json, body), Usage::Missing);
}

#[test]
#[wasm_bindgen_test]
fn values_that_are_not_counts_are_garbled() {
    let cases = [
        (r#"{"usage":{"total_tokens":-5}}"#, "a usage value is negative"),
        (r#"{"usage":{"total_tokens":-0}}"#, "a usage value is negative"),
        (r#"{"usage":{"total_tokens":12.5}}"#, "a usage value is not an integer"),
        (r#"{"usage":{"total_tokens":1e3}}"#, "a usage value is not an integer"),
        (r#"{"usage":{"total_tokens":12.0E0}}"#, "a usage value is not an integer"),
        (r#"{"usage":{"total_tokens":"12"}}"#, "a usage value is not a number"),
        (r#"{"usage":{"total_tokens":true}}"#, "a usage value is not a number"),
        (r#"{"usage":{"total_tokens":{"n":1}}}"#, "a usage value is not a number"),
        (r#"{"usage":{"total_tokens":[1]}}"#, "a usage value is not a number"),
        (r#"{"usage":{"total_tokens":9007199254740992}}"#, "a usage value is beyond 2^53 - 1"),
        (r#"{"usage":{"total_tokens":123456789012345678901234567890}}"#, "a usage value is beyond 2^53 - 1"),
    ];
    for (body, reason) in cases {
        assert_eq!(read(&["usage.total_tokens"], Json, body), Usage::Garbled(reason), "{body}");
    }
    // The same values elsewhere are none of the reader's business.
    let elsewhere =
        r#"{"a":-5,"b":12.5,"c":1e3,"d":"12","e":true,"f":123456789012345678901234567890,"usage":{"total_tokens":3}}"#;
    assert_eq!(read(&["usage.total_tokens"], Json, elsewhere), Usage::Found(3));
}

#[test]
#[wasm_bindgen_test]
fn integral_values_up_to_2_53_minus_1_count() {
    let read_total = |body: &str| read(&["usage.total_tokens"], Json, body);
    assert_eq!(read_total(r#"{"usage":{"total_tokens":12.0}}"#), Usage::Found(12));
    assert_eq!(read_total(r#"{"usage":{"total_tokens":12.000}}"#), Usage::Found(12));
    assert_eq!(read_total(r#"{"usage":{"total_tokens":0}}"#), Usage::Found(0));
    assert_eq!(read_total(r#"{"usage":{"total_tokens":9007199254740991}}"#), Usage::Found((1 << 53) - 1));
    let spec = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let body = r#"{"a":9007199254740991,"b":9007199254740991,"c":9007199254740991,"d":9007199254740991,"e":9007199254740991,"f":9007199254740991,"g":9007199254740991,"h":9007199254740991}"#;
    assert_eq!(read(&spec, Json, body), Usage::Found(8 * ((1 << 53) - 1)), "eight maximal values still fit");
}

#[test]
#[wasm_bindgen_test]
fn the_last_occurrence_of_a_path_counts() {
    let body = r#"{"usage":{"total_tokens":5},"usage":{"total_tokens":7,"total_tokens":null}}"#;
    assert_eq!(read(&["usage.total_tokens"], Json, body), Usage::Found(7));
    let stream = "data: {\"usage\":{\"total_tokens\":5}}\n\ndata: {\"usage\":{\"total_tokens\":9}}\n\ndata: {\"usage\":null}\n\n";
    assert_eq!(read(&["usage.total_tokens"], EventStream, stream), Usage::Found(9), "not 14");
}

#[test]
#[wasm_bindgen_test]
fn invalid_json_bodies_are_garbled_with_the_reason() {
    let cases = [
        ("", "no JSON document"),
        ("  \n", "no JSON document"),
        ("<html>502 Bad Gateway</html>", "a JSON value is missing or malformed"),
        ("not json", "a JSON literal is misspelled"),
        (r#"{"usage":{"total_tokens":12}"#, "the JSON document ends early"),
        (r#"{"usage":{"total_tokens":12}}}"#, "more follows the JSON document"),
        (r#"{"usage":{"total_tokens":12}} {}"#, "more follows the JSON document"),
        (r#"{"a":"unterminated"#, "the JSON document ends early"),
        (r#"{"a" 1}"#, "a JSON object key is not followed by ':'"),
        (r#"{"a":1,}"#, "a JSON object key is missing"),
        (r#"{1:2}"#, "a JSON object key is missing"),
        (r#"[1,]"#, "a JSON value is missing or malformed"),
        (r#"[1 2]"#, "a JSON value is not followed by ',' or a closing bracket"),
        (r#"{"a":[1}"#, "a JSON bracket does not match"),
        (r#"{"a":01}"#, "a JSON number has a leading zero"),
        (r#"{"a":1.}"#, "a JSON number is malformed"),
        (r#"{"a":-}"#, "a JSON number is malformed"),
        (r#"{"a":1e}"#, "a JSON number is malformed"),
        (r#"{"a":+1}"#, "a JSON value is missing or malformed"),
        (r#"{"a":nul}"#, "a JSON literal is misspelled"),
        (r#"{"a":truth}"#, "a JSON literal is misspelled"),
        ("{\"a\":\"x\ny\"}", "a JSON string holds a control character"),
        (r#"{"a":"\x"}"#, "a JSON string has an invalid escape"),
        (r#"{"a":"\u12G4"}"#, "a JSON string has an invalid \\u escape"),
    ];
    for (body, reason) in cases {
        assert_eq!(read(&["usage.total_tokens"], Json, body), Usage::Garbled(reason), "{body:?}");
    }
    assert_eq!(read(&["usage.total_tokens"], Json, "12"), Usage::Missing, "a bare number is a JSON document");
}

#[test]
#[wasm_bindgen_test]
fn escaped_keys_are_decoded_and_never_mismatched() {
    let read_total = |body: &str| read(&["usage.total_tokens"], Json, body);
    assert_eq!(read_total(r#"{"us\u0061ge":{"total\u005Ftokens":4}}"#), Usage::Found(4));
    assert_eq!(read_total(r#"{"\u0075sage":{"total_tokens":4}}"#), Usage::Found(4));
    assert_eq!(read_total(r#"{"usage\u0000":{"total_tokens":4}}"#), Usage::Missing);
    assert_eq!(read_total(r#"{"usag\u00e9":{"total_tokens":4}}"#), Usage::Missing);
    assert_eq!(read_total(r#"{"usage\"":{"total_tokens":4}}"#), Usage::Missing);
    assert_eq!(read_total(r#"{"usag":{"total_tokens":4},"usages":{"total_tokens":5}}"#), Usage::Missing);
    assert_eq!(read_total("{\"us\u{e9}age\":{\"total_tokens\":4}}"), Usage::Missing);
    // A key-looking string inside a value is just text.
    assert_eq!(read_total(r#"{"text":"\"usage\":{\"total_tokens\":99}","usage":{"total_tokens":7}}"#), Usage::Found(7));
    assert_eq!(read_total(r#"{"text":"\ud83d\ude00 \/ \b\f\n\r\t","usage":{"total_tokens":7}}"#), Usage::Found(7));
}

#[test]
#[wasm_bindgen_test]
fn deep_nesting_is_bounded() {
    let deep = |levels: usize| format!("{}{}", "[".repeat(levels), "]".repeat(levels));
    assert_eq!(read(&["usage.total_tokens"], Json, &deep(64)), Usage::Missing);
    assert_eq!(
        read(&["usage.total_tokens"], Json, &deep(65)),
        Usage::Garbled("the JSON document is nested deeper than 64 levels")
    );
    assert_eq!(
        read(&["usage.total_tokens"], Json, &deep(100_000)),
        Usage::Garbled("the JSON document is nested deeper than 64 levels")
    );
    // The deepest path works beside deep siblings.
    let spec = ["a.b.c.d.e.f.g.h"];
    let opening: String = ["a", "b", "c", "d", "e", "f", "g"].iter().map(|k| format!(r#"{{"{k}":"#)).collect();
    let body = format!(r#"{{"x":{},{}{{"i":{},"h":8}}{}"#, deep(60), &opening[1..], deep(50), "}".repeat(7));
    assert!(body.ends_with(r#"]]],"h":8}}}}}}}}"#), "{body}");
    assert_eq!(read(&spec, Json, &body), Usage::Found(8));
    let objects = format!("{}1{}", r#"{"a":"#.repeat(64), "}".repeat(64));
    assert_eq!(read(&["b.c"], Json, &objects), Usage::Missing, "64 objects deep");
    assert_eq!(read(&["a.a"], Json, &objects), Usage::Garbled("a usage value is not a number"), "a.a is an object");
}

#[test]
#[wasm_bindgen_test]
fn a_byte_order_mark_is_skipped_once_at_the_start() {
    let bom = "\u{feff}";
    assert_eq!(read(&["usage.total_tokens"], Json, &format!("{bom}{OPENAI_CHAT}")), Usage::Found(29));
    assert_eq!(read(&["usage.total_tokens"], EventStream, &format!("{bom}{OPENAI_CHAT_STREAM}")), Usage::Found(21));
    assert_eq!(
        read(&["usage.total_tokens"], Json, &format!("{bom}{bom}{OPENAI_CHAT}")),
        Usage::Garbled("a JSON value is missing or malformed")
    );
    // Part of a mark is not a mark: it stays in the first line's field name.
    let partial = [&b"\xEF\xBB"[..], b"data: {\"usage\":{\"total_tokens\":3}}\n\n"].concat();
    assert_eq!(read_in(&["usage.total_tokens"], EventStream, &partial, 1), Usage::Missing);
    let partial = [&b"\xEF"[..], b"{}"].concat();
    assert_eq!(
        read_in(&["usage.total_tokens"], Json, &partial, 1),
        Usage::Garbled("a JSON value is missing or malformed")
    );
    assert_eq!(
        read_in(&["usage.total_tokens"], Json, b"\xEF\xBB", 1),
        Usage::Garbled("a JSON value is missing or malformed")
    );
    assert_eq!(read_in(&["usage.total_tokens"], Json, b"\xEF\xBB\xBF", 1), Usage::Garbled("no JSON document"));
}

#[test]
#[wasm_bindgen_test]
fn events_that_are_not_json_are_skipped_not_garbled() {
    let stream = "data: [DONE]\n\ndata: ping\n\ndata: {\"usage\":{\"total_tokens\":-1} oops\n\n\
                  data: {\"usage\":{\"total_tokens\":4}}\n\ndata: {\"usage\":{\"total_tokens\":\n\n: bye\n\n";
    assert_any_chunking(&["usage.total_tokens"], EventStream, stream, Usage::Found(4));
}

#[test]
#[wasm_bindgen_test]
fn a_json_event_with_a_bad_usage_value_is_garbled() {
    let stream =
        "data: {\"usage\":{\"total_tokens\":4}}\n\ndata: {\"usage\":{\"total_tokens\":\"4\"}}\n\ndata: [DONE]\n\n";
    assert_eq!(read(&["usage.total_tokens"], EventStream, stream), Usage::Garbled("a usage value is not a number"));
}

#[test]
#[wasm_bindgen_test]
fn event_data_may_span_lines_and_line_ends_may_be_anything() {
    let stream = "data: {\"usage\":\ndata:   {\"total_tokens\"\rdata: :6}}\r\n\r\n";
    assert_any_chunking(&["usage.total_tokens"], EventStream, stream, Usage::Found(6));
    let cr_only = OPENAI_CHAT_STREAM.replace('\n', "\r");
    assert_any_chunking(&["usage.total_tokens"], EventStream, &cr_only, Usage::Found(21));
}

#[test]
#[wasm_bindgen_test]
fn an_event_cut_off_before_its_blank_line_is_dropped() {
    let stream = "data: {\"usage\":{\"total_tokens\":4}}\n\ndata: {\"usage\":{\"total_tokens\":9}}\n";
    assert_eq!(read(&["usage.total_tokens"], EventStream, stream), Usage::Found(4));
}

#[test]
#[wasm_bindgen_test]
fn past_max_bytes_scanning_stops_and_says_so() {
    let spec = fields(&["usage.total_tokens"]);
    let body = OPENAI_CHAT.as_bytes();
    let len = body.len() as u64;
    let mut exact = UsageReader::new(&spec, Json, len);
    exact.feed(body);
    assert_eq!(exact.finish(), Usage::Found(29), "a body of exactly max_bytes is read");
    let mut over = UsageReader::new(&spec, Json, len - 1);
    for piece in body.chunks(100) {
        over.feed(piece);
    }
    assert_eq!(over.finish(), Usage::TooLarge);
    // In a stream the value was seen, but a later event could replace it.
    let stream = format!("{OPENAI_CHAT_STREAM}: padding\n\n");
    let mut reader = UsageReader::new(&spec, EventStream, OPENAI_CHAT_STREAM.len() as u64);
    reader.feed(stream.as_bytes());
    assert_eq!(reader.finish(), Usage::TooLarge);
}

#[test]
#[wasm_bindgen_test]
fn finish_is_final() {
    let mut reader = UsageReader::new(&fields(&["usage.total_tokens"]), Json, u64::MAX);
    reader.feed(br#"{"usage":{"total_tokens":3}}"#);
    assert_eq!(reader.finish(), Usage::Found(3));
    reader.feed(b"garbage");
    assert_eq!(reader.finish(), Usage::Found(3));
}

#[test]
#[wasm_bindgen_test]
fn the_content_type_picks_the_format() {
    assert_eq!(BodyFormat::from_content_type("text/event-stream"), EventStream);
    assert_eq!(BodyFormat::from_content_type("Text/Event-Stream; charset=utf-8"), EventStream);
    assert_eq!(BodyFormat::from_content_type(" text/event-stream "), EventStream);
    assert_eq!(BodyFormat::from_content_type("application/json"), Json);
    assert_eq!(BodyFormat::from_content_type("text/event-streams"), Json);
    assert_eq!(BodyFormat::from_content_type(""), Json);
}

#[test]
#[wasm_bindgen_test]
fn memory_is_fixed_whatever_the_body() {
    // The reader owns no growing buffer: all of its state is this struct
    // (plus the shared, configured paths).
    let size = std::mem::size_of::<UsageReader>();
    assert!(size <= 512, "UsageReader is {size} bytes");
    // Megabytes of content, 16 KB at a time, the count at the very end.
    let text = "All work and no play makes Jack a dull boy. \\\"quoted\\\" \\u00e9 ".repeat(60);
    let event = format!("data: {{\"choices\":[{{\"delta\":{{\"content\":\"{text}\"}}}}],\"usage\":null}}\n\n");
    let mut body = event.repeat(2_000_000 / event.len());
    body.push_str("data: {\"choices\":[],\"usage\":{\"total_tokens\":777}}\n\ndata: [DONE]\n\n");
    assert_eq!(read_in(&["usage.total_tokens"], EventStream, body.as_bytes(), 16 * 1024), Usage::Found(777));
    let json =
        format!("{{\"content\":\"{}\",\"usage\":{{\"total_tokens\":778}}}}", text.repeat(2_000_000 / text.len()));
    assert_eq!(read_in(&["usage.total_tokens"], Json, json.as_bytes(), 16 * 1024), Usage::Found(778));
}

/// SplitMix64, seeded: the same documents on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// A random JSON value, ASCII only, biased towards `usage.total_tokens`.
fn generate(rng: &mut Rng, depth: u32, out: &mut String) {
    const SPACE: &[&str] = &["", "", "", " ", "\n", "\t ", "\r\n"];
    // Decoded names, each with its spellings; one object never repeats a name.
    const KEYS: &[&[&str]] = &[
        &["usage", "us\\u0061ge", "\\u0075sage"],
        &["total_tokens", "total\\u005ftokens"],
        &["a"],
        &["usag"],
        &["total_tokens_x"],
        &["t\\\"q"],
    ];
    out.push_str(rng.pick(SPACE));
    match rng.below(if depth >= 6 { 5 } else { 9 }) {
        0 => {
            let n = match rng.below(4) {
                0 => rng.below(10),
                1 => rng.below(1 << 40),
                2 => (1 << 53) - 2 + rng.below(4),
                _ => u64::MAX - rng.below(2),
            };
            out.push_str(&n.to_string());
        }
        1 => out.push_str(&format!("-{}", 1 + rng.below(1000))),
        2 => out.push_str(rng.pick(&["1.5", "0.25", "3.75e-1"])),
        3 => {
            out.push('"');
            for _ in 0..rng.below(4) {
                out.push_str(rng.pick(&[
                    "abc",
                    "\\\"",
                    "\\\\",
                    "\\u0061",
                    "\\u00e9",
                    "\\n",
                    "usage",
                    "{\\\"x\\\":1}",
                    " ",
                    ":",
                ]));
            }
            out.push('"');
        }
        4 => out.push_str(rng.pick(&["true", "false", "null"])),
        5..=7 => {
            out.push('{');
            let mut names: Vec<usize> = (0..KEYS.len()).collect();
            for i in 0..rng.below(4) {
                if i > 0 {
                    out.push(',');
                }
                let name = names.remove(rng.below(names.len() as u64) as usize);
                out.push_str(rng.pick(SPACE));
                out.push('"');
                out.push_str(rng.pick(KEYS[name]));
                out.push('"');
                out.push_str(rng.pick(SPACE));
                out.push(':');
                generate(rng, depth + 1, out);
            }
            out.push_str(rng.pick(SPACE));
            out.push('}');
        }
        _ => {
            out.push('[');
            for i in 0..rng.below(4) {
                if i > 0 {
                    out.push(',');
                }
                generate(rng, depth + 1, out);
            }
            out.push_str(rng.pick(SPACE));
            out.push(']');
        }
    }
    out.push_str(rng.pick(SPACE));
}

/// What `usage.total_tokens` is in `text`, by serde_json (the reason of a
/// Garbled is not compared); `None` when serde_json refuses a number the
/// JSON grammar allows (an exponent beyond f64's range).
fn oracle(text: &str) -> Option<Usage> {
    let value = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(value) => value,
        Err(e) if e.to_string().starts_with("number out of range") => return None,
        Err(_) => return Some(Usage::Garbled("")),
    };
    Some(match value.pointer("/usage/total_tokens") {
        None | Some(serde_json::Value::Null) => Usage::Missing,
        Some(serde_json::Value::Number(n)) => match n.as_u64() {
            Some(u) if u < 1 << 53 => Usage::Found(u),
            _ => Usage::Garbled(""),
        },
        Some(_) => Usage::Garbled(""),
    })
}

fn same(a: Usage, b: Usage) -> bool {
    matches!((a, b), (Usage::Garbled(_), Usage::Garbled(_))) || a == b
}

#[test]
#[wasm_bindgen_test]
fn agrees_with_serde_json_on_generated_and_mutated_documents() {
    const NOISE: &[u8] = b"{}[]\",:\\ 0-1.eE+tfnu\n\x01";
    let mut rng = Rng(2026);
    let mut found = 0;
    for _ in 0..3000 {
        let mut doc = String::new();
        if rng.below(2) == 0 {
            // Make a hit likely.
            doc.push_str("{\"usage\":{\"total_tokens\":");
            if rng.below(2) == 0 {
                doc.push_str(&rng.below(1 << 20).to_string());
            } else {
                generate(&mut rng, 2, &mut doc);
            }
            doc.push_str("}}");
        } else {
            generate(&mut rng, 0, &mut doc);
        }
        let mut bytes = doc.clone().into_bytes();
        let mut variants = vec![doc];
        for _ in 0..3 {
            let at = rng.below(bytes.len() as u64 + 1) as usize;
            match rng.below(3) {
                0 if at < bytes.len() => drop(bytes.remove(at)),
                1 => bytes.insert(at, NOISE[rng.below(NOISE.len() as u64) as usize]),
                _ => bytes.truncate(at),
            }
            variants.push(String::from_utf8(bytes.clone()).unwrap());
        }
        for text in variants {
            let Some(expected) = oracle(&text) else { continue };
            found += u32::from(matches!(expected, Usage::Found(_)));
            let size = 1 + rng.below(text.len() as u64 + 1) as usize;
            let got = read_in(&["usage.total_tokens"], Json, text.as_bytes(), size);
            assert!(same(got, expected), "{text:?} in pieces of {size}: {got:?}, serde_json: {expected:?}");
        }
    }
    assert!(found > 500, "the generator found a count only {found} times");
}

#[test]
#[wasm_bindgen_test]
fn one_field_read_from_whichever_api_shape_the_answer_has() {
    let f = UsageFields::parse_alternatives(&[vec!["usage.total_tokens", "response.usage.total_tokens"]]).unwrap();
    let read = |format, body: &str| {
        let mut r = UsageReader::new(&f, format, u64::MAX);
        r.feed(body.as_bytes());
        (r.so_far(), r.finish())
    };
    let chat = "data: {\"choices\":[],\"usage\":{\"total_tokens\":321}}\n\n";
    assert_eq!(read(EventStream, chat), (Some((321, true)), Usage::Found(321)), "complete before [DONE]");
    let responses = concat!(
        "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\n",
        "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"total_tokens\":60400}}}\n\n"
    );
    assert_eq!(read(EventStream, responses), (Some((60_400, true)), Usage::Found(60_400)));
    assert_eq!(read(Json, r#"{"object":"response","usage":{"total_tokens":9}}"#).1, Usage::Found(9));
    assert_eq!(read(EventStream, "data: {\"choices\":[]}\n\n"), (None, Usage::Missing));
    // Summed fields stay incomplete until each has a value.
    let sum = fields(&["message.usage.input_tokens", "usage.output_tokens"]);
    let mut r = UsageReader::new(&sum, EventStream, u64::MAX);
    r.feed(b"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25}}}\n\n");
    assert_eq!(r.so_far(), Some((25, false)));
}
