//! Stage one: the rules of a key group that apply to a request (path,
//! method, headers, body conditions). A body condition that cannot be read
//! refuses the request, unless the rule only watches (shadow) or treats
//! such a body as absent: never a free pass by default.

use super::{body_refusal, Decided, DecidedBy, Env};
use crate::config::{BodyInvalid, KeyGroup};
use crate::metrics::{Event, Metrics};
use crate::request::{Request, RequestSource};
use crate::shared::SharedData;

/// The rules of `group` that apply to `req`, or the 400 of a body
/// condition no rule may skip.
pub(super) fn matched<R, S, M>(
    env: &Env<'_, S, M>,
    req: &Request<'_, R>,
    group: &KeyGroup,
) -> Result<Vec<usize>, Box<Decided>>
where
    R: RequestSource + ?Sized,
    S: SharedData + ?Sized,
    M: Metrics + ?Sized,
{
    let mut matched = Vec::new();
    for &r in &group.rules {
        let rule = &env.config.rules[r];
        if !rule.matcher.matches_headers(req) {
            continue;
        }
        let body = rule.request_body.unwrap_or_default();
        match rule.matcher.body_holds(req, body.max_bytes) {
            Ok(true) => matched.push(r),
            Ok(false) => {}
            Err(_) if rule.shadow || body.invalid == BodyInvalid::Absent => {}
            Err(problem) => {
                env.metrics.count(r, Event::BadRequest);
                let reply = body_refusal(&problem, &rule.name, "match.body");
                return Err(Box::new(Decided::refused(reply, r, DecidedBy::Body)));
            }
        }
    }
    Ok(matched)
}
