//! The response side of a stream: the rate-limit headers to add, and the
//! usage its charges wait for (a response header, or the body as it passes).

use super::access_log;
use super::stream::Phase;
use super::usage_watch::{Reported, ResponseSource, UsageWatch};
use super::{Callback, Host, Worker};
use crate::pipeline::Charge;

use crate::response::Headers;

impl Worker {
    /// The response's headers arrived: the rate-limit headers to add.
    /// Charges whose usage is in a header are made now; those reading the
    /// body wait for it.
    pub fn on_response_headers<H: Host, R: ResponseSource + ?Sized>(
        &mut self,
        host: &H,
        stream: u32,
        response: &R,
        end_of_stream: bool,
    ) -> Headers {
        self.strip_usage(stream, response);
        // Busy deciding: the response is the filter's own reply.
        let Some(state) = self.streams.get_mut(&stream).filter(|s| matches!(s.phase, Phase::Passing)) else {
            return Vec::new();
        };
        let headers = std::mem::take(&mut state.headers);
        let mut due = Vec::new();
        for mut watch in std::mem::take(&mut state.usage) {
            match watch.on_headers(&self.config, response, end_of_stream, &self.decoders) {
                Some(reported) => due.push((watch.charge, reported)),
                None => state.usage.push(watch),
            }
        }
        let prompt_bytes = state.request_bytes;
        if state.done() {
            self.streams.remove(&stream);
        }
        self.charge_due(host, stream, due, prompt_bytes);
        self.finish_callback(host, Callback::Stream(Some(stream)));
        headers
    }

    /// Charges what the response of stream `stream` (whose callback runs)
    /// reported; the access log tells the first charge's units.
    fn charge_due<H: Host>(&mut self, host: &H, stream: u32, due: Vec<(Charge, Reported)>, prompt_bytes: u64) {
        let mut told = false;
        for (charge, reported) in due {
            let units = self.submit_charge(host, charge, reported, prompt_bytes);
            if !told {
                host.annotate(stream, &[access_log::charge(units)]);
                told = true;
            }
        }
    }

    /// Whether stream `stream`'s response body is being read for usage.
    pub fn reads_body(&self, stream: u32) -> bool {
        self.streams.get(&stream).is_some_and(|s| s.usage.iter().any(UsageWatch::reads_body) || s.stripper.is_some())
    }

    /// A chunk of the response body passed: what goes on in its place,
    /// if it changes (see `rewrites_body`).
    pub fn on_response_body<H: Host>(
        &mut self,
        host: &H,
        stream: u32,
        chunk: &[u8],
        end_of_stream: bool,
    ) -> Option<Vec<u8>> {
        let state = self.streams.get_mut(&stream)?;
        let mut due = Vec::new();
        for mut watch in std::mem::take(&mut state.usage) {
            match watch.on_body(chunk, end_of_stream) {
                Some(reported) => due.push((watch.charge, reported)),
                None => state.usage.push(watch),
            }
        }
        let sent = state.stripper.as_mut().map(|s| s.feed(chunk, end_of_stream));
        if end_of_stream {
            state.stripper = None;
        }
        let prompt_bytes = state.request_bytes;
        if state.done() {
            self.streams.remove(&stream);
        }
        self.charge_due(host, stream, due, prompt_bytes);
        self.finish_callback(host, Callback::Stream(Some(stream)));
        sent
    }
}
