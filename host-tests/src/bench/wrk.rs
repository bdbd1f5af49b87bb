//! One wrk run and what it printed: requests, rate, latency percentiles.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The readings of one run.
#[derive(Clone, Copy, Debug, Default)]
pub struct WrkRun {
    /// Requests completed.
    pub requests: u64,
    /// Requests per second.
    pub rate: f64,
    /// Median latency, µs.
    pub p50_us: f64,
    /// 99th percentile latency, µs.
    pub p99_us: f64,
    /// Responses other than 2xx/3xx.
    pub non_2xx: u64,
}

/// `wrk -t1 -c<connections> -d<duration> --latency <url>`, the same for every
/// variant.
pub fn run(url: &str, connections: u32, duration: Duration) -> WrkRun {
    run_script(url, connections, duration, None)
}

/// The same, with wrk's Lua `script` (`-s`) shaping the requests.
pub fn run_script(url: &str, connections: u32, duration: Duration, script: Option<&Path>) -> WrkRun {
    let mut cmd = Command::new("wrk");
    cmd.args(["-t1", &format!("-c{connections}"), &format!("-d{}s", duration.as_secs().max(1)), "--latency"]);
    if let Some(script) = script {
        cmd.arg("-s").arg(script);
    }
    let out = cmd.arg(url).output().unwrap_or_else(|e| panic!("cannot run wrk (make setup installs it): {e}"));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    parse(&text).unwrap_or_else(|| panic!("cannot read wrk's output:\n{text}"))
}

/// A wrk script sending `x-api-key: key-<i>`, i going round robin over
/// 1..=`identities` (1: always `key-1`). Every case sends it, so that the
/// header and the script's cost are the same whatever the variant.
pub fn api_key_script(identities: u32) -> String {
    format!(
        "local i = 0\nrequest = function()\n  i = i % {identities} + 1\n  \
         return wrk.format(nil, nil, {{[\"x-api-key\"] = \"key-\" .. i}})\nend\n"
    )
}

/// A wrk script sending `x-api-key: key-<i>`, i drawn from a Zipf
/// distribution of exponent `s` over 1..=`identities` (key-1 the most
/// frequent): the skew of real API traffic. A fixed seed, so every case
/// and round sends the same sequence.
pub fn zipf_script(identities: u32, s: f64) -> String {
    format!(
        "local n, s = {identities}, {s}\nlocal cdf, total = {{}}, 0\nfor i = 1, n do total = total + 1 / i ^ s; cdf[i] = total end\n\
         for i = 1, n do cdf[i] = cdf[i] / total end\nmath.randomseed(42)\nrequest = function()\n  \
         local u, lo, hi = math.random(), 1, n\n  while lo < hi do local mid = math.floor((lo + hi) / 2)\n    \
         if cdf[mid] < u then lo = mid + 1 else hi = mid end end\n  \
         return wrk.format(nil, nil, {{[\"x-api-key\"] = \"key-\" .. lo}})\nend\n"
    )
}

/// Reads wrk's report.
pub fn parse(text: &str) -> Option<WrkRun> {
    let mut r = WrkRun::default();
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["50%", v] => r.p50_us = micros(v)?,
            ["99%", v] => r.p99_us = micros(v)?,
            [n, "requests", "in", ..] => r.requests = n.parse().ok()?,
            ["Requests/sec:", v] => r.rate = v.parse().ok()?,
            ["Non-2xx", "or", "3xx", "responses:", n] => r.non_2xx = n.parse().ok()?,
            _ => {}
        }
    }
    (r.requests > 0).then_some(r)
}

/// "635.91us", "1.20ms", "2.00s" in µs.
fn micros(v: &str) -> Option<f64> {
    let (num, scale) = if let Some(n) = v.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = v.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1e6)
    } else {
        return None;
    };
    num.parse::<f64>().ok().map(|x| x * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_report() {
        let text = "Running 1s test @ http://127.0.0.1:1/\n  Latency Distribution\n     50%  635.91us\n     \
                    99%    2.02ms\n  469 requests in 1.00s, 1.95MB read\n  Non-2xx or 3xx responses: 12\n\
                    Requests/sec:    467.31\n";
        let r = parse(text).unwrap();
        assert_eq!((r.requests, r.non_2xx), (469, 12));
        assert!((r.p50_us - 635.91).abs() < 1e-9 && (r.p99_us - 2020.0).abs() < 1e-9 && (r.rate - 467.31).abs() < 1e-9);
    }
}
