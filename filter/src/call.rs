//! The arguments of one decision-script call: every limit of one identity.

use crate::keys::limit_keys;
use crate::model::LimitSpec;

/// One limit to decide in a call, with the cost its rule charges.
#[derive(Clone, Copy, Debug)]
pub struct LimitCall<'a> {
    /// The rule the limit belongs to (part of its keys).
    pub rule: &'a str,
    /// The limit.
    pub spec: LimitSpec,
    /// Units this request consumes.
    pub cost: u64,
}

/// KEYS and ARGV for the decision script (see `lua/driver.lua`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScriptCall {
    /// Redis keys, all with the identity's hash tag.
    pub keys: Vec<String>,
    /// now_ms, n, then algorithm, limit, window_ms, burst, cost per limit.
    pub args: Vec<String>,
}

impl ScriptCall {
    /// Builds the call deciding `limits` for `identity` at `now_ms`.
    pub fn new(domain: &str, identity: &str, now_ms: u64, limits: &[LimitCall<'_>]) -> ScriptCall {
        let mut keys = Vec::with_capacity(limits.len() * 2);
        let mut args = Vec::with_capacity(2 + limits.len() * 5);
        args.push(now_ms.to_string());
        args.push(limits.len().to_string());
        for l in limits {
            limit_keys(&mut keys, domain, identity, l.rule, &l.spec, now_ms);
            args.push(l.spec.algorithm.code().to_string());
            args.push(l.spec.limit.to_string());
            args.push(l.spec.window_ms.to_string());
            args.push(l.spec.burst.to_string());
            args.push(l.cost.to_string());
        }
        ScriptCall { keys, args }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[test]
    #[wasm_bindgen_test]
    fn two_limits_make_one_call_with_all_their_keys() {
        let minute = LimitSpec { algorithm: Algorithm::SlidingWindow, limit: 100, window_ms: 60_000, burst: 100 };
        let day = LimitSpec { algorithm: Algorithm::FixedWindow, limit: 10_000, window_ms: 86_400_000, burst: 10_000 };
        let call = ScriptCall::new(
            "rl",
            "ip=1.2.3.4",
            90_000,
            &[LimitCall { rule: "api", spec: minute, cost: 1 }, LimitCall { rule: "api", spec: day, cost: 1 }],
        );
        assert_eq!(
            call.keys,
            ["rl:{ip=1.2.3.4}:api:sw:60000:1", "rl:{ip=1.2.3.4}:api:sw:60000:0", "rl:{ip=1.2.3.4}:api:fw:86400000:0"]
        );
        assert_eq!(
            call.args,
            ["90000", "2", "sw", "100", "60000", "100", "1", "fw", "10000", "86400000", "10000", "1"]
        );
    }
}
