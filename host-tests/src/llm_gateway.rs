//! `envoy-config/llm-gateway.yaml` as shipped, run natively: Redis, webdis,
//! the LLM upstream of the tests and Envoy with the filter, on loopback.
//! Only what cannot run here changes: addresses and ports, the module's
//! path, the upstream's TLS (the test upstream speaks plain HTTP), and the
//! edits a test names.

use std::time::Duration;

use crate::envoy::{render_text, Edit, Envoy, EnvoyTemplate};
use crate::http::{agent, send_body, Answer};
use crate::llm_upstream::LlmUpstream;
use crate::paths::dist;
use crate::process::free_port;
use crate::redis_server::RedisServer;
use crate::webdis::Webdis;

/// The TLS of the shipped upstream cluster, taken out for the plain test upstream.
const UPSTREAM_TLS: &str = "    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        \"@type\": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: api.openai.com
";

/// The shipped store timeout, 25 ms, is for a production network; on a
/// loaded two-core test machine a call may take longer, and a store
/// failure would hand the decision to the fallback bucket.
pub const TEST_TIMEOUT: Edit<'static> = Edit { from: r#""timeout_ms": 25"#, to: r#""timeout_ms": 2000"# };

/// The body `chat` sends: model gpt-4o-mini, no output bound (the shipped
/// rule reserves 4,096 tokens plus its 67 bytes).
pub const CHAT: &str = r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#;

/// Everything running; stopped in reverse order on drop.
pub struct LlmGateway {
    /// Envoy.
    pub envoy: Envoy,
    /// webdis.
    pub webdis: Webdis,
    /// Redis.
    pub redis: RedisServer,
    /// The LLM upstream.
    pub upstream: LlmUpstream,
    agent: ureq::Agent,
}

impl LlmGateway {
    /// Starts it all with one Envoy worker and `edits` (each must match once).
    pub fn start(edits: &[Edit<'_>]) -> LlmGateway {
        let redis = RedisServer::start();
        let webdis = Webdis::start(redis.port);
        let upstream = LlmUpstream::start();
        let (listener, admin) = (free_port(), free_port());
        let module = dist("ratelimit.wasm").display().to_string();
        let t = EnvoyTemplate {
            listener,
            admin,
            backend: upstream.port,
            webdis: webdis.port,
            module: module.clone(),
            plugin_config: None,
        };
        let text = crate::envoy::config_text("llm-gateway.yaml");
        let mut config = render_text(&text, &t, &[("module", format!("local: {{ filename: {module} }}"))]);
        for e in [Edit { from: UPSTREAM_TLS, to: "" }].iter().chain(edits) {
            assert_eq!(config.matches(e.from).count(), 1, "llm-gateway.yaml has no single {:?}", e.from);
            config = config.replacen(e.from, e.to, 1);
        }
        let envoy = Envoy::start(&config, listener, admin, 1).unwrap_or_else(|e| panic!("{}", e.log));
        LlmGateway { envoy, webdis, redis, upstream, agent: agent(Duration::from_secs(60)) }
    }

    /// POST /v1/chat/completions with these headers and [`CHAT`].
    pub fn chat(&self, headers: &[(&str, &str)]) -> Answer {
        self.chat_body(headers, CHAT)
    }

    /// POST /v1/chat/completions with these headers and `body`.
    pub fn chat_body(&self, headers: &[(&str, &str)], body: &str) -> Answer {
        let url = format!("http://127.0.0.1:{}/v1/chat/completions", self.envoy.port);
        let mut with_type = vec![("content-type", "application/json")];
        with_type.extend_from_slice(headers);
        send_body(&self.agent, "POST", &url, &with_type, body.as_bytes())
    }

    /// A counter of the filter's rule `llm`.
    pub fn stat(&self, event: &str) -> u64 {
        self.envoy.stat(&format!("wasmcustom.ratelimit.llm.{event}"))
    }

    /// Every key and value in Redis, as text.
    pub fn redis_dump(&self) -> Vec<(String, String)> {
        let mut c = self.redis.connect();
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
        keys.into_iter()
            .map(|k| {
                let kind: String = redis::cmd("TYPE").arg(&k).query(&mut c).unwrap();
                let value = match kind.as_str() {
                    "string" => redis::cmd("GET").arg(&k).query::<String>(&mut c).unwrap(),
                    _ => format!("{:?}", redis::cmd("DUMP").arg(&k).query::<Vec<u8>>(&mut c).unwrap()),
                };
                (k, value)
            })
            .collect()
    }
}
