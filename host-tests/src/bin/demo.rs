//! `make demo`: Redis, webdis, Envoy with envoy-config/envoy.yaml as shipped
//! and an upstream, all on loopback; a short burst; a table of what the
//! clients saw; then everything is stopped.

// A demo driver: a failure to start a server ends it with that message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use host_tests::demo_table::{show_keys, show_shipped_rules};
use host_tests::stack::Stack;

fn main() {
    println!("Starting redis-server, webdis, an upstream and Envoy 1.40 (2 workers) with envoy-config/envoy.yaml ...");
    let stack = match Stack::start_shipped(2) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("Envoy refused to start:\n{}", e.log);
            std::process::exit(1);
        }
    };
    println!(
        "  redis 127.0.0.1:{}  webdis 127.0.0.1:{}  envoy 127.0.0.1:{} (admin {})\n",
        stack.redis.port, stack.webdis.port, stack.envoy.port, stack.envoy.admin
    );

    show_shipped_rules(|method, path| stack.send(method, path, &[]));

    println!("\nEnvoy /stats (the filter's counters):");
    for line in stack.envoy.stats("wasmcustom.ratelimit").lines().filter(|l| !l.contains("No recorded values")) {
        println!("  {line}");
    }
    show_keys(&mut stack.redis.connect());
    drop(stack);
    println!("\nStopped everything.");
}
