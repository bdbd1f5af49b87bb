//! A fixed number of keep-alive HTTP/1.1 GETs over a few connections,
//! counted by status: wrk runs for a time, the abuse figure needs a count.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// Responses by status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// 200s.
    pub ok: u64,
    /// 429s.
    pub denied: u64,
    /// Anything else.
    pub other: u64,
}

impl Tally {
    fn add(&mut self, o: Tally) {
        self.ok += o.ok;
        self.denied += o.denied;
        self.other += o.other;
    }

    /// All responses.
    pub fn total(&self) -> u64 {
        self.ok + self.denied + self.other
    }
}

/// Sends `total` GETs of `/` with header `x-client: <client>` to 127.0.0.1:`port`
/// over `connections` connections, each sending its share one after another.
pub fn send_many(port: u16, client: &str, connections: u64, total: u64) -> Tally {
    let request = format!("GET / HTTP/1.1\r\nhost: bench\r\nx-client: {client}\r\n\r\n");
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..connections)
            .map(|c| {
                let share = total / connections + u64::from(c < total % connections);
                let request = request.as_bytes();
                s.spawn(move || connection(port, request, share))
            })
            .collect();
        let mut tally = Tally::default();
        for h in handles {
            tally.add(h.join().unwrap());
        }
        tally
    })
}

fn connection(port: u16, request: &[u8], count: u64) -> Tally {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_nodelay(true).unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut tally = Tally::default();
    for _ in 0..count {
        writer.write_all(request).unwrap();
        match read_response(&mut reader) {
            200 => tally.ok += 1,
            429 => tally.denied += 1,
            _ => tally.other += 1,
        }
    }
    tally
}

/// Reads one response (status line, headers, a content-length body); its status.
fn read_response(reader: &mut BufReader<TcpStream>) -> u16 {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut length = 0usize;
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    status
}
