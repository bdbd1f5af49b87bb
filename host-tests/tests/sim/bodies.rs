//! Response bodies that report a cost (`tkb`, `rvt`), cut at any chunk,
//! and what the filter is to charge for each (docs/token-budgets.md:
//! usage read whole is charged as is; without it, an estimate of what the
//! upstream worked on: the prompt (the request body's bytes ÷ 4) and what
//! was delivered (an event stream's events, a JSON body's bytes ÷ 4),
//! never below `default`; a client gone before the response pays its
//! prompt, at least `default`).

/// A body's chunks and its content type.
pub struct Body {
    pub content_type: &'static str,
    pub chunks: Vec<String>,
}

const TEXT: &str = "abcdefghijklmnopqrstuvwxyz0123456789";
const DELTA: &str = "data: {\"choices\":[{\"delta\":\"a\"}]}\n\n";
const DONE: &str = "data: [DONE]\n\n";

/// The body of shape `shape` (see `schedule::SHAPES`) reporting `usage`.
pub fn body(shape: u64, usage: u64) -> Body {
    match shape {
        0 => Body {
            content_type: "application/json",
            chunks: vec![
                format!("{{\"id\":\"c\",\"usage\":{{\"total_tokens\":{usage}}}"),
                format!(",\"choices\":[{{\"text\":\"{TEXT}\"}}]"),
                "}".into(),
            ],
        },
        1 => Body {
            content_type: "application/json",
            chunks: vec!["{\"id\":\"c\",".into(), format!("\"choices\":[{{\"text\":\"{TEXT}\"}}]"), "}".into()],
        },
        2 => Body {
            content_type: "text/event-stream",
            chunks: vec![
                DELTA.into(),
                DELTA.into(),
                format!("data: {{\"usage\":{{\"total_tokens\":{usage}}}}}\n\n"),
                DONE.into(),
            ],
        },
        _ => Body {
            content_type: "text/event-stream",
            chunks: vec![DELTA.into(), DELTA.into(), DELTA.into(), DONE.into()],
        },
    }
}

/// What a response of shape `shape` reporting `usage` is charged when the
/// stream ends after `delivered` of its chunks, for a request whose body
/// was `prompt` units, under `default` and `max`.
pub fn charge(shape: u64, usage: u64, delivered: usize, prompt: u64, default: u64, max: u64) -> u64 {
    let b = body(shape, usage);
    let sent = &b.chunks[..delivered.min(b.chunks.len())];
    let bytes: u64 = sent.iter().map(|c| c.len() as u64).sum();
    // Events with JSON data (the [DONE] line is none).
    let events = sent.iter().filter(|c| c.starts_with("data: {")).count() as u64;
    let usage_read = match shape {
        0 => delivered >= 1,
        2 => delivered >= 3,
        _ => false,
    };
    let estimate = prompt + if shape >= 2 { events } else { bytes.div_ceil(4) };
    if usage_read {
        usage.min(max)
    } else {
        estimate.max(default).min(max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_follow_what_was_delivered() {
        // Whole bodies: the usage, or the estimate.
        assert_eq!(charge(0, 42, 3, 0, 5, 5000), 42);
        assert_eq!(charge(2, 42, 4, 0, 5, 5000), 42);
        let json_bytes: u64 = body(1, 0).chunks.iter().map(|c| c.len() as u64).sum();
        assert_eq!(charge(1, 42, 3, 0, 5, 5000), json_bytes.div_ceil(4));
        assert_eq!(charge(1, 42, 3, 5, 5, 5000), json_bytes.div_ceil(4) + 5, "and the prompt");
        assert_eq!(charge(3, 42, 4, 0, 5, 5000), 5, "3 events, below the default");
        assert_eq!(charge(3, 42, 4, 5, 5, 5000), 8);
        // Cut short: usage read whole counts; else the estimate.
        assert_eq!(charge(0, 42, 0, 0, 5, 5000), 5);
        assert_eq!(charge(0, 42, 1, 0, 5, 5000), 42);
        assert_eq!(charge(2, 42, 2, 0, 1, 5000), 2);
        assert_eq!(charge(0, 9000, 3, 0, 5, 5000), 5000, "at most max");
    }
}
