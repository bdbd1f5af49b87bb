//! Store calls in flight and their history. A call is answered only when
//! the test runs the host: at its ready instant (a reply) or at its
//! deadline (the call's timeout), whichever comes first. A host that runs
//! many requests may keep no history: then only the calls in flight are
//! held, and the count of calls made.

use std::collections::BTreeMap;

use super::faults::Fault;
use super::header_map::HeaderMap;

/// Which hostcall made the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// `proxy_http_call`, answered on the root context (it owns the call).
    Http {
        /// The context that was active when it was dispatched.
        context: u32,
    },
    /// `proxy_redis_call` (Higress), answered on the root context.
    Redis,
}

/// What was asked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// An HTTP request to webdis.
    Http {
        /// The call's headers (`:method`, `:path`, `:authority`, ...).
        headers: HeaderMap,
        /// Its body.
        body: Vec<u8>,
    },
    /// One RESP command, as its arguments.
    Redis {
        /// The arguments, the command name first.
        args: Vec<Vec<u8>>,
    },
}

impl Request {
    /// The Redis command it carries: `EVALSHA`, `EVAL`, `SCRIPT LOAD`, ...
    pub fn command(&self) -> String {
        match self {
            Request::Http { headers, body } => {
                let path = String::from_utf8_lossy(headers.first(":path").unwrap_or_default());
                if path == "/" {
                    let text = String::from_utf8_lossy(body);
                    text.split('/').next().unwrap_or("").to_ascii_uppercase()
                } else {
                    path.trim_start_matches('/').split('/').collect::<Vec<_>>().join(" ").to_ascii_uppercase()
                }
            }
            Request::Redis { args } => {
                let name = args.first().map(|a| String::from_utf8_lossy(a).to_ascii_uppercase()).unwrap_or_default();
                match (name.as_str(), args.get(1)) {
                    ("SCRIPT", Some(sub)) => format!("SCRIPT {}", String::from_utf8_lossy(sub).to_ascii_uppercase()),
                    _ => name,
                }
            }
        }
    }

    /// The Redis command's arguments after its name (webdis: decoded from
    /// the path segments of the body).
    pub fn args(&self) -> Vec<String> {
        match self {
            Request::Http { body, .. } => {
                let text = String::from_utf8_lossy(body);
                text.split('/').skip(1).map(percent_decode).collect()
            }
            Request::Redis { args } => args.iter().skip(1).map(|a| String::from_utf8_lossy(a).into_owned()).collect(),
        }
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What the module is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// An HTTP response (`:status` among the headers).
    Http {
        /// Response headers, `:status` first.
        headers: HeaderMap,
        /// Body.
        body: Vec<u8>,
    },
    /// The HTTP call failed (reset, also after the headers arrived, or a
    /// body past Envoy's buffer limit): Envoy calls back with no headers and
    /// no body, and during that callback the response map does not exist
    /// (`proxy_get_header_map_value` answers BadArgument) nor does the body
    /// (`proxy_get_buffer_bytes` answers NotFound).
    HttpReset,
    /// A Redis reply (status 0) with these raw RESP bytes.
    Redis(Vec<u8>),
    /// Redis status 1: network error, timeout or closed connection; no bytes.
    RedisNetworkError,
}

/// Where the answer of a call comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Known already; delivered at `at_ms`.
    Ready {
        /// When it may be delivered.
        at_ms: u64,
        /// What.
        reply: Reply,
    },
    /// The real Redis's reply, read from the VM's connection (first in,
    /// first out) when delivered at `at_ms`.
    OnConnection {
        /// When it may be delivered.
        at_ms: u64,
        /// The connection it was written on (a reconnect is a new one).
        connection: u64,
    },
    /// Nothing comes: only the deadline fires.
    Never,
    /// Nothing ever comes, not even the timeout: a host that never calls back.
    Lost,
}

/// What became of a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Still in flight.
    Pending,
    /// Its reply was delivered at this instant.
    Delivered(u64),
    /// Its timeout fired at this instant.
    TimedOut(u64),
    /// The host will never call back (`Fault::NoCallback`).
    Lost,
}

/// One store call.
#[derive(Clone, Debug)]
pub struct Call {
    /// Sequence number across the host (set when recorded).
    pub id: u64,
    /// The VM that made it.
    pub vm: usize,
    /// The token returned to the module.
    pub token: u32,
    /// How it was made.
    pub transport: Transport,
    /// The cluster named.
    pub cluster: String,
    /// What was asked.
    pub request: Request,
    /// The fault applied.
    pub fault: Fault,
    /// When it was dispatched.
    pub dispatched_ms: u64,
    /// When its timeout fires.
    pub deadline_ms: u64,
    /// Where its answer comes from.
    pub answer: Answer,
    /// What became of it.
    pub outcome: Outcome,
}

impl Call {
    /// When something is due: its reply or its timeout.
    pub fn due_ms(&self) -> Option<u64> {
        if self.outcome != Outcome::Pending {
            return None;
        }
        let ready = match &self.answer {
            Answer::Ready { at_ms, .. } | Answer::OnConnection { at_ms, .. } => Some(*at_ms),
            Answer::Never => None,
            Answer::Lost => return None,
        };
        Some(ready.map_or(self.deadline_ms, |r| r.min(self.deadline_ms)))
    }

    /// Whether its reply (not its timeout) is what is due.
    pub fn reply_first(&self) -> bool {
        match &self.answer {
            Answer::Ready { at_ms, .. } | Answer::OnConnection { at_ms, .. } => *at_ms <= self.deadline_ms,
            Answer::Never | Answer::Lost => false,
        }
    }
}

/// The calls in flight, and those done if the history is kept.
#[derive(Debug)]
pub struct Calls {
    next_id: u64,
    pending: BTreeMap<u64, Call>,
    done: Vec<Call>,
    keep_history: bool,
    /// Calls dispatched since the test last took them, when it asked to
    /// see each (`Host::take_dispatched`).
    journal: Option<Vec<Call>>,
    /// With the journal: the calls answered since, each with whether the
    /// module got the store's own reply (not a timeout, an error the fault
    /// made up, a failed connection).
    answers: Vec<(u64, bool)>,
}

impl Default for Calls {
    fn default() -> Calls {
        Calls::new(true)
    }
}

impl Calls {
    /// No calls yet; `keep_history`: whether calls done are kept for `all`.
    pub fn new(keep_history: bool) -> Calls {
        Calls {
            next_id: 0,
            pending: BTreeMap::new(),
            done: Vec::new(),
            keep_history,
            journal: None,
            answers: Vec::new(),
        }
    }

    /// From now on, keeps each call dispatched until `take_dispatched`.
    pub fn keep_journal(&mut self) {
        self.journal.get_or_insert_with(Vec::new);
    }

    /// The calls dispatched since the last time, in dispatch order.
    pub fn take_dispatched(&mut self) -> Vec<Call> {
        self.journal.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// With the journal, notes that call `id` was answered (`from_store`:
    /// with the store's own reply).
    pub fn note_answer(&mut self, id: u64, from_store: bool) {
        if self.journal.is_some() {
            self.answers.push((id, from_store));
        }
    }

    /// The answers noted since the last time, in order.
    pub fn take_answers(&mut self) -> Vec<(u64, bool)> {
        std::mem::take(&mut self.answers)
    }

    /// The id the next call gets (its sequence number across the host).
    pub fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Records a call just dispatched (its id is `next_id`).
    pub fn push(&mut self, mut call: Call) {
        call.id = self.next_id;
        self.next_id += 1;
        if let Some(journal) = &mut self.journal {
            journal.push(call.clone());
        }
        if call.answer == Answer::Lost {
            call.outcome = Outcome::Lost;
            self.retire(call);
        } else {
            self.pending.insert(call.id, call);
        }
    }

    fn retire(&mut self, call: Call) {
        if self.keep_history {
            self.done.push(call);
        }
    }

    /// How many calls were made.
    pub fn made(&self) -> u64 {
        self.next_id
    }

    /// The call due first at or before `now_ms` (ties: dispatch order).
    pub fn next_due(&self, now_ms: u64) -> Option<u64> {
        self.pending
            .values()
            .filter_map(|c| c.due_ms().filter(|d| *d <= now_ms).map(|d| (d, c.id)))
            .min()
            .map(|(_, id)| id)
    }

    /// Settles pending call `id` (it is due) at `now_ms`: delivered if its
    /// reply comes first, else timed out. Returns it.
    pub fn settle(&mut self, id: u64, now_ms: u64) -> Option<Call> {
        let mut call = self.pending.remove(&id)?;
        call.outcome = if call.reply_first() { Outcome::Delivered(now_ms) } else { Outcome::TimedOut(now_ms) };
        if self.keep_history {
            self.done.push(call.clone());
        }
        Some(call)
    }

    /// The earliest instant anything is due.
    pub fn next_instant(&self) -> Option<u64> {
        self.pending.values().filter_map(Call::due_ms).min()
    }

    /// Fails, at `now_ms`, every call of VM `vm` still waiting on Redis
    /// connection `generation` (it was closed): status 1.
    pub fn fail_connection(&mut self, vm: usize, generation: u64, now_ms: u64) {
        for c in self.pending.values_mut().filter(|c| c.vm == vm) {
            if matches!(c.answer, Answer::OnConnection { connection, .. } if connection == generation) {
                c.answer = Answer::Ready { at_ms: now_ms, reply: Reply::RedisNetworkError };
            }
        }
    }

    /// Drops every call VM `vm` still waits for: the VM is gone, and a host
    /// cancels a destroyed VM's calls (Envoy's context cancels its pending
    /// HTTP requests) rather than hand their replies, under tokens the new
    /// VM reuses, to the VM that replaces it.
    pub fn cancel_vm(&mut self, vm: usize) {
        let gone: Vec<u64> = self.pending.values().filter(|c| c.vm == vm).map(|c| c.id).collect();
        for id in gone {
            if let Some(mut call) = self.pending.remove(&id) {
                call.outcome = Outcome::Lost;
                self.retire(call);
            }
        }
    }

    /// How many are in flight (a call the host will never answer is not).
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Every call made (only those in flight without history), in order.
    pub fn all(&self) -> Vec<Call> {
        let mut all: Vec<Call> = self.done.iter().chain(self.pending.values()).cloned().collect();
        all.sort_by_key(|c| c.id);
        all
    }
}
