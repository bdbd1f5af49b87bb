//! A small HTTP/1.1 server answering every GET with one fixed body, on
//! threads of the test process: where Envoy downloads a module from
//! (`vm_config.code.remote`).

use std::io::{BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::backend::read_request;

/// A running server; stops accepting when dropped.
pub struct FileServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Requests answered.
    pub served: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl FileServer {
    /// Serves `body` (as application/wasm) on a free loopback port.
    pub fn start(body: Vec<u8>) -> FileServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st, body) = (served.clone(), stop.clone(), Arc::new(body));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(conn) = conn {
                    let (s, body) = (s.clone(), body.clone());
                    std::thread::spawn(move || serve(conn, &body, &s));
                }
            }
        });
        FileServer { port, served, stop }
    }

    /// How many requests it answered.
    pub fn requests(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wake the accept loop
    }
}

/// Answers each request of one keep-alive connection (GETs have no body).
fn serve(conn: TcpStream, body: &[u8], served: &AtomicU64) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut writer = conn;
    while read_request(&mut reader).is_some() {
        served.fetch_add(1, Ordering::Relaxed);
        let head =
            format!("HTTP/1.1 200 OK\r\ncontent-type: application/wasm\r\ncontent-length: {}\r\n\r\n", body.len());
        if writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(body)).is_err() {
            return;
        }
    }
}
