//! What the loopback tests share: a plain HTTP/1.1 client, the wait for
//! every worker to drain, and the handle that stops a server thread.

#![allow(dead_code)] // each test file uses its own part

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// A server running on its own thread until [`Server::stop`].
pub struct Server {
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub thread: Option<std::thread::JoinHandle<Result<handoff_serving::Report, String>>>,
}

impl Server {
    /// Stops the server and returns its report.
    pub fn stop(mut self) -> handoff_serving::Report {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("no panic")
            .expect("the run reports")
    }
}

/// Sends one request to `to` and returns the connection to read from.
pub fn send(to: SocketAddr, method: &str, path: &str, body: &str) -> TcpStream {
    let mut s = TcpStream::connect(to).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    s
}

/// Status and body of a request read to the end.
pub fn call(to: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = send(to, method, path, body);
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Polls `/debug/workers` on `http` until every worker is drained and
/// nothing is in flight; returns that answer.
pub fn wait_drained(http: SocketAddr) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = call(http, "GET", "/debug/workers", "");
        assert_eq!(status, 200, "/debug/workers: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).expect("json body");
        let drained = v["workers"]
            .as_array()
            .is_some_and(|ws| ws.iter().all(|w| w["drained"] == true));
        if drained && v["in_flight"] == 0 && v["open_streams"] == 0 {
            return v;
        }
        assert!(Instant::now() < deadline, "not drained: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}
