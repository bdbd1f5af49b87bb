//! A loopback TCP server on threads of the test process, one thread per
//! connection, for the upstreams and fake stores the tests play; it stops
//! accepting when dropped.

use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// A running server.
pub struct TestServer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Requests served (the handler counts them).
    pub served: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl TestServer {
    /// Listens on a free loopback port; each connection goes to `serve`
    /// with the request counter.
    pub fn start<F>(serve: F) -> TestServer
    where
        F: Fn(TcpStream, &AtomicU64) + Send + Sync + Clone + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (served.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    break;
                }
                if let Ok(conn) = conn {
                    let (s, serve) = (s.clone(), serve.clone());
                    std::thread::spawn(move || serve(conn, &s));
                }
            }
        });
        TestServer { port, served, stop }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wake the accept loop
    }
}
