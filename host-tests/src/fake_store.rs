//! A store gateway that misbehaves after its headers: it stands where
//! webdis would and answers every request the same broken way, so a test
//! can show the filter takes each failure for a store error (the rule's
//! policy), for decisions and for the INFO poll alike.

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::backend::read_request;
use crate::test_server::TestServer;

/// How every answer breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Misbehavior {
    /// `content-length: 100`, 10 bytes, then the connection closes.
    CutShort,
    /// The headers and part of the body, then nothing for `ms`.
    StallAfterHeaders(u64),
    /// A well-formed 64 MB body.
    Huge,
}

/// A running fake store; stops accepting when dropped.
pub struct FakeStore(TestServer);

impl std::ops::Deref for FakeStore {
    type Target = TestServer;
    fn deref(&self) -> &TestServer {
        &self.0
    }
}

impl FakeStore {
    /// Starts listening on a free loopback port, misbehaving `how`.
    pub fn start(how: Misbehavior) -> FakeStore {
        FakeStore(TestServer::start(move |conn, served: &AtomicU64| serve(conn, how, served)))
    }
}

fn serve(conn: TcpStream, how: Misbehavior, served: &AtomicU64) {
    let mut reader = BufReader::new(conn.try_clone().unwrap());
    let mut w = conn;
    while read_request(&mut reader).is_some() {
        served.fetch_add(1, Ordering::Relaxed);
        let head =
            |len: usize| format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {len}\r\n\r\n");
        match how {
            Misbehavior::CutShort => {
                let _ = w.write_all(format!("{}{{\"EVALSHA\":", head(100)).as_bytes());
                let _ = w.shutdown(std::net::Shutdown::Both);
                return;
            }
            Misbehavior::StallAfterHeaders(ms) => {
                let _ = w.write_all(format!("{}{{\"EVALSHA\":[1", head(100)).as_bytes());
                std::thread::sleep(Duration::from_millis(ms));
                let _ = w.shutdown(std::net::Shutdown::Both);
                return;
            }
            Misbehavior::Huge => {
                const SIZE: usize = 64 * 1024 * 1024;
                if w.write_all(head(SIZE).as_bytes()).is_err() {
                    return;
                }
                let chunk = vec![b' '; 1024 * 1024];
                for _ in 0..SIZE / chunk.len() {
                    if w.write_all(&chunk).is_err() {
                        return;
                    }
                }
            }
        }
    }
}
