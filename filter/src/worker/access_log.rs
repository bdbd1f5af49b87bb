//! The fields a request's decision leaves for the access log, written
//! through the host as filter state (`Host::annotate`; Envoy:
//! `%FILTER_STATE(wasm.ratelimit_rule:PLAIN)%`, …). A field the request has
//! nothing for is not written, so Envoy prints `-` (`null` in a JSON log).

use crate::algorithm::Algorithm;
use crate::config::Config;
use crate::outcome::Overridden;
use crate::pipeline::Trace;
use crate::response::LocalReply;

/// Every field's name (Envoy's filter state: `wasm.` and the name).
pub const FIELDS: [&str; 8] = [
    "ratelimit_rule",
    "ratelimit_limit",
    "ratelimit_remaining",
    "ratelimit_decided_by",
    "ratelimit_retry_after",
    "ratelimit_override",
    "ratelimit_reservation",
    "ratelimit_charge",
];

/// A field: its name and text.
pub type Field = (&'static str, String);

/// The fields of a request `trace` tells of, answered with `reply` if it
/// was: the rule, its limit that decided (`10/1m`; a concurrency limit
/// `8 at once`) with what remains of it, what decided, the `Retry-After`
/// of a refusal, an operator's override that applied (`limit`, `block`,
/// `reset`), a budget's reservation.
pub fn fields(config: &Config, trace: &Trace, reply: Option<&LocalReply>) -> Vec<Field> {
    let Some(rule) = config.rules.get(trace.rule) else { return Vec::new() };
    let mut out = Vec::with_capacity(6);
    out.push((FIELDS[0], rule.name.clone()));
    if let Some(shown) = &trace.shown {
        let limit = shown.policy.and_then(|p| rule.limits.get(p.limit));
        let text = match limit.map(|l| (l.spec.algorithm, l.spec.window_ms)) {
            Some((Algorithm::Concurrency, _)) => format!("{} at once", shown.limit),
            Some((_, window)) => format!("{}/{}", shown.limit, duration(window)),
            None => shown.limit.to_string(),
        };
        out.push((FIELDS[1], text));
        out.push((FIELDS[2], shown.outcome.remaining.to_string()));
    }
    out.push((FIELDS[3], trace.by.name().to_string()));
    let retry = reply.and_then(|r| r.headers.iter().find(|(n, _)| *n == "retry-after"));
    if let Some((_, seconds)) = retry {
        out.push((FIELDS[4], seconds.clone()));
    }
    let configured = trace.shown.and_then(|s| s.policy).and_then(|p| rule.limits.get(p.limit)).map(|l| l.spec.limit);
    if let Some(o) = trace.shown.and_then(|s| s.outcome.overridden) {
        if let Some(text) = overridden(o, configured) {
            out.push((FIELDS[5], text));
        }
    }
    if let Some(units) = trace.reservation {
        out.push((FIELDS[6], units.to_string()));
    }
    out
}

/// The charge field: the units a response was charged.
pub fn charge(units: u64) -> Field {
    (FIELDS[7], units.to_string())
}

/// What an override did, when it did something: `block`, or `reset`
/// and `limit` (a limit other than the `configured` one), joined by `+`.
fn overridden(o: Overridden, configured: Option<u64>) -> Option<String> {
    if o.blocked() {
        return Some("block".into());
    }
    let limit = configured.is_some_and(|c| c != o.limit);
    match (o.reset, limit) {
        (true, true) => Some("reset+limit".into()),
        (true, false) => Some("reset".into()),
        (false, true) => Some("limit".into()),
        (false, false) => None,
    }
}

/// A window as the configuration writes it: its largest exact unit.
fn duration(ms: u64) -> String {
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms >= size && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::LimitOutcome;
    use crate::pipeline::DecidedBy;
    use crate::response::{PolicyRef, Shown};
    use wasm_bindgen_test::wasm_bindgen_test;

    fn config() -> Config {
        Config::parse(
            br#"{"store":{"cluster":"s"},"rules":[{"name":"api","key":["client_ip"],
                "limits":[{"limit":10,"window":"1m"},{"algorithm":"concurrency","limit":8},
                          {"algorithm":"fixed_window","limit":5,"window":"1500ms"}]}]}"#,
        )
        .unwrap()
    }

    fn shown(limit: usize, value: u64, outcome: LimitOutcome) -> Shown {
        Shown { limit: value, outcome, policy: Some(PolicyRef { rule: 0, limit, partition: None }) }
    }

    fn denied(remaining: u64, overridden: Option<Overridden>) -> LimitOutcome {
        LimitOutcome { allowed: false, remaining, reset_ms: 60_000, retry_after_ms: Some(18_000), overridden }
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_429_names_its_rule_limit_remaining_decider_and_retry_after() {
        let reply = crate::response::too_many_requests(
            &shown(0, 10, denied(0, None)),
            crate::time::Instant::from_ms(0),
            true,
            0,
            0,
            |s| s.to_string(),
        );
        let trace =
            Trace { rule: 0, by: DecidedBy::Store, shown: Some(shown(0, 10, denied(0, None))), reservation: None };
        assert_eq!(
            fields(&config(), &trace, Some(&reply)),
            [
                ("ratelimit_rule", "api".to_string()),
                ("ratelimit_limit", "10/1m".into()),
                ("ratelimit_remaining", "0".into()),
                ("ratelimit_decided_by", "store".into()),
                ("ratelimit_retry_after", "18".into()),
            ]
        );
    }

    #[test]
    #[wasm_bindgen_test]
    fn limits_overrides_reservations_and_refusals_before_the_store_have_their_words() {
        let c = config();
        let raised = Some(Overridden { limit: 20, reset: false });
        let trace = Trace {
            rule: 0,
            by: DecidedBy::Lease,
            shown: Some(shown(0, 20, denied(3, raised))),
            reservation: Some(4096),
        };
        let got = fields(&c, &trace, None);
        assert!(
            got.contains(&("ratelimit_limit", "20/1m".into())) && got.contains(&("ratelimit_override", "limit".into()))
        );
        assert!(
            got.contains(&("ratelimit_reservation", "4096".into()))
                && got.contains(&("ratelimit_decided_by", "lease".into()))
        );
        assert!(!got.iter().any(|(n, _)| *n == "ratelimit_retry_after"), "no reply, no Retry-After");
        let cases = [
            (Overridden { limit: 0, reset: false }, Some("block")),
            (Overridden { limit: 10, reset: true }, Some("reset")),
            (Overridden { limit: 11, reset: true }, Some("reset+limit")),
            (Overridden { limit: 10, reset: false }, None),
        ];
        for (o, want) in cases {
            let trace = Trace {
                rule: 0,
                by: DecidedBy::Store,
                shown: Some(shown(0, 10, denied(0, Some(o)))),
                reservation: None,
            };
            let got = fields(&c, &trace, None);
            let text = got.iter().find(|(n, _)| *n == "ratelimit_override").map(|(_, v)| v.as_str());
            assert_eq!(text, want, "{o:?}");
        }
        let at_once =
            Trace { rule: 0, by: DecidedBy::Store, shown: Some(shown(1, 8, denied(0, None))), reservation: None };
        assert!(fields(&c, &at_once, None).contains(&("ratelimit_limit", "8 at once".into())));
        let odd =
            Trace { rule: 0, by: DecidedBy::Fallback, shown: Some(shown(2, 5, denied(0, None))), reservation: None };
        assert!(fields(&c, &odd, None).contains(&("ratelimit_limit", "5/1500ms".into())));
        let body = fields(&c, &Trace::refused(0, DecidedBy::Body), None);
        assert_eq!(body, [("ratelimit_rule", "api".to_string()), ("ratelimit_decided_by", "body".into())]);
        assert_eq!(charge(321), ("ratelimit_charge", "321".into()));
    }
}
