//! How a stream ends: its response (a usage header, a body of some shape,
//! cut where the client went away) and what it owes for it.

use host_tests::wasm_host::State;

use crate::bodies::{body, charge};
use crate::rules::Kind;
use crate::world::World;

/// The default and max of the simulated costs that read a body.
const MAX_COST: u64 = 5000;

/// Stream `i` ends: completed by the upstream if it was let through (its
/// response reporting `usage`, a body of `shape`), or the client goes away
/// (`hang_up`): before the response (`cut` 0) or after its headers and
/// `cut - 1` chunks of its body. A stream still waiting for its decision
/// is closed (the client gone).
pub fn end(world: &mut World, i: usize, hang_up: bool, usage: u64, cut: u64, shape: u64) {
    let t = &world.streams[i];
    let (proxy, id, rule) = (t.proxy, t.id, world.rules.get(t.rule).clone());
    let admitted = world.hosts[proxy].state(id) == State::Continued;
    // A response uses at most what its request reserved.
    let usage = if t.reserved > 0 { 1 + (usage - 1) % t.reserved } else { usage };
    let prompt_bytes = t.prompt_bytes;
    let host = &mut world.hosts[proxy];
    let mut headers = None;
    let mut owed = None;
    // What the upstream worked on: the request body's units (4 bytes each).
    let prompt = prompt_bytes.div_ceil(4);
    if !admitted || (hang_up && cut == 0) {
        host.close(id);
        // Let through, gone before the response: the prompt, at least the default.
        owed = admitted.then_some(prompt.max(rule.default_cost).min(MAX_COST));
    } else {
        match rule.kind {
            Kind::ChargedHeader | Kind::Reserved => {
                let r = host.respond(id, &[("x-usage", &usage.to_string()), ("content-length", "0")], &[], true);
                headers = Some(r.headers);
                owed = Some(usage);
            }
            Kind::ChargedBody | Kind::ReservedBody => {
                let b = body(shape, usage);
                let delivered = if hang_up { (cut - 1) as usize } else { b.chunks.len() };
                let chunks: Vec<&[u8]> = b.chunks.iter().take(delivered).map(|c| c.as_bytes()).collect();
                let r = host.respond(id, &[("content-type", b.content_type)], &chunks, !hang_up);
                headers = Some(r.headers);
                owed = Some(charge(shape, usage, delivered, prompt, rule.default_cost, MAX_COST));
            }
            _ => headers = Some(host.respond(id, &[("content-length", "0")], &[], true).headers),
        }
        host.close(id);
    }
    let t = &mut world.streams[i];
    t.live = false;
    t.expected.clear();
    if matches!(rule.kind, Kind::ChargedHeader | Kind::ChargedBody | Kind::Reserved | Kind::ReservedBody) {
        t.charged = owed.or(admitted.then_some(0));
    }
    if let Some(h) = headers {
        crate::checks::on_response(world, i, &h);
    }
}
