//! The HTTP context the SDK drives: hands every event to the stream.

use std::rc::Rc;

use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;

use super::root::Plugin;
use super::stream::{self, Shared, Stream};

/// One HTTP stream; `None` when the configuration was refused.
pub struct Http {
    stream: Option<Shared>,
}

impl Http {
    /// The context `id` under `plugin`.
    pub fn new(id: u32, plugin: Option<Rc<Plugin>>) -> Http {
        Http { stream: plugin.map(|p| Stream::new(id, p)) }
    }
}

impl Context for Http {
    fn on_http_call_response(&mut self, token: u32, _headers: usize, body_size: usize, _trailers: usize) {
        if let Some(s) = &self.stream {
            super::webdis::on_response(s, token, body_size);
        }
    }
}

impl HttpContext for Http {
    fn on_http_request_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        match &self.stream {
            Some(s) => stream::start(s),
            None => Action::Continue,
        }
    }

    fn on_http_response_headers(&mut self, _headers: usize, _end_of_stream: bool) -> Action {
        if let Some(s) = &self.stream {
            for (name, value) in stream::take_response_headers(s) {
                let _ = hostcalls::add_map_value(proxy_wasm::types::MapType::HttpResponseHeaders, name, &value);
            }
        }
        Action::Continue
    }
}
