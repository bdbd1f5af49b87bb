//! A price: what the usage fields of one response cost, as integer
//! weights per field (e.g. micro-dollars per million tokens: input,
//! output, cached input), so a budget can be money across models.

use super::MAX_PATHS;

/// Integer weights, one per configured usage path (in the order of the
/// format's `UsageFields`), per `per` units of usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Weighing {
    /// Weight of each path; 0 past the configured ones.
    pub weights: [i64; MAX_PATHS],
    /// The weights are per this many units of usage (at least 1).
    pub per: u64,
}

impl Weighing {
    /// ceil(max(0, Σ weight × value) / per), saturating at u64::MAX: never
    /// less than the exact price, so splitting a request never pays less.
    /// Exact in i128: each |weight| ≤ 10^12 < 2^40 and value < 2^64, so
    /// each product is below 2^104 and 8 of them below 2^107.
    pub fn cost(&self, values: &[Option<u64>]) -> u64 {
        let sum: i128 = self.weights.iter().zip(values).map(|(w, v)| i128::from(*w) * i128::from(v.unwrap_or(0))).sum();
        ceil_div(sum.max(0), self.per)
    }

    /// The most `units` units of usage can cost at this price: at its
    /// largest weight (none positive: 0).
    pub fn most(&self, units: u64) -> u64 {
        let top = self.weights.iter().copied().max().unwrap_or(0).max(0);
        ceil_div(i128::from(top) * i128::from(units), self.per)
    }
}

fn ceil_div(x: i128, per: u64) -> u64 {
    let per = i128::from(per.max(1));
    u64::try_from((x + per - 1) / per).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    fn weighing(w: &[i64], per: u64) -> Weighing {
        let mut weights = [0; MAX_PATHS];
        weights[..w.len()].copy_from_slice(w);
        Weighing { weights, per }
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_price_is_the_weighted_sum_rounded_up() {
        // gpt-4o per million tokens in micro-dollars: $2.50 in, $10 out,
        // cached input $1.25 (prompt_tokens include the cached ones).
        let gpt4o = weighing(&[2_500_000, 10_000_000, -1_250_000], 1_000_000);
        // 1,000 in (400 cached), 500 out: 2,500 + 5,000 - 500 = 7,000 µ$.
        assert_eq!(gpt4o.cost(&[Some(1_000), Some(500), Some(400)]), 7_000);
        assert_eq!(gpt4o.cost(&[Some(1), None, None]), 3, "2.5 rounds up");
        assert_eq!(gpt4o.cost(&[Some(0), Some(0), Some(9)]), 0, "never below 0");
        assert_eq!(gpt4o.cost(&[None, None, None]), 0);
        assert_eq!(gpt4o.most(1_000), 10_000, "at the largest weight");
        assert_eq!(weighing(&[-5], 1).most(1_000), 0);
    }

    #[test]
    #[wasm_bindgen_test]
    fn a_priced_reader_reports_what_the_usage_costs_in_json_and_in_a_stream() {
        use crate::usage::{BodyFormat, Usage, UsageFields, UsageReader};
        let paths = ["usage.prompt_tokens", "usage.completion_tokens", "usage.prompt_tokens_details.cached_tokens"];
        let fields = UsageFields::parse(&paths).unwrap();
        let price = weighing(&[2_500_000, 10_000_000, -1_250_000], 1_000_000);
        let mut json = UsageReader::new(&fields, BodyFormat::Json, 1 << 20).priced(Some(price));
        json.feed(br#"{"usage":{"prompt_tokens":1000,"completion_tokens":500,"prompt_tokens_details":{"cached_tokens":400}}}"#);
        assert_eq!(json.finish(), Usage::Found(7_000));
        let mut events = UsageReader::new(&fields, BodyFormat::EventStream, 1 << 20).priced(Some(price));
        events.feed(b"data: {\"usage\":null}\n\ndata: {\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":3}}\n\ndata: [DONE]\n\n");
        assert_eq!(events.finish(), Usage::Found(25 + 30), "the last event's usage, priced");
        let mut unpriced = UsageReader::new(&fields, BodyFormat::Json, 1 << 20);
        unpriced.feed(br#"{"usage":{"prompt_tokens":1000,"completion_tokens":500}}"#);
        assert_eq!(unpriced.finish(), Usage::Found(1_500), "without a price: the sum");
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_extremes_are_exact_or_saturate() {
        let top = weighing(&[1_000_000_000_000; MAX_PATHS], 1);
        assert_eq!(top.cost(&[Some(u64::MAX); MAX_PATHS]), u64::MAX);
        let per = weighing(&[1_000_000_000; MAX_PATHS], 1_000_000_000);
        // 8 × 10^9 × (2^53 - 1) / 10^9 = 8 × (2^53 - 1), exactly (past 2^64 before the division).
        assert_eq!(per.cost(&[Some((1 << 53) - 1); MAX_PATHS]), 8 * ((1 << 53) - 1));
        let odd = weighing(&[999_999_999_999, -1], 1_000_000_000);
        // (999,999,999,999 × (2^53 - 1) - 5) / 10^9, rounded up, computed exactly.
        let exact = (999_999_999_999u128 * ((1u128 << 53) - 1) - 5).div_ceil(1_000_000_000);
        assert_eq!(u128::from(odd.cost(&[Some((1 << 53) - 1), Some(5)])), exact);
        let bottom = weighing(&[-1_000_000_000_000; MAX_PATHS], 1);
        assert_eq!(bottom.cost(&[Some(u64::MAX); MAX_PATHS]), 0);
        assert_eq!(top.most(u64::MAX), u64::MAX);
    }

    /// A price as the configuration accepts it: up to `MAX_PATHS` weights
    /// of at most 10^12 either way, per 1 to 10^9; values of any size.
    #[cfg(not(target_arch = "wasm32"))]
    fn priced() -> impl proptest::strategy::Strategy<Value = (Weighing, Vec<Option<u64>>)> {
        use proptest::prelude::*;
        let weight = -1_000_000_000_000i64..=1_000_000_000_000;
        let value = prop_oneof![Just(None), (0u64..=1_000_000).prop_map(Some), any::<u64>().prop_map(Some)];
        (proptest::collection::vec((weight, value), 0..=MAX_PATHS), 1u64..=1_000_000_000).prop_map(|(fields, per)| {
            let w: Vec<i64> = fields.iter().map(|f| f.0).collect();
            (weighing(&w, per), fields.into_iter().map(|f| f.1).collect())
        })
    }

    #[cfg(not(target_arch = "wasm32"))]
    proptest::proptest! {
        #[test]
        fn a_price_is_never_less_than_exact_and_at_most_one_unit_more((price, values) in priced()) {
            let exact: i128 =
                price.weights.iter().zip(&values).map(|(w, v)| i128::from(*w) * i128::from(v.unwrap_or(0))).sum();
            let per = i128::from(price.per);
            let cost = price.cost(&values);
            if exact <= 0 {
                proptest::prop_assert_eq!(cost, 0);
            } else if exact > i128::from(u64::MAX) * per {
                proptest::prop_assert_eq!(cost, u64::MAX, "past u64: saturated");
            } else {
                let charged = i128::from(cost) * per;
                proptest::prop_assert!(charged >= exact, "{} units of {} is less than the exact {}", cost, per, exact);
                proptest::prop_assert!(charged - per < exact, "{} units of {} is a unit or more past {}", cost, per, exact);
            }
            // `most` bounds what as many units at any of the weights cost.
            if let Some(units) = values.iter().try_fold(0u64, |sum, v| sum.checked_add(v.unwrap_or(0))) {
                proptest::prop_assert!(price.most(units) >= cost, "most({}) = {} < {}", units, price.most(units), cost);
            }
        }
    }
}
