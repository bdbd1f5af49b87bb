//! Stage four: the refusals that need no store. What one request of a
//! rule costs at request time (a stated cost, the worst case its body
//! allows in reservation mode), and the price of the model it names:
//! a request whose body or header cannot say is refused with 400 (413 past
//! a body's bound), or, by a shadow rule, not counted.

use std::sync::Arc;

use super::pricing::{price_of, unpriced};
use super::reads::header_cost;
use super::reservation::worst_case;
use super::{body_refusal, Decided, DecidedBy, Env};
use crate::config::{Cost, Counts, Limit, Price};
use crate::metrics::{Event, Metrics};
use crate::request::{Request, RequestSource};
use crate::response::bad_request;
use crate::shared::SharedData;

/// What one request takes at request time, and its price (a priced rule).
pub(super) struct RuleCost {
    /// Units at request time.
    pub(super) units: u64,
    /// The price of the model its body names.
    pub(super) price: Option<Arc<Price>>,
}

/// What one request of rule `r` takes at request time, and its price (a
/// priced rule); `None` when a shadow rule cannot tell (it does not count
/// this request); the refusal when an enforced one cannot.
pub(super) fn cost_of<R, S, M>(
    env: &Env<'_, S, M>,
    req: &Request<'_, R>,
    r: usize,
) -> Result<Option<RuleCost>, Box<Decided>>
where
    R: RequestSource + ?Sized,
    S: SharedData + ?Sized,
    M: Metrics + ?Sized,
{
    let rule = &env.config.rules[r];
    let settings = rule.request_body.unwrap_or_default();
    let refuse = |reply, by| {
        env.metrics.count(r, Event::BadRequest);
        Err(Box::new(Decided::refused(reply, r, by)))
    };
    let price = match rule.cost.prices().map(|p| price_of(req.body(), p, settings)) {
        None => None,
        Some(Ok(price)) => Some(price),
        Some(Err(_)) if rule.shadow => return Ok(None),
        Some(Err(problem)) => return refuse(unpriced(&problem, &rule.name), DecidedBy::Price),
    };
    let cost = match &rule.cost {
        Cost::RequestHeader { name, max, default } => match header_cost(req, name, *max, *default) {
            Some(c) => c,
            None if rule.shadow => return Ok(None),
            None => {
                let what = format!("{name} must be one integer from 1 to {max}");
                return refuse(bad_request("bad_request_cost", &rule.name, &what), DecidedBy::Cost);
            }
        },
        Cost::Response { reservation: Some(reservation), max, .. } => {
            let cap = rule.limits.iter().filter(|l| l.counts == Counts::Cost).map(Limit::capacity).fold(*max, u64::min);
            match worst_case(req.body(), reservation, cap, settings, price.as_deref()) {
                Ok(units) => units,
                Err(_) if rule.shadow => return Ok(None),
                Err((problem, part)) => return refuse(body_refusal(&problem, &rule.name, &part), DecidedBy::Body),
            }
        }
        other => other.max_at_request(),
    };
    Ok(Some(RuleCost { units: cost, price }))
}
