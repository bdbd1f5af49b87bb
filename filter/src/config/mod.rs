//! The plugin configuration: JSON, validated once in `on_configure`.
//!
//! Parsing walks the JSON by hand so that every error names its field path
//! (`rules[1].limits[0].limit: must be at least 1`) and unknown fields are
//! refused. All defaults live here.

mod cost;
mod credential;
mod duration;
mod error;
mod error_body;
mod json;
mod lease;
mod limit;
mod load;
mod overrides;
mod prices;
mod request_body;
mod reservation;
mod response_headers;
mod rule;
mod store_settings;

use std::num::NonZeroU32;

pub use cost::{Cost, HangUp, Unreadable, UsageSource, BYTES_PER_UNIT, MAX_COST};
pub use duration::parse_ms;
pub use error::ConfigError;
pub use error_body::ErrorBody;
pub use lease::{LeaseSettings, MAX_LEASE_UNITS};
pub use limit::{Counts, Limit, MAX_EXACT, SLIDING_LOG_MAX};
pub use load::{load, load_with_env};
pub use overrides::{Overrides, DEFAULT_WITHIN};
pub use prices::{Price, Prices};
pub use request_body::{BodyInvalid, BodyPath, BodySettings, DEFAULT_BODY_TIMEOUT_MS, DEFAULT_MAX_BODY, MAX_BODY};
pub use reservation::{Reservation, CHOICES_FIELDS, OUTPUT_FIELDS};
pub use response_headers::{HeaderStyle, Vendor};
pub use rule::{header_name, is_name, FailureMode, IdentityForm, KeyPart, Matcher, Rule};
pub use store_settings::{Batching, Breaker, StoreSettings, MAX_DECISIONS};

use json::Obj;

/// Most rules in one configuration.
pub const MAX_RULES: usize = 64;
/// Most limits in all rules together: the script decides at most 64 per decision.
pub const MAX_LIMITS: usize = crate::spec::MAX_LIMITS;

/// The deny cache in shared data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenyCache {
    /// Whether denials are cached.
    pub enabled: bool,
    /// Fixed number of entries (shared data never shrinks).
    pub slots: NonZeroU32,
}

/// Rules whose requests spend one identity's budget in one store call: the
/// same key parts, the same identity form and the same shadow flag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyGroup {
    /// The key parts all these rules use.
    pub key: Vec<KeyPart>,
    /// How they write the identity into Redis keys.
    pub identity: IdentityForm,
    /// Whether these rules are in shadow mode (their own call, so a
    /// would-be denial never blocks an enforced rule's consumption).
    pub shadow: bool,
    /// How they read the request body, when the key does: rules reading
    /// it differently read different identities.
    pub body: Option<BodySettings>,
    /// Indices into `Config::rules`.
    pub rules: Vec<usize>,
}

/// Deny-cache slots when the configuration says nothing.
const DEFAULT_SLOTS: NonZeroU32 = NonZeroU32::MIN.saturating_add(4095);

/// The validated configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Prefix of every Redis key.
    pub domain: String,
    /// The store.
    pub store: StoreSettings,
    /// 0: the connection's address; N: the Nth X-Forwarded-For entry from the right.
    pub xff_trusted_hops: u32,
    /// The deny cache.
    pub deny_cache: DenyCache,
    /// Which rate-limit fields go on responses, unless a rule says otherwise.
    pub headers: HeaderStyle,
    /// Retry-After gets a random extra of up to this share of the wait, in
    /// millionths (0: exact).
    pub retry_after_jitter_ppm: u32,
    /// Operators' overrides, if on (read for the clients their index names).
    pub overrides: Option<Overrides>,
    /// The rules, in order.
    pub rules: Vec<Rule>,
    /// The rules grouped by identity.
    pub groups: Vec<KeyGroup>,
}

const TOP_FIELDS: &[&str] =
    &["domain", "store", "client_ip", "deny_cache", "response_headers", "retry_after_jitter", "overrides", "rules"];

impl Config {
    /// Parses and validates the plugin configuration (what the store's
    /// transport must check on top, `load` checks), reading the VM's
    /// environment for `store.password_env`.
    pub fn parse(bytes: &[u8]) -> std::result::Result<Config, ConfigError> {
        Config::parse_with_env(bytes, &credential::vm_env)
    }

    /// `parse` with the environment read through `env`.
    pub fn parse_with_env(bytes: &[u8], env: &credential::Env<'_>) -> std::result::Result<Config, ConfigError> {
        let doc = crate::json::parse(bytes).map_err(|e| ConfigError::at(&e.path, e.reason))?;
        let o = Obj::new(&doc, "", TOP_FIELDS)?;
        let domain = o.str("domain")?.unwrap_or("rl");
        if !is_name(domain, 32, true) {
            return Err(ConfigError::at("domain", "must be 1 to 32 characters of a-z, 0-9, _, - and ."));
        }
        let deny_cache = match o.value("deny_cache") {
            None => DenyCache { enabled: true, slots: DEFAULT_SLOTS },
            Some(v) => {
                let d = Obj::new(v, "deny_cache", &["enabled", "slots"])?;
                let slots = d.uint("slots", 1, 1 << 20)?.and_then(|n| NonZeroU32::new(n as u32));
                DenyCache { enabled: d.bool("enabled")?.unwrap_or(true), slots: slots.unwrap_or(DEFAULT_SLOTS) }
            }
        };
        // The breaker's records of hash slots are as many as the deny cache's.
        let store = store_settings::parse_store(
            o.value("store").ok_or_else(|| ConfigError::at("store", "is required"))?,
            env,
            deny_cache.slots,
        )?;
        let xff_trusted_hops = match o.value("client_ip") {
            None => 0,
            Some(v) => Obj::new(v, "client_ip", &["xff_trusted_hops"])?.uint("xff_trusted_hops", 0, 16)?.unwrap_or(0),
        } as u32;
        let headers = match o.value("response_headers") {
            None => HeaderStyle::LEGACY,
            Some(v) => response_headers::parse_style(v, "response_headers")?,
        };
        let retry_after_jitter_ppm = match o.value("retry_after_jitter") {
            None => 0,
            Some(v) => (json::fraction(v, "retry_after_jitter")? * 1e6).round() as u32,
        };
        let overrides = match o.value("overrides") {
            None => None,
            Some(v) => overrides::parse_overrides(v)?,
        };
        let rule_values = o.array("rules")?.ok_or_else(|| ConfigError::at("rules", "is required"))?;
        if rule_values.is_empty() || rule_values.len() > MAX_RULES {
            return Err(ConfigError::at("rules", format!("must hold 1 to {MAX_RULES} rules")));
        }
        let mut rules: Vec<Rule> = Vec::with_capacity(rule_values.len());
        for (i, v) in rule_values.iter().enumerate() {
            let rule = rule::parse_rule(v, &format!("rules[{i}]"), domain)?;
            if rules.iter().any(|r| r.name == rule.name) {
                return Err(ConfigError::at(
                    &format!("rules[{i}].name"),
                    format!("\"{}\" is used by an earlier rule", rule.name),
                ));
            }
            rules.push(rule);
        }
        if rules.iter().map(|r| r.limits.len()).sum::<usize>() > MAX_LIMITS {
            return Err(ConfigError::at("rules", format!("hold more than {MAX_LIMITS} limits in all")));
        }
        let groups = group_rules(&rules);
        Ok(Config {
            domain: domain.to_string(),
            store,
            xff_trusted_hops,
            deny_cache,
            headers,
            retry_after_jitter_ppm,
            overrides,
            rules,
            groups,
        })
    }

    /// What this plugin's shared-data keys end with: `@` and 16 hex digits
    /// of SHA-256 of its domain, transport and store cluster. Shared data
    /// is one space per `vm_id`: plugins on one `vm_id` that count in the
    /// same store and domain share a breaker, a deny cache, fallback shares
    /// and a lease table (their Redis keys are the same too); any other two
    /// keep theirs apart. Rules and limits are not in it: editing them
    /// keeps the keys (and adds none; their entries are fingerprinted).
    pub fn shared_scope(&self) -> String {
        let transport = match self.store.transport {
            crate::store::Transport::Webdis => "webdis",
            crate::store::Transport::Redis => "redis",
        };
        let text = [self.domain.as_str(), transport, self.store.cluster.as_str()].join("\0");
        let mut head = [0u8; 8];
        head.copy_from_slice(&crate::digest::sha256(text.as_bytes())[..8]);
        let digits: [u8; 16] = crate::digest::hex(&head);
        let mut out = String::with_capacity(17);
        out.push('@');
        out.extend(digits.iter().map(|&d| d as char));
        out
    }
}

fn group_rules(rules: &[Rule]) -> Vec<KeyGroup> {
    let mut groups: Vec<KeyGroup> = Vec::new();
    for (i, r) in rules.iter().enumerate() {
        let body = r.request_body.filter(|_| r.key.iter().any(|p| matches!(p, KeyPart::Body(_))));
        match groups
            .iter_mut()
            .find(|g| g.key == r.key && g.shadow == r.shadow && g.identity == r.identity && g.body == body)
        {
            Some(g) => g.rules.push(i),
            None => groups.push(KeyGroup {
                key: r.key.clone(),
                identity: r.identity,
                shadow: r.shadow,
                body,
                rules: vec![i],
            }),
        }
    }
    groups
}

#[cfg(test)]
mod tests;
