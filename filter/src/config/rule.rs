//! One rule: which requests it matches, whose budget they spend, its limits.

use serde_json::Value;

use super::duration::{parse_ms, DURATION_HELP};
use super::error::ConfigError;
use super::json::{printable, uint, Obj, Result};
use crate::algorithm::Algorithm;
use crate::fingerprint::fingerprint;
use crate::model::LimitSpec;

/// The largest sliding_log limit: its sorted set holds one entry per request.
pub const SLIDING_LOG_MAX: u64 = 10_000;
/// Limits per rule.
pub const MAX_LIMITS_PER_RULE: usize = 16;
/// limit x window and burst x window must stay exact in the script's doubles.
const MAX_EXACT: u64 = 1 << 53;

/// One part of a client's identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyPart {
    /// The client's address (see `client_ip.xff_trusted_hops`).
    ClientIp,
    /// The request path without its query.
    Path,
    /// The HTTP method.
    Method,
    /// The :authority (host).
    Authority,
    /// A request header (lower-case name).
    Header(String),
    /// A query parameter (decoded value).
    Query(String),
    /// A fixed text: a budget shared by every client of the rule.
    Literal(String),
}

/// What failing open or closed means for a rule when the store fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureMode {
    /// Admit through a local fallback bucket (limit / fleet_size per window).
    Open,
    /// Answer 503.
    Closed,
}

/// Which requests a rule applies to; empty = every request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Matcher {
    /// The path must start with this.
    pub path_prefix: Option<String>,
    /// The method must be one of these (none = any).
    pub methods: Vec<String>,
    /// Each header (lower-case name) must have exactly this value.
    pub headers: Vec<(String, String)>,
}

/// One limit of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limit {
    /// Its parameters as the script takes them.
    pub spec: LimitSpec,
    /// Identifies this limit with these exact parameters (and the rule's
    /// domain, name and cost): a changed limit never matches old entries of
    /// the deny cache or the fallback buckets.
    pub fingerprint: u64,
}

/// A validated rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Unique name, [a-z0-9_-]{1,64}.
    pub name: String,
    /// Which requests it applies to.
    pub matcher: Matcher,
    /// The identity: parts joined in order.
    pub key: Vec<KeyPart>,
    /// Its limits, decided together.
    pub limits: Vec<Limit>,
    /// Units one request consumes.
    pub cost: u64,
    /// Behaviour when the store fails.
    pub failure_mode: FailureMode,
    /// Proxies sharing the limit, for the fallback share.
    pub fleet_size: u64,
    /// Count and emit headers, never reject.
    pub shadow: bool,
}

const RULE_FIELDS: &[&str] = &["name", "match", "key", "limits", "cost", "failure_mode", "fleet_size", "shadow"];

/// Whether `s` is 1..=max characters of [a-z0-9_-] (and '.' if `dots`).
pub fn is_name(s: &str, max: usize, dots: bool) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-' || (dots && b == b'.'))
}

/// Parses `rules[i]`.
pub fn parse_rule(v: &Value, path: &str, domain: &str) -> Result<Rule> {
    let o = Obj::new(v, path, RULE_FIELDS)?;
    let name = o.required_str("name")?;
    if !is_name(name, 64, false) {
        return Err(ConfigError::at(&o.path_of("name"), "must be 1 to 64 characters of a-z, 0-9, _ and -"));
    }
    let matcher = match o.value("match") {
        None => Matcher::default(),
        Some(m) => parse_match(m, &o.path_of("match"))?,
    };
    let key_values = o.array("key")?.ok_or_else(|| ConfigError::at(&o.path_of("key"), "is required"))?;
    if key_values.is_empty() {
        return Err(ConfigError::at(&o.path_of("key"), "must name at least one part"));
    }
    let key = key_values
        .iter()
        .enumerate()
        .map(|(i, p)| parse_key_part(p, &format!("{path}.key[{i}]")))
        .collect::<Result<_>>()?;
    let cost = o.uint("cost", 1, 1_000_000)?.unwrap_or(1);
    let failure_mode = match o.str("failure_mode")? {
        None | Some("open") => FailureMode::Open,
        Some("closed") => FailureMode::Closed,
        Some(_) => return Err(ConfigError::at(&o.path_of("failure_mode"), "must be \"open\" or \"closed\"")),
    };
    let fleet_size = o.uint("fleet_size", 1, 10_000)?.unwrap_or(1);
    let shadow = o.bool("shadow")?.unwrap_or(false);
    let limit_values = o.array("limits")?.ok_or_else(|| ConfigError::at(&o.path_of("limits"), "is required"))?;
    if limit_values.is_empty() || limit_values.len() > MAX_LIMITS_PER_RULE {
        return Err(ConfigError::at(&o.path_of("limits"), format!("must hold 1 to {MAX_LIMITS_PER_RULE} limits")));
    }
    let mut limits: Vec<Limit> = Vec::with_capacity(limit_values.len());
    for (i, lv) in limit_values.iter().enumerate() {
        let lpath = format!("{path}.limits[{i}]");
        let spec = parse_limit(lv, &lpath)?;
        if limits.iter().any(|l| l.spec.algorithm == spec.algorithm && l.spec.window_ms == spec.window_ms) {
            return Err(ConfigError::at(&lpath, "repeats the algorithm and window of an earlier limit of this rule"));
        }
        let capacity = match spec.algorithm {
            Algorithm::TokenBucket | Algorithm::Gcra => spec.burst,
            _ => spec.limit,
        };
        if cost > capacity {
            return Err(ConfigError::at(
                &o.path_of("cost"),
                format!("{cost} can never be admitted by limits[{i}], which holds at most {capacity}"),
            ));
        }
        if failure_mode == FailureMode::Open && spec.limit / fleet_size < cost {
            return Err(ConfigError::at(
                &o.path_of("fleet_size"),
                format!("{fleet_size} leaves limits[{i}] a fallback share below the cost (limit / fleet_size must be at least {cost})"),
            ));
        }
        let fp = limit_fingerprint(domain, name, i, &spec, cost);
        limits.push(Limit { spec, fingerprint: fp });
    }
    Ok(Rule { name: name.to_string(), matcher, key, limits, cost, failure_mode, fleet_size, shadow })
}

fn limit_fingerprint(domain: &str, rule: &str, index: usize, spec: &LimitSpec, cost: u64) -> u64 {
    let numbers = [index as u64, spec.limit, spec.window_ms, spec.burst, cost];
    let mut bytes = [0u8; 40];
    for (chunk, n) in bytes.chunks_mut(8).zip(numbers) {
        chunk.copy_from_slice(&n.to_le_bytes());
    }
    fingerprint(&[domain.as_bytes(), rule.as_bytes(), spec.algorithm.code().as_bytes(), &bytes])
}

fn parse_limit(v: &Value, path: &str) -> Result<LimitSpec> {
    let o = Obj::new(v, path, &["algorithm", "limit", "window", "burst"])?;
    let algorithm = match o.str("algorithm")? {
        None => Algorithm::SlidingWindow,
        Some(a) => Algorithm::from_name(a).ok_or_else(|| {
            ConfigError::at(
                &o.path_of("algorithm"),
                "must be one of sliding_window, fixed_window, token_bucket, sliding_log, gcra",
            )
        })?,
    };
    let limit = match o.value("limit") {
        None => return Err(ConfigError::at(&o.path_of("limit"), "is required")),
        Some(v) => uint(v, &o.path_of("limit"), 1, MAX_EXACT)?,
    };
    let window_text = o.required_str("window")?;
    let window_ms = parse_ms(window_text).ok_or_else(|| ConfigError::at(&o.path_of("window"), DURATION_HELP))?;
    let burst = match (o.uint("burst", 1, MAX_EXACT)?, algorithm) {
        (None, a) => a.default_burst(limit),
        (Some(b), Algorithm::TokenBucket | Algorithm::Gcra) => b,
        (Some(_), _) => {
            return Err(ConfigError::at(&o.path_of("burst"), "applies to token_bucket and gcra only"));
        }
    };
    if algorithm == Algorithm::SlidingLog && limit > SLIDING_LOG_MAX {
        return Err(ConfigError::at(
            &o.path_of("limit"),
            format!("sliding_log keeps one entry per request: at most {SLIDING_LOG_MAX}"),
        ));
    }
    if limit.saturating_mul(window_ms) >= MAX_EXACT || burst.saturating_mul(window_ms) >= MAX_EXACT {
        return Err(ConfigError::at(path, "limit (or burst) times the window in ms must stay below 2^53"));
    }
    Ok(LimitSpec { algorithm, limit, window_ms, burst })
}

fn parse_match(v: &Value, path: &str) -> Result<Matcher> {
    let o = Obj::new(v, path, &["path_prefix", "methods", "headers"])?;
    let path_prefix = o.str("path_prefix")?.map(str::to_string);
    if let Some(p) = &path_prefix {
        if !p.starts_with('/') {
            return Err(ConfigError::at(&o.path_of("path_prefix"), "must start with /"));
        }
    }
    let mut methods = Vec::new();
    for (i, m) in o.array("methods")?.into_iter().flatten().enumerate() {
        let mpath = format!("{path}.methods[{i}]");
        let m = m.as_str().ok_or_else(|| ConfigError::at(&mpath, "must be a string"))?;
        if m.is_empty() || m.len() > 32 || !m.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(ConfigError::at(&mpath, "must be an HTTP method in upper case, like \"POST\""));
        }
        methods.push(m.to_string());
    }
    let mut headers = Vec::new();
    if let Some(h) = o.value("headers") {
        let hpath = o.path_of("headers");
        let map = h.as_object().ok_or_else(|| ConfigError::at(&hpath, "must be an object of header name to value"))?;
        for (name, value) in map {
            let npath = format!("{hpath}.{}", printable(name));
            let lower = header_name(name).ok_or_else(|| ConfigError::at(&npath, "is not a valid header name"))?;
            let value = value.as_str().ok_or_else(|| ConfigError::at(&npath, "must be a string"))?;
            headers.push((lower, value.to_string()));
        }
    }
    Ok(Matcher { path_prefix, methods, headers })
}

/// A header name in lower case, or `None` if it is not an HTTP token
/// (an initial ':' is allowed for pseudo-headers).
fn header_name(name: &str) -> Option<String> {
    let body = name.strip_prefix(':').unwrap_or(name);
    let ok = !body.is_empty()
        && name.len() <= 128
        && body.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    ok.then(|| name.to_ascii_lowercase())
}

fn parse_key_part(v: &Value, path: &str) -> Result<KeyPart> {
    const HELP: &str = "must be client_ip, path, method, authority, header:<name>, query:<name> or literal:<text>";
    let s = v.as_str().ok_or_else(|| ConfigError::at(path, HELP))?;
    Ok(match s {
        "client_ip" => KeyPart::ClientIp,
        "path" => KeyPart::Path,
        "method" => KeyPart::Method,
        "authority" => KeyPart::Authority,
        _ => {
            if let Some(name) = s.strip_prefix("header:") {
                KeyPart::Header(header_name(name).ok_or_else(|| ConfigError::at(path, "names an invalid header"))?)
            } else if let Some(name) = s.strip_prefix("query:") {
                if name.is_empty() || name.len() > 128 {
                    return Err(ConfigError::at(path, "needs a query parameter name"));
                }
                KeyPart::Query(name.to_string())
            } else if let Some(text) = s.strip_prefix("literal:") {
                if text.is_empty() || text.len() > 64 {
                    return Err(ConfigError::at(path, "needs a text of 1 to 64 characters"));
                }
                KeyPart::Literal(text.to_string())
            } else {
                return Err(ConfigError::at(path, HELP));
            }
        }
    })
}
