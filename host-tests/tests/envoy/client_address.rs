//! Whose address `client_ip` is. With `xff_trusted_hops: 0` the filter
//! reads `source.address`, which Envoy's connection manager has already
//! replaced by an X-Forwarded-For entry unless it trusts none: with
//! `use_remote_address: false` (Envoy's default) and no trusted hops, the
//! LAST entry, which a client writes itself. Each setting is shown twice:
//! by the probe module reading `source.address`, and by the filter with a
//! `client_ip` rule of limit 1 and clients that send their own
//! X-Forwarded-For.

use std::time::Duration;

use host_tests::backend::Backend;
use host_tests::envoy::{start_edited, Edit, Envoy};
use host_tests::http::{agent, send, Answer};
use host_tests::probe_module::{write_probe, NOT_FOUND, NOT_FOUND_BODY};
use host_tests::process::{free_port, TempDir};
use host_tests::stack::Stack;

/// The shipped connection-manager setting.
const SHIPPED: &str = "use_remote_address: true";
/// Envoy's default.
const NO_REMOTE: Edit<'static> = Edit { from: SHIPPED, to: "use_remote_address: false" };
/// Behind one trusted proxy that appends the client to X-Forwarded-For.
const ONE_TRUSTED_HOP: Edit<'static> =
    Edit { from: SHIPPED, to: "use_remote_address: true\n          xff_num_trusted_hops: 1" };

/// A `client_ip` rule of limit 1 (a day, so the test never crosses a window).
fn per_ip(xff_trusted_hops: u32) -> String {
    format!(
        r#"{{"domain":"t","store":{{"cluster":"ratelimit_store","authority":"webdis","timeout_ms":1000}},
            "client_ip":{{"xff_trusted_hops":{xff_trusted_hops}}},
            "rules":[{{"name":"per-ip","key":["client_ip"],"limits":[{{"limit":1,"window":"1d"}}]}}]}}"#
    )
}

/// The statuses of requests with these X-Forwarded-For values (`""`: none).
fn statuses(stack: &Stack, xffs: &[&str]) -> Vec<u16> {
    xffs.iter()
        .map(|xff| {
            let headers: &[(&str, &str)] = if xff.is_empty() { &[] } else { &[("x-forwarded-for", xff)] };
            stack.send("GET", "/", headers).status
        })
        .collect()
}

fn filter_stack(xff_trusted_hops: u32, edits: &[Edit<'_>]) -> Stack {
    Stack::start_edited(&per_ip(xff_trusted_hops), 1, edits, &[]).unwrap_or_else(|e| panic!("{}", e.log))
}

/// The property at `path` (parts separated by `/`) as the probe module
/// reads it with proxy_get_property, for a request with this X-Forwarded-For.
fn property(envoy: &Envoy, path: &str, xff: &str) -> Answer {
    let url = format!("http://127.0.0.1:{}/", envoy.port);
    send(&agent(Duration::from_secs(10)), "GET", &url, &[("x-probe-property", path), ("x-forwarded-for", xff)])
}

fn probe_envoy(backend: &Backend, dir: &TempDir, edits: &[Edit<'_>]) -> Envoy {
    start_edited(backend.port, free_port(), &write_probe(dir.path()), "{}", 1, edits, &[])
        .unwrap_or_else(|e| panic!("{}", e.log))
}

#[test]
fn with_envoys_default_use_remote_address_false_a_client_picks_its_own_client_ip() {
    let (backend, dir) = (Backend::start(), TempDir::new("probe"));
    let envoy = probe_envoy(&backend, &dir, &[NO_REMOTE]);
    assert_eq!(property(&envoy, "source/address", "9.9.9.9, 6.6.6.6").body, "6.6.6.6:0");

    let stack = filter_stack(0, &[NO_REMOTE]);
    // Each made-up address is a fresh client with a fresh budget...
    assert_eq!(statuses(&stack, &["1.1.1.1", "2.2.2.2", "10.0.0.1, 3.3.3.3"]), [200, 200, 200]);
    // ...and the limit is kept per made-up address, not per connection.
    assert_eq!(statuses(&stack, &["1.1.1.1", "7.7.7.7, 2.2.2.2"]), [429, 429]);
}

#[test]
fn with_the_shipped_use_remote_address_true_the_client_is_the_connection() {
    let (backend, dir) = (Backend::start(), TempDir::new("probe"));
    let envoy = probe_envoy(&backend, &dir, &[]);
    let a = property(&envoy, "source/address", "9.9.9.9, 6.6.6.6");
    assert!(a.body.starts_with("127.0.0.1:"), "{a:?}");

    let stack = filter_stack(0, &[]);
    assert_eq!(statuses(&stack, &["", "1.1.1.1", "2.2.2.2"]), [200, 429, 429]);
}

#[test]
fn behind_one_trusted_proxy_envoys_hop_count_and_the_filters_give_the_same_client() {
    let (backend, dir) = (Backend::start(), TempDir::new("probe"));
    let envoy = probe_envoy(&backend, &dir, &[ONE_TRUSTED_HOP]);
    // The proxy in front appended 6.6.6.6; what the client wrote before it does not count.
    assert_eq!(property(&envoy, "source/address", "9.9.9.9, 6.6.6.6").body, "6.6.6.6:0");

    // Envoy trusts one hop, the filter reads source.address (0)...
    let envoy_hops = filter_stack(0, &[ONE_TRUSTED_HOP]);
    // ...or Envoy trusts none and appends the connection itself, and the
    // filter takes the second entry from the right (2).
    let filter_hops = filter_stack(2, &[]);
    for stack in [&envoy_hops, &filter_hops] {
        let xffs = ["9.9.9.9, 6.6.6.6", "8.8.8.8, 6.6.6.6", "6.6.6.6", "9.9.9.9, 7.7.7.7"];
        assert_eq!(statuses(stack, &xffs), [200, 429, 429, 200]);
    }
}

#[test]
fn no_attribute_names_the_direct_peer_but_set_filter_state_can_hand_it_to_the_filter() {
    let (backend, dir) = (Backend::start(), TempDir::new("probe"));
    // Envoy 1.40's `source` has `address` and `port` only, both after the
    // X-Forwarded-For processing; `connection` has no address at all.
    let spoofable = probe_envoy(&backend, &dir, &[NO_REMOTE]);
    for path in ["source/direct_address", "source/direct_remote_address", "connection/remote_address"] {
        let a = property(&spoofable, path, "6.6.6.6");
        assert_eq!((a.status, a.body.as_str()), (NOT_FOUND, NOT_FOUND_BODY), "{path}");
    }
    assert_eq!(property(&spoofable, "source/address", "6.6.6.6").body, "6.6.6.6:0");

    // The direct peer is available to a formatter; set_filter_state, placed
    // before the wasm filter, stores it where proxy_get_property reads it.
    let set_peer = Edit {
        from: "          http_filters:\n",
        to: "          http_filters:
          - name: envoy.filters.http.set_filter_state
            typed_config:
              \"@type\": type.googleapis.com/envoy.extensions.filters.http.set_filter_state.v3.Config
              on_request_headers:
              - object_key: ratelimit.direct_peer
                factory_key: envoy.string
                format_string:
                  text_format_source: { inline_string: \"%DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT%\" }
",
    };
    let dir = TempDir::new("probe");
    let envoy = probe_envoy(&backend, &dir, &[NO_REMOTE, set_peer]);
    let a = property(&envoy, "filter_state/ratelimit.direct_peer", "6.6.6.6");
    assert_eq!((a.status, a.body.as_str()), (200, "127.0.0.1"));
}
