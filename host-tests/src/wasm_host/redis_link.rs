//! One VM's connection to a real redis-server, as Higress keeps one
//! pipelined connection per worker: commands are written when dispatched
//! and replies are read first in, first out, so a reply can only ever be
//! matched to the command it answers. AUTH and SELECT go first on each new
//! connection, as the host (not the module) sends them.

use std::collections::{HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::resp;

/// How long a real redis-server may take before the test gives up on it.
const IO_BOUND: Duration = Duration::from_secs(10);

/// Credentials and database of a connection, from `proxy_redis_init` and the cluster string.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Login {
    /// ACL user (empty: none).
    pub username: String,
    /// Password (empty: no AUTH).
    pub password: String,
    /// Database to SELECT.
    pub db: Option<u32>,
}

/// A live connection.
pub struct RedisLink {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Calls written and not yet read, oldest first.
    sent: VecDeque<u64>,
    /// Replies read ahead of their delivery.
    read: HashMap<u64, Vec<u8>>,
    /// Which connection this is (a reconnect makes a new one).
    pub generation: u64,
    /// The replies to the host's own AUTH / SELECT.
    pub handshake: Vec<Vec<u8>>,
}

impl RedisLink {
    /// Connects and logs in; `None` when nothing listens (the module sees
    /// status 1, as with a connect failure in Higress).
    pub fn open(port: u16, login: &Login, generation: u64) -> Option<RedisLink> {
        // Printed with the test's output if it fails: why the module saw status 1.
        let stream = TcpStream::connect(("127.0.0.1", port))
            .map_err(|e| eprintln!("redis link {generation}: connecting to port {port} failed: {e}"))
            .ok()?;
        stream.set_read_timeout(Some(IO_BOUND)).unwrap();
        stream.set_write_timeout(Some(IO_BOUND)).unwrap();
        let mut link = RedisLink {
            stream,
            buf: Vec::new(),
            sent: VecDeque::new(),
            read: HashMap::new(),
            generation,
            handshake: Vec::new(),
        };
        let mut hello = Vec::new();
        if !login.password.is_empty() {
            hello.push(if login.username.is_empty() {
                resp::command(&["AUTH", &login.password])
            } else {
                resp::command(&["AUTH", &login.username, &login.password])
            });
        }
        if let Some(db) = login.db {
            hello.push(resp::command(&["SELECT", &db.to_string()]));
        }
        for cmd in hello {
            let reply = link.stream.write_all(&cmd).map_err(|e| e.to_string()).and_then(|()| link.read_one());
            match reply {
                Ok(reply) => link.handshake.push(reply),
                Err(e) => {
                    eprintln!("redis link {generation}: logging in on port {port} failed: {e}");
                    return None;
                }
            }
        }
        Some(link)
    }

    /// Writes call `id`'s command and reads its reply ahead (kept until
    /// the call is delivered): the command runs in Redis at the instant it
    /// was dispatched, whatever the test does next (a test moving the
    /// store's clock must not race Redis reading its socket). False if the
    /// connection broke.
    pub fn send(&mut self, id: u64, query: &[u8]) -> bool {
        if let Err(e) = self.stream.write_all(query) {
            eprintln!("redis link {}: writing call {id} failed: {e}", self.generation);
            return false;
        }
        self.sent.push_back(id);
        match self.reply(id) {
            Some(bytes) => {
                self.read.insert(id, bytes);
                true
            }
            None => false,
        }
    }

    /// The reply to call `id`, reading (and keeping) the replies of the
    /// calls written before it; `None` if the connection broke.
    pub fn reply(&mut self, id: u64) -> Option<Vec<u8>> {
        while !self.read.contains_key(&id) {
            let Some(oldest) = self.sent.pop_front() else {
                eprintln!("redis link {}: call {id} was never written on it", self.generation);
                return None;
            };
            match self.read_one() {
                Ok(bytes) => self.read.insert(oldest, bytes),
                Err(e) => {
                    eprintln!("redis link {}: reading the reply to call {oldest} failed: {e}", self.generation);
                    return None;
                }
            };
        }
        self.read.remove(&id)
    }

    fn read_one(&mut self) -> Result<Vec<u8>, String> {
        loop {
            if let Some(len) = resp::frame(&self.buf)? {
                return Ok(self.buf.drain(..len).collect());
            }
            let mut chunk = [0u8; 16 * 1024];
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err("connection closed".into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    panic!("redis-server did not answer within {IO_BOUND:?}")
                }
                // A signal is no reason to give up on the connection.
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    }
}
