//! One rule: which requests it matches, whose budget they spend, its limits.

use std::num::NonZeroU64;

use super::cost::{parse_cost, Cost, UsageSource};
use super::error::ConfigError;
use super::json::{Obj, Result};
use super::lease::{parse_lease, LeaseSettings};
use super::limit::{parse_limit, Counts, Limit, MAX_EXACT};
use super::request_body::{BodyPath, BodySettings};
use super::response_headers::{parse_style, HeaderStyle};
use crate::algorithm::Algorithm;
use crate::json::{printable, Value};
use crate::ratelimit_fields::policy_name;

/// Limits per rule.
pub const MAX_LIMITS_PER_RULE: usize = 16;

/// One part of a client's identity.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum KeyPart {
    /// The client's address (see `client_ip.xff_trusted_hops`).
    ClientIp,
    /// The request path without its query (see `Request::path`).
    Path,
    /// The path in lower case: `path` in a rule whose match ignores the
    /// path's case (`/API/x` and `/api/x` are one resource there).
    PathIgnoreCase,
    /// The HTTP method.
    Method,
    /// The :authority (host).
    Authority,
    /// A request header (lower-case name), read as a list: several field
    /// lines or comma-separated members must all be the same value.
    Header(String),
    /// A request header whose value is not a list (commas are part of it,
    /// e.g. User-Agent); several different field lines still conflict.
    HeaderRaw(String),
    /// A query parameter (decoded value).
    Query(String),
    /// A fixed text: a budget shared by every client of the rule.
    Literal(String),
    /// A JSON field of the request body: a string (its bytes, escapes
    /// decoded) or an integer (its decimal text).
    Body(BodyPath),
}

impl KeyPart {
    /// Whether the client chooses its value and it may be a credential (an
    /// API key, a token, a user name, a secret link): written to the store
    /// only as a digest unless the rule asks otherwise.
    pub fn may_be_secret(&self) -> bool {
        matches!(
            self,
            KeyPart::Header(_)
                | KeyPart::HeaderRaw(_)
                | KeyPart::Query(_)
                | KeyPart::Path
                | KeyPart::PathIgnoreCase
                | KeyPart::Body(_)
        )
    }
}

/// How a rule's identity is written into Redis keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdentityForm {
    /// `~H` and 32 hex digits of SHA-256 of the escaped identity: no
    /// credential in the store, and a bounded key.
    Digest,
    /// The escaped identity itself (hashed like a digest past 64 bytes).
    Clear,
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
    /// `path_prefix` compared without regard to ASCII case (`/API/x` is
    /// under `/api/`), for upstreams that serve paths case-insensitively.
    pub path_ignore_case: bool,
    /// The method must be one of these (none = any).
    pub methods: Vec<String>,
    /// Each header (lower-case name) must have exactly this value.
    pub headers: Vec<(String, String)>,
    /// Each JSON field of the request body must be exactly this text (a
    /// string, or an integer's decimal text).
    pub body: Vec<(BodyPath, String)>,
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
    /// How its identity is written into Redis keys.
    pub identity: IdentityForm,
    /// Leases for hot clients, if the rule takes them.
    pub lease: Option<LeaseSettings>,
    /// Its limits, decided together.
    pub limits: Vec<Limit>,
    /// What one request consumes, and when that is known.
    pub cost: Cost,
    /// Behaviour when the store fails.
    pub failure_mode: FailureMode,
    /// Proxies sharing the limit, for the fallback share.
    pub fleet_size: NonZeroU64,
    /// Count and emit headers, never reject.
    pub shadow: bool,
    /// Which fields the client is sent, if not the plugin's.
    pub headers: Option<HeaderStyle>,
    /// Shadow rules: send what the client would have seen, as
    /// `X-RateLimit-Shadow-*`.
    pub shadow_headers: bool,
    /// The format of its 429 body.
    pub error_body: super::ErrorBody,
    /// How it reads the request body, if its key or match does.
    pub request_body: Option<BodySettings>,
}

impl Rule {
    /// Whether its cost is read from the response body.
    pub fn reads_body(&self) -> bool {
        matches!(self.cost, Cost::Response { source: UsageSource::Body { .. }, .. })
    }

    /// The units limit `l` of this rule takes from one request at request
    /// time (the cost, 1 for a limit counting requests, the reserve
    /// checked for a cost known after the response).
    pub fn request_amount(&self, l: &Limit) -> u64 {
        match l.counts {
            Counts::Requests => 1,
            Counts::Cost => self.cost.max_at_request(),
        }
    }
}

const RULE_FIELDS: &[&str] = &[
    "name",
    "match",
    "key",
    "limits",
    "cost",
    "failure_mode",
    "fleet_size",
    "shadow",
    "response_headers",
    "shadow_headers",
    "identity",
    "lease",
    "error_body",
    "request_body",
];

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
    let key = parse_key(&o, path, &matcher)?;
    let identity = match o.str("identity")? {
        None if key.iter().any(KeyPart::may_be_secret) => IdentityForm::Digest,
        None => IdentityForm::Clear,
        Some("digest") => IdentityForm::Digest,
        Some("clear") => IdentityForm::Clear,
        Some(_) => return Err(ConfigError::at(&o.path_of("identity"), "must be \"digest\" or \"clear\"")),
    };
    let cost = parse_cost(o.value("cost"), &o.path_of("cost"))?;
    let failure_mode = match o.str("failure_mode")? {
        None | Some("open") => FailureMode::Open,
        Some("closed") => FailureMode::Closed,
        Some(_) => return Err(ConfigError::at(&o.path_of("failure_mode"), "must be \"open\" or \"closed\"")),
    };
    let fleet_size = o.uint("fleet_size", 1, 10_000)?.and_then(NonZeroU64::new).unwrap_or(NonZeroU64::MIN);
    let shadow = o.bool("shadow")?.unwrap_or(false);
    let headers = o.value("response_headers").map(|v| parse_style(v, &o.path_of("response_headers"))).transpose()?;
    let shadow_headers = o.bool("shadow_headers")?.unwrap_or(false);
    let error_body = super::error_body::parse(o.str("error_body")?, &o.path_of("error_body"))?;
    let reads_body = !matcher.body.is_empty()
        || key.iter().any(|p| matches!(p, KeyPart::Body(_)))
        || cost.reservation().is_some()
        || cost.prices().is_some()
        || cost.include_usage();
    let request_body = super::request_body::parse(o.value("request_body"), &o.path_of("request_body"), reads_body)?;
    if shadow_headers && !shadow {
        return Err(ConfigError::at(&o.path_of("shadow_headers"), "applies to shadow rules only"));
    }
    let limit_values = o.array("limits")?.ok_or_else(|| ConfigError::at(&o.path_of("limits"), "is required"))?;
    if limit_values.is_empty() || limit_values.len() > MAX_LIMITS_PER_RULE {
        return Err(ConfigError::at(&o.path_of("limits"), format!("must hold 1 to {MAX_LIMITS_PER_RULE} limits")));
    }
    let cost_id = cost.fingerprint_text();
    let mut rule = Rule {
        name: name.to_string(),
        matcher,
        key,
        identity,
        lease: None,
        limits: Vec::with_capacity(limit_values.len()),
        cost,
        failure_mode,
        fleet_size,
        shadow,
        headers,
        shadow_headers,
        error_body,
        request_body,
    };
    for (i, lv) in limit_values.iter().enumerate() {
        let index = (i as u64).to_le_bytes();
        let limit =
            add_limit(&rule, lv, i, &o, path, &[domain.as_bytes(), name.as_bytes(), &index, cost_id.as_bytes()])?;
        rule.limits.push(limit);
    }
    if let Some(v) = o.value("lease") {
        rule.lease = Some(check_lease(&rule, parse_lease(v, &o.path_of("lease"))?, &o.path_of("lease"))?);
    }
    name_policies(&mut rule);
    Ok(rule)
}

/// `key`: its parts, the path as the rule's match reads it.
fn parse_key(o: &Obj<'_>, path: &str, matcher: &Matcher) -> Result<Vec<KeyPart>> {
    let key_values = o.array("key")?.ok_or_else(|| ConfigError::at(&o.path_of("key"), "is required"))?;
    if key_values.is_empty() {
        return Err(ConfigError::at(&o.path_of("key"), "must name at least one part"));
    }
    key_values
        .iter()
        .enumerate()
        .map(|(i, p)| parse_key_part(p, &format!("{path}.key[{i}]")))
        // One resource, one identity: the path as the match reads it.
        .map(|p| match p {
            Ok(KeyPart::Path) if matcher.path_ignore_case => Ok(KeyPart::PathIgnoreCase),
            other => other,
        })
        .collect()
}

/// Limit `i` of `rule` (`lv`), checked against its earlier limits and
/// its cost; `salt` goes into its fingerprint.
fn add_limit(rule: &Rule, lv: &Value, i: usize, o: &Obj<'_>, path: &str, salt: &[&[u8]]) -> Result<Limit> {
    let lpath = format!("{path}.limits[{i}]");
    let limit = parse_limit(lv, &lpath, salt)?;
    if rule.limits.iter().any(|l| l.spec.algorithm == limit.spec.algorithm && l.spec.window_ms == limit.spec.window_ms)
    {
        return Err(ConfigError::at(&lpath, "repeats the algorithm and window of an earlier limit of this rule"));
    }
    // A rule's concurrency permits are one set per client (no window in its key).
    let concurrency = |l: &Limit| l.spec.algorithm == Algorithm::Concurrency;
    if concurrency(&limit) && rule.limits.iter().any(concurrency) {
        return Err(ConfigError::at(&lpath, "a rule has at most one concurrency limit"));
    }
    check_limit(rule, &limit, i, o, path)?;
    Ok(limit)
}

/// Policy names: the window, and the algorithm too where two limits share
/// a window.
fn name_policies(rule: &mut Rule) {
    let windows: Vec<(u64, &'static str)> =
        rule.limits.iter().map(|l| (l.spec.window_ms, l.spec.algorithm.name())).collect();
    for (l, (window, algorithm)) in rule.limits.iter_mut().zip(&windows) {
        if l.spec.algorithm == Algorithm::Concurrency {
            l.policy = format!("{}/concurrency", rule.name);
            continue;
        }
        let shared = windows.iter().filter(|(w, _)| w == window).count() > 1;
        l.policy = policy_name(&rule.name, *window, shared.then_some(*algorithm));
    }
}

/// Whether units of `rule` can be leased: counted exactly before they are spent.
fn check_lease(rule: &Rule, lease: LeaseSettings, path: &str) -> Result<LeaseSettings> {
    if rule.shadow {
        return Err(ConfigError::at(path, "a shadow rule admits nothing, so it takes no lease"));
    }
    if !matches!(rule.cost, Cost::Fixed(_)) {
        return Err(ConfigError::at(
            path,
            "needs a cost known at request time and the same for every request (an integer): a lease counts each request's units before the request comes",
        ));
    }
    if let Some(i) = rule.limits.iter().position(|l| l.spec.algorithm == Algorithm::Concurrency) {
        return Err(ConfigError::at(
            path,
            format!("limits[{i}] is a concurrency limit, whose slot is held by one stream until it ends: a slot cannot be leased ahead of its stream (use no lease on this rule)"),
        ));
    }
    if let Some(i) = rule.limits.iter().position(|l| l.spec.algorithm == Algorithm::SlidingLog) {
        return Err(ConfigError::at(
            path,
            format!("limits[{i}] is a sliding_log, which keeps each admitted request with the time it came: a leased unit has no time until it is spent (use another algorithm, or no lease)"),
        ));
    }
    Ok(lease)
}

/// What a limit must satisfy given its rule's cost and failure policy.
fn check_limit(rule: &Rule, limit: &Limit, i: usize, o: &Obj<'_>, path: &str) -> Result<()> {
    // A reservation is the request's own, capped at the capacity of the
    // rule's smallest limit counting cost (pipeline/reservation.rs): never
    // a configuration error.
    let reserving = rule.cost.reservation().is_some();
    let amount = if reserving { 1 } else { rule.request_amount(limit) };
    let capacity = limit.capacity();
    let after_response = limit.counts == Counts::Cost && rule.cost.after_response();
    if amount > capacity && limit.counts == Counts::Cost {
        let what = match rule.cost {
            Cost::Fixed(c) => c.to_string(),
            Cost::RequestHeader { max, .. } => format!("max ({max})"),
            Cost::Response { reserve, .. } => format!("reserve ({reserve})"),
        };
        return Err(ConfigError::at(
            &o.path_of("cost"),
            format!("{what} can never be admitted by limits[{i}], which holds at most {capacity}"),
        ));
    }
    if after_response && limit.spec.algorithm == Algorithm::SlidingLog {
        return Err(ConfigError::at(
            &format!("{path}.limits[{i}]"),
            "sliding_log cannot carry a debt: a cost known after the response needs fixed_window, sliding_window, token_bucket or gcra (or counts \"requests\")",
        ));
    }
    if limit.counts == Counts::Cost && rule.cost.max_units().saturating_mul(limit.spec.window_ms) >= MAX_EXACT {
        return Err(ConfigError::at(
            &o.path_of("cost"),
            format!("max times the window of limits[{i}] in ms must stay below 2^53"),
        ));
    }
    if rule.failure_mode == FailureMode::Open && limit.spec.limit / rule.fleet_size.get() < amount {
        return Err(ConfigError::at(
            &o.path_of("fleet_size"),
            format!(
                "{} leaves limits[{i}] a fallback share below the cost (limit / fleet_size must be at least {amount})",
                rule.fleet_size
            ),
        ));
    }
    Ok(())
}

fn parse_match(v: &Value, path: &str) -> Result<Matcher> {
    let o = Obj::new(v, path, &["path_prefix", "path_ignore_case", "methods", "headers", "body"])?;
    let path_prefix = o.str("path_prefix")?.map(str::to_string);
    if let Some(p) = &path_prefix {
        if !p.starts_with('/') {
            return Err(ConfigError::at(&o.path_of("path_prefix"), "must start with /"));
        }
        // Paths are compared with their segments' parameters dropped.
        if p.contains(';') || p.as_bytes().windows(3).any(|w| w.eq_ignore_ascii_case(b"%3B")) {
            return Err(ConfigError::at(
                &o.path_of("path_prefix"),
                "holds ';', which never matches: paths are compared without their segments' ;parameters",
            ));
        }
    }
    let path_ignore_case = o.bool("path_ignore_case")?.unwrap_or(false);
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
    let mut body = Vec::new();
    if let Some(b) = o.value("body") {
        let bpath = o.path_of("body");
        let map =
            b.as_object().ok_or_else(|| ConfigError::at(&bpath, "must be an object of JSON field path to value"))?;
        for (field, value) in map {
            let fpath = format!("{bpath}.{}", printable(field));
            let field = BodyPath::parse(field).map_err(|e| ConfigError::at(&fpath, e))?;
            let value = value.as_str().ok_or_else(|| ConfigError::at(&fpath, "must be a string"))?;
            body.push((field, value.to_string()));
        }
    }
    Ok(Matcher { path_prefix, path_ignore_case, methods, headers, body })
}

/// A header name in lower case, or `None` if it is not an HTTP token
/// (an initial ':' is allowed for pseudo-headers).
pub fn header_name(name: &str) -> Option<String> {
    let body = name.strip_prefix(':').unwrap_or(name);
    let ok = !body.is_empty()
        && name.len() <= 128
        && body.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
    ok.then(|| name.to_ascii_lowercase())
}

fn parse_key_part(v: &Value, path: &str) -> Result<KeyPart> {
    const HELP: &str = "must be client_ip, path, method, authority, header:<name>, header_raw:<name>, query:<name>, literal:<text> or body:<JSON field path>";
    let s = v.as_str().ok_or_else(|| ConfigError::at(path, HELP))?;
    Ok(match s {
        "client_ip" => KeyPart::ClientIp,
        "path" => KeyPart::Path,
        "method" => KeyPart::Method,
        "authority" => KeyPart::Authority,
        _ => {
            if let Some(name) = s.strip_prefix("header:") {
                KeyPart::Header(header_name(name).ok_or_else(|| ConfigError::at(path, "names an invalid header"))?)
            } else if let Some(name) = s.strip_prefix("header_raw:") {
                KeyPart::HeaderRaw(header_name(name).ok_or_else(|| ConfigError::at(path, "names an invalid header"))?)
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
            } else if let Some(field) = s.strip_prefix("body:") {
                KeyPart::Body(BodyPath::parse(field).map_err(|e| ConfigError::at(path, e))?)
            } else {
                return Err(ConfigError::at(path, HELP));
            }
        }
    })
}
