//! Thousands of client connections at once, each sending a few requests
//! back to back on one keep-alive connection: the load under which a
//! worker holds thousands of decisions and charges together.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// The statuses of `connections` × `per_connection` requests sent to
/// 127.0.0.1:`port`: all connections open first, then each sends `request`
/// (the raw bytes of one HTTP/1.1 request, keep-alive) `per_connection`
/// times, each after the previous answer. 0 stands for a request that got
/// no answer (the connection ended or timed out after `timeout`).
pub fn keep_alive_burst(
    port: u16,
    connections: usize,
    per_connection: usize,
    request: &[u8],
    timeout: Duration,
) -> Vec<u16> {
    let barrier = Arc::new(Barrier::new(connections));
    let request = Arc::new(request.to_vec());
    let threads: Vec<_> = (0..connections)
        .map(|_| {
            let (barrier, request) = (barrier.clone(), request.clone());
            std::thread::Builder::new()
                .stack_size(128 * 1024)
                .spawn(move || {
                    let conn = TcpStream::connect(("127.0.0.1", port)).ok();
                    barrier.wait();
                    let Some(conn) = conn else { return vec![0; per_connection] };
                    let _ = conn.set_read_timeout(Some(timeout));
                    one_connection(conn, per_connection, &request)
                })
                .unwrap()
        })
        .collect();
    threads.into_iter().flat_map(|t| t.join().unwrap()).collect()
}

fn one_connection(conn: TcpStream, n: usize, request: &[u8]) -> Vec<u16> {
    let mut statuses = Vec::with_capacity(n);
    let mut writer = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    for _ in 0..n {
        let status = (|| -> Option<u16> {
            writer.write_all(request).ok()?;
            read_response(&mut reader)
        })();
        statuses.push(status.unwrap_or(0));
        if status.is_none() {
            statuses.resize(n, 0);
            break;
        }
    }
    statuses
}

/// Reads one response (content-length or chunked body); its status.
fn read_response(reader: &mut impl BufRead) -> Option<u16> {
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let status = line.split(' ').nth(1)?.parse().ok()?;
    let (mut length, mut chunked) = (0usize, false);
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let l = line.trim_end().to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.strip_prefix("content-length:") {
            length = v.trim().parse().ok()?;
        }
        if l.starts_with("transfer-encoding:") && l.contains("chunked") {
            chunked = true;
        }
    }
    if !chunked {
        let mut body = vec![0; length];
        reader.read_exact(&mut body).ok()?;
        return Some(status);
    }
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let size = usize::from_str_radix(line.trim(), 16).ok()?;
        let mut chunk = vec![0; size + 2];
        reader.read_exact(&mut chunk).ok()?;
        if size == 0 {
            return Some(status);
        }
    }
}
