//! The price a request of a priced rule is charged at: that of the model
//! its request body names (`cost.prices`).

use std::sync::Arc;

use crate::config::{BodyInvalid, BodySettings, Price, Prices};
use crate::request::{Body, BodyProblem};
use crate::response::{refused, LocalReply};

/// Why a request has no price.
#[derive(Debug, PartialEq)]
pub(super) enum PriceProblem {
    /// The body cannot say (what, and the field read).
    Body(BodyProblem, String),
    /// The model it names has none, and the rule no default.
    NotPriced,
}

/// The price of the model `body` names; a body the rule cannot read takes
/// the default when the rule treats it as absent.
pub(super) fn price_of(body: &Body, prices: &Prices, settings: BodySettings) -> Result<Arc<Price>, PriceProblem> {
    match body.field(prices.model.keys(), settings.max_bytes) {
        Ok(name) => prices.of(&name).cloned().ok_or(PriceProblem::NotPriced),
        Err(_) if settings.invalid == BodyInvalid::Absent => prices.default.clone().ok_or(PriceProblem::NotPriced),
        Err(problem) => Err(PriceProblem::Body(problem, format!("body:{}", prices.model))),
    }
}

/// The 400 of a request without a price (no byte of the body in it).
pub(super) fn unpriced(problem: &PriceProblem, rule: &str) -> LocalReply {
    match problem {
        PriceProblem::Body(p, part) => super::body_refusal(p, rule, part),
        PriceProblem::NotPriced => refused(400, "model_not_priced", rule, "the model the request names has no price"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BodyPath;
    use crate::usage::{Weighing, MAX_PATHS};
    use wasm_bindgen_test::wasm_bindgen_test;

    fn price(w: i64) -> Arc<Price> {
        let weighing = Weighing { weights: [w; MAX_PATHS], per: 1 };
        Arc::new(Price { json: weighing, event_stream: weighing })
    }

    fn prices(default: Option<Arc<Price>>) -> Prices {
        Prices { model: BodyPath::parse("model").unwrap(), models: vec![(b"gpt-4o".to_vec(), price(10))], default }
    }

    #[test]
    #[wasm_bindgen_test]
    fn the_models_price_else_the_default_else_refused() {
        let refuse = BodySettings::default();
        let absent = BodySettings { invalid: BodyInvalid::Absent, ..refuse };
        let table = prices(Some(price(3)));
        assert_eq!(price_of(&Body::of(br#"{"model":"gpt\u002d4o"}"#), &table, refuse), Ok(price(10)));
        assert_eq!(price_of(&Body::of(br#"{"model":"other"}"#), &table, refuse), Ok(price(3)));
        assert_eq!(price_of(&Body::of(br#"{"model":"other"}"#), &prices(None), refuse), Err(PriceProblem::NotPriced));
        assert_eq!(
            price_of(&Body::of(br#"{"x":1}"#), &table, refuse),
            Err(PriceProblem::Body(BodyProblem::Missing, "body:model".into()))
        );
        assert_eq!(price_of(&Body::of(br#"{"x":1}"#), &table, absent), Ok(price(3)));
        assert_eq!(price_of(&Body::of(b"nope"), &prices(None), absent), Err(PriceProblem::NotPriced));
        let reply = unpriced(&PriceProblem::NotPriced, "llm");
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (400, r#"{"error":"model_not_priced","rule":"llm","detail":"the model the request names has no price"}"#)
        );
    }
}
