//! Stage two: the client's identity under a key group's key. A key part
//! the request does not have makes the group not apply; one with several
//! different values, or a body field that cannot be read, refuses the
//! request (which value the upstream would use is unknown), unless every
//! rule of the group only watches.

use super::reads::part_name;
use super::{body_refusal, Decided, DecidedBy, Env};
use crate::config::{BodyInvalid, KeyGroup};
use crate::fingerprint::IdentityDigest;
use crate::identity::{identity_within, Identity};
use crate::metrics::{Event, Metrics};
use crate::ratelimit_fields::PartitionKey;
use crate::request::{Request, RequestSource};
use crate::response::bad_request;
use crate::shared::SharedData;

/// Who a request is under one key group.
#[derive(Clone, Debug)]
pub(super) struct Who {
    /// The escaped identity (the keys' hash tag).
    pub(super) identity: String,
    /// Its digest (deny cache, fallback and lease fingerprints).
    pub(super) digest: IdentityDigest,
    /// Its partition key, when a rule of the group sends the IETF fields.
    pub(super) partition: Option<PartitionKey>,
}

/// Who `req` is under `group` (its first applying rule: `first`); `None`
/// when a key part is absent.
pub(super) fn identify<R, S, M>(
    env: &Env<'_, S, M>,
    req: &Request<'_, R>,
    group: &KeyGroup,
    first: usize,
) -> Result<Option<Who>, Box<Decided>>
where
    R: RequestSource + ?Sized,
    S: SharedData + ?Sized,
    M: Metrics + ?Sized,
{
    let config = env.config;
    let max_body = group.body.map_or(u64::MAX, |b| b.max_bytes);
    let identity = match identity_within(&group.key, group.identity, req, config.xff_trusted_hops, max_body) {
        Identity::Key(k) => k,
        Identity::Absent => return Ok(None),
        Identity::Conflicting(_) if group.shadow => return Ok(None),
        Identity::Conflicting(part) => {
            env.metrics.count(first, Event::BadRequest);
            let what = format!("{} has several different values", part_name(&group.key[part]));
            let reply = bad_request("ambiguous_identity", &config.rules[first].name, &what);
            return Err(Box::new(Decided::refused(reply, first, DecidedBy::Key)));
        }
        Identity::BodyUnreadable(..)
            if group.shadow || group.body.is_some_and(|b| b.invalid == BodyInvalid::Absent) =>
        {
            return Ok(None)
        }
        Identity::BodyUnreadable(part, problem) => {
            env.metrics.count(first, Event::BadRequest);
            let part = part_name(&group.key[part]);
            let reply = body_refusal(&problem, &config.rules[first].name, &part);
            return Err(Box::new(Decided::refused(reply, first, DecidedBy::Body)));
        }
    };
    let digest = IdentityDigest::of(&identity);
    let ietf = group.rules.iter().any(|&r| config.rules[r].headers.unwrap_or(config.headers).ietf);
    let partition = ietf.then(|| PartitionKey::of(&identity));
    Ok(Some(Who { identity, digest, partition }))
}
