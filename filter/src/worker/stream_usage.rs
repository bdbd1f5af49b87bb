//! Streams made to report their usage: a rule with `cost.include_usage`
//! sends a streamed request that does not ask for its usage with
//! `stream_options.include_usage` (`request::ask_for_usage`), and gives its
//! client the stream back without the usage (`usage::UsageStripper`): the
//! SDK reads what it asked for, and the budget is charged what was used.

use super::usage_watch::ResponseSource;
use super::{Host, Worker};
use crate::metrics::Event;
use crate::pipeline::body_refusal;
use crate::request::{ask_for_usage, Request, RequestSource};
use crate::response::LocalReply;
use crate::usage::{BodyFormat, Encoding, UsageStripper};

impl Worker {
    /// For the first enforced rule that applies to `req` (its body read
    /// from `bytes`) and asks for the usage: whether its body went on
    /// asking for it (the host replaced it), or the 400 of a body whose
    /// fields it reads are ambiguous.
    pub(super) fn ask_for_usage<H: Host, R: RequestSource + ?Sized>(
        &self,
        host: &H,
        req: &Request<'_, R>,
        bytes: &[u8],
    ) -> Result<bool, (LocalReply, usize)> {
        let applies = |rule: &crate::config::Rule| {
            let max = rule.request_body.unwrap_or_default().max_bytes;
            rule.cost.include_usage()
                && !rule.shadow
                && rule.matcher.matches_headers(req)
                && rule.matcher.body_holds(req, max) == Ok(true)
        };
        let Some((r, rule)) = self.config.rules.iter().enumerate().find(|(_, rule)| applies(rule)) else {
            return Ok(false);
        };
        match ask_for_usage(req.body(), bytes, rule.request_body.unwrap_or_default().max_bytes) {
            Ok(None) => Ok(false),
            Ok(Some(body)) => Ok(host.replace_request_body(bytes.len() as u64, &body)),
            Err((problem, part)) => {
                host.count(r, Event::BadRequest);
                Err((body_refusal(&problem, &rule.name, &part), r))
            }
        }
    }

    /// The response of a stream made to ask for its usage began: its body
    /// is an event stream in clear (a compressed one cannot be changed,
    /// and passes as it is), so the usage is taken out as it passes.
    pub(super) fn strip_usage<R: ResponseSource + ?Sized>(&mut self, stream: u32, response: &R) {
        let Some(state) = self.streams.get_mut(&stream).filter(|s| s.asked_usage) else { return };
        let content_type = response.header("content-type").unwrap_or_default();
        let events = BodyFormat::from_content_type(&String::from_utf8_lossy(&content_type)) == BodyFormat::EventStream;
        let clear = Encoding::from_header(response.header("content-encoding").as_deref()) == Some(Encoding::Identity);
        if events && clear {
            state.stripper = Some(UsageStripper::default());
        }
    }

    /// Whether stream `stream`'s response body is changed as it passes
    /// (its length is then no longer known: the host drops `content-length`).
    pub fn rewrites_body(&self, stream: u32) -> bool {
        self.streams.get(&stream).is_some_and(|s| s.stripper.is_some())
    }
}
