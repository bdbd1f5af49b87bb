//! Servers, configurations and hosts shared by the tests.

use host_tests::redis_server::RedisServer;
use host_tests::wasm_host::{Artifact, Fault, Host, HostBuilder, Request, Response, EPOCH_MS};
use host_tests::webdis::Webdis;

/// The cluster name the configurations use for the store.
pub const CLUSTER: &str = "store";

/// Which build of the filter, with its transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `ratelimit.wasm`: webdis over `proxy_http_call`.
    Webdis,
    /// `ratelimit-redis.wasm`: Higress's Redis calls.
    Redis,
}

impl Kind {
    /// The artifact.
    pub fn artifact(self) -> Artifact {
        match self {
            Kind::Webdis => Artifact::Webdis,
            Kind::Redis => Artifact::Redis,
        }
    }

    /// A configuration of `rules` (a JSON array's inside): a 25 ms timeout,
    /// a breaker of 3 failures open for 2 s, and the INFO timer at 1 h so it
    /// never fires inside a test that does not ask for it.
    pub fn config(self, rules: &str) -> String {
        self.config_with(rules, "")
    }

    /// The same with `extra` top-level fields (starting with a comma).
    pub fn config_with(self, rules: &str, extra: &str) -> String {
        self.config_full(rules, "", extra)
    }

    /// The same with `store_extra` fields in `store` and `extra` top-level
    /// fields (each starting with a comma; a field given again replaces the
    /// default: the filter refuses a field given twice).
    pub fn config_full(self, rules: &str, store_extra: &str, extra: &str) -> String {
        let store = match self {
            Kind::Webdis => format!(r#""transport":"webdis","cluster":"{CLUSTER}""#),
            Kind::Redis => format!(r#""transport":"redis","cluster":"{CLUSTER}?db=0""#),
        };
        let store = merge(
            &format!(r#"{store},"timeout_ms":25,"circuit_breaker":{{"failures":3,"open":"2s"}},"stats_interval":"1h""#),
            store_extra,
        );
        let top = merge(&format!(r#""domain":"t","store":{store},"rules":[{rules}]"#), extra);
        // The shipped webdis.json refuses calls without it.
        host_tests::webdis::with_credential(&top.to_string())
    }
}

/// The object `{base}` with the fields of `,extra` added, replacing any of
/// the same name.
fn merge(base: &str, extra: &str) -> serde_json::Value {
    let mut object: serde_json::Value = serde_json::from_str(&format!("{{{base}}}")).unwrap();
    let extra: serde_json::Value = serde_json::from_str(&format!("{{{}}}", extra.trim_start_matches(','))).unwrap();
    for (k, v) in extra.as_object().unwrap() {
        object[k] = v.clone();
    }
    object
}

/// A real Redis, and webdis in front of it for the webdis build.
pub struct Servers {
    /// Which build they serve.
    pub kind: Kind,
    /// The Redis.
    pub redis: RedisServer,
    /// webdis, for `Kind::Webdis`.
    pub webdis: Option<Webdis>,
}

impl Servers {
    /// Starts them with the decision script already loaded, so every
    /// decision is one store call.
    pub fn start(kind: Kind) -> Servers {
        let servers = Servers::start_empty(kind);
        let _: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(ratelimit::script::SCRIPT)
            .query(&mut servers.redis.connect())
            .unwrap();
        servers
    }

    /// Starts them with an empty script cache (the first call meets NOSCRIPT).
    pub fn start_empty(kind: Kind) -> Servers {
        let redis = RedisServer::start();
        let webdis = (kind == Kind::Webdis).then(|| Webdis::start(redis.port));
        Servers { kind, redis, webdis }
    }

    /// A host of the matching build with `vms` VMs over `config`, its store
    /// cluster leading to these servers.
    pub fn host(&self, config: &str, vms: usize) -> HostBuilder {
        let b = Host::builder(self.kind.artifact(), config).vms(vms);
        match &self.webdis {
            Some(w) => b.http_cluster(CLUSTER, w.port),
            None => b.redis_cluster(CLUSTER, self.redis.port),
        }
    }

    /// How many times Redis ran `command` (lower case, `script|load` for a
    /// subcommand), from INFO commandstats.
    pub fn command_calls(&self, command: &str) -> u64 {
        let info: String = redis::cmd("INFO").arg("commandstats").query(&mut self.redis.connect()).unwrap();
        let prefix = format!("cmdstat_{command}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
    }
}

/// One rule `name` on `prefix`, keyed by client IP, with one limit.
pub fn rule(name: &str, prefix: &str, mode: &str, algorithm: &str, limit: u64, window: &str) -> String {
    format!(
        r#"{{"name":"{name}","match":{{"path_prefix":"{prefix}"}},"key":["client_ip"],"failure_mode":"{mode}",
            "limits":[{{"algorithm":"{algorithm}","limit":{limit},"window":"{window}"}}]}}"#
    )
}

/// `EPOCH_MS + ms`.
pub fn at(ms: u64) -> u64 {
    EPOCH_MS + ms
}

/// Sends `GET path` on VM `vm` at instant `ms` after the epoch.
pub fn get_at(host: &mut Host, ms: u64, vm: usize, path: &str) -> Response {
    host.advance_to(at(ms));
    host.send(vm, Request::get(path))
}

/// The 503 a fail-closed rule answers when the store fails.
pub fn assert_unavailable(r: &Response) {
    assert_eq!((r.status, r.local), (503, true));
    assert_eq!(r.body, r#"{"error":"rate_limiter_unavailable"}"#);
    assert_eq!(r.header("retry-after"), Some("1"));
}

/// One closed and one open rule on the same identity (one call decides both).
pub const BOTH_POLICIES: &str = r#"
  {"name":"closed","match":{"path_prefix":"/closed"},"key":["client_ip"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]},
  {"name":"open","match":{"path_prefix":"/open"},"key":["client_ip"],"failure_mode":"open",
   "limits":[{"algorithm":"fixed_window","limit":5,"window":"1h"}]}"#;

/// Runs `fault` once on a closed and once on an open request, each on a
/// fresh host, from client number `client` (the Redis is shared by the
/// cases); returns the hosts for further checks.
pub fn both_policies(servers: &Servers, client: usize, fault: &Fault) -> (Host, Host) {
    let get = |path: &str| Request::get(path).from(&format!("10.1.0.{client}:1"));
    let config = servers.kind.config(BOTH_POLICIES);
    let mut closed = servers.host(&config, 1).start();
    closed.advance_to(at(1_000));
    closed.faults([fault.clone()]);
    let r = closed.send(0, get("/closed"));
    assert_eq!((r.status, r.local), (503, true), "{fault:?}: {r:?}");
    assert_unavailable(&r);
    assert_eq!(closed.counter("ratelimit.closed.store_errors"), 1, "{fault:?}");
    let mut open = servers.host(&config, 1).start();
    open.advance_to(at(1_000));
    open.faults([fault.clone()]);
    let r = open.send(0, get("/open"));
    assert_eq!((r.status, r.header("x-ratelimit-remaining")), (200, Some("4")), "{fault:?}: the fallback admits");
    assert_eq!(open.counter("ratelimit.open.fallback_allowed"), 1);
    // The store is fine again: the next request is decided by it.
    assert_eq!(closed.send(0, get("/closed")).status, 200);
    (closed, open)
}

/// Runs a test for each build (the Redis one fails at once, saying how to
/// build it, if `dist/ratelimit-redis.wasm` is missing).
#[macro_export]
macro_rules! both_transports {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn webdis() {
                    super::$name($crate::fixture::Kind::Webdis)
                }

                #[test]
                fn redis() {
                    super::$name($crate::fixture::Kind::Redis)
                }
            }
        )*
    };
}
