//! `make demo-nginx`: Redis, webdis, NGINX with ngx_wasm_module and
//! envoy-config/nginx.conf as shipped, and an upstream, all on loopback; a
//! short burst; a table of what the clients saw; then everything is stopped.

// A demo driver: a failure to start a server ends it with that message.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use host_tests::demo_table::{show_keys, show_shipped_rules};
use host_tests::nginx::NginxStack;

fn main() {
    println!(
        "Starting redis-server, webdis, an upstream and NGINX (2 worker processes) with envoy-config/nginx.conf ..."
    );
    let stack = match NginxStack::try_start(None) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("NGINX refused to start:\n{}", e.log);
            std::process::exit(1);
        }
    };
    println!(
        "  redis 127.0.0.1:{}  webdis 127.0.0.1:{}  nginx 127.0.0.1:{}\n",
        stack.redis.port, stack.webdis.port, stack.nginx.port
    );
    show_shipped_rules(|method, path| stack.send(method, path, &[]));
    show_keys(&mut stack.redis.connect());
    drop(stack);
    println!("\nStopped everything.");
}
