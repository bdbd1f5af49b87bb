//! What the status tests run: a short day of traffic (admissions, a
//! denial, a deny-cache hit, an open and a closed rule, a request no rule
//! matches, the INFO poll), and how each request must end whatever status
//! a hostcall returned: decided (continued, 429 or 503), or still paused
//! only when the host took the stream out of the module's hands.

use host_tests::wasm_host::{Host, Request, State};

use crate::fixture::Kind;

/// A closed and an open rule of 2 an hour, the INFO poll every second.
pub const RULES: &str = r#"
  {"name":"closed","match":{"path_prefix":"/closed"},"key":["client_ip"],"failure_mode":"closed",
   "limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]},
  {"name":"open","match":{"path_prefix":"/open"},"key":["client_ip"],"failure_mode":"open",
   "limits":[{"algorithm":"fixed_window","limit":2,"window":"1h"}]}"#;

/// The configuration the status tests run under.
pub fn config(kind: Kind) -> String {
    kind.config_full(RULES, r#","stats_interval":"1s""#, "")
}

/// Hostcalls through which the module hands a stream back to the host
/// (resume, local reply, switching to the stream's context): when one of
/// them fails or only pretends to work, the stream may stay paused until
/// the client leaves, and the module can do nothing about it.
const HANDS_BACK: [&str; 3] = ["proxy_continue_stream", "proxy_send_local_response", "proxy_set_effective_context"];

/// Store-call dispatches: an injected Ok claims a call that never answers.
const DISPATCH: [&str; 2] = ["proxy_http_call", "proxy_redis_call"];

/// How many injections so far could leave a stream paused for good.
pub fn excuses(host: &Host) -> u64 {
    let hands_back: u64 = HANDS_BACK.iter().map(|h| host.hostcall_count(h).injected).sum();
    let claimed: u64 = DISPATCH.iter().map(|h| host.hostcall_count(h).injected_ok).sum();
    hands_back + claimed
}

/// Statuses injected so far, per hostcall.
fn injected(host: &Host) -> Vec<(String, u64)> {
    host.hostcalls().into_iter().map(|h| (h.clone(), host.hostcall_count(&h).injected)).collect()
}

/// Sends one request on VM `vm` and takes it to its end: run the host,
/// then past the store's timeout (25 ms); a stream still paused then is
/// closed (the client leaves). Returns the status the client got (`None`:
/// it left), or what is wrong with the ending.
pub fn drive(host: &mut Host, vm: usize, request: Request) -> Result<Option<u32>, String> {
    let before = excuses(host);
    let injected_before = injected(host);
    let what =
        format!("{} {}", String::from_utf8_lossy(request.headers.first(":path").unwrap_or_default()), request.source);
    let id = host.begin(vm, request);
    host.run_until_idle();
    if host.state(id) == State::Waiting {
        host.advance(30);
    }
    if host.state(id) == State::Waiting {
        host.close(id);
        // A VM that trapped leaves its streams paused: the trap is the failure.
        let excused = excuses(host) > before || host.failed(vm);
        let during: Vec<String> = injected(host)
            .into_iter()
            .zip(injected_before)
            .filter(|((_, n), (_, m))| n > m)
            .map(|((h, n), (_, m))| format!("{h} x{}", n - m))
            .collect();
        if excused {
            return Ok(None);
        }
        return Err(format!("{what}: left paused with no store call in flight (statuses injected: {during:?})"));
    }
    let r = host.finish(id);
    match r.status {
        200 | 429 | 503 => Ok(Some(r.status)),
        s => Err(format!("{what}: answered {s}")),
    }
}

/// What one round gives the clients when nothing is injected.
pub const CLEAN_ROUND: [Option<u32>; 6] = [Some(200), Some(200), Some(429), Some(429), Some(200), Some(200)];

/// One round of traffic on VM `vm` from clients `client` to `client + 2`
/// (the store is shared by every host of a test: give each round its own
/// clients): two admissions, a denial and a deny-cache hit on the closed
/// rule, one on the open rule, one no rule matches, then the clock passes a
/// tick. Returns what each client got, and what went wrong (traps are the
/// caller's to read).
pub fn round(host: &mut Host, vm: usize, client: u32) -> (Vec<Option<u32>>, Vec<String>) {
    let from = |path: &str, n: u32| Request::get(path).from(&format!("10.2.{}.{}:1", n / 250, n % 250));
    let requests = [
        from("/closed", client),
        from("/closed", client),
        from("/closed", client),
        from("/closed", client),
        from("/open", client + 1),
        from("/none", client + 2),
    ];
    let (mut got, mut wrong) = (Vec::new(), Vec::new());
    for r in requests {
        match drive(host, vm, r) {
            Ok(status) => got.push(status),
            Err(w) => wrong.push(w),
        }
    }
    host.advance(1_000);
    (got, wrong)
}

/// A trap report's gist: where it trapped, and the module's panic message
/// (the SDK logs it) or else its stderr.
pub fn gist(report: &str) -> String {
    let head = report.lines().next().unwrap_or("");
    let head = head.split(": error while executing").next().unwrap_or(head);
    let lines: Vec<&str> = report.lines().map(str::trim).collect();
    let panic = match lines.iter().position(|l| l.contains("panicked at")) {
        Some(i) => lines[i..(i + 2).min(lines.len())].join(" "),
        None => lines.iter().skip_while(|l| **l != "module stderr:").nth(1).copied().unwrap_or("").to_string(),
    };
    format!("{head} | {panic}")
}
