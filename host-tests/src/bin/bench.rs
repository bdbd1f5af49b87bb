//! `make bench` (work in progress).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

fn main() {
    let quick = std::env::var_os("BENCH_QUICK").is_some();
    let t = std::time::Instant::now();
    let s = host_tests::bench::accuracy::run(quick);
    println!("{}", s.body);
    for t in &s.targets {
        println!("{t:?}");
    }
    eprintln!("{:?}", t.elapsed());
}
