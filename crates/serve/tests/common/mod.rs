//! What the loopback tests share: a server's configuration and start-up
//! on loopback, a plain HTTP/1.1 client, the wait for every worker to
//! drain, the handle that stops a server thread, and the sinks and sockets
//! tests read KV events from.

#![allow(dead_code)] // each test file uses its own part

pub mod pod;

use bytes::Bytes;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_serve::END_SEQ;
use handoff_serve::{serve_workers_until, KvEndpoints, KvEventEncoding, Listening, ServeConfig};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

/// `cfg` with `specs` served on loopback: the front on a free port, model
/// `m`, 65 536 tokens per request, wall-clock speed, no KV events, no
/// per-worker listeners, SGLang's bootstrap timeout, the built-in tokenizer
/// and hashes, the default HTTP timeouts. Tests change a field with struct
/// update syntax.
pub fn loopback(cfg: DeploymentConfig, specs: Vec<EngineSpec>) -> ServeConfig {
    ServeConfig {
        cfg,
        specs,
        speed: 1.0,
        http: "127.0.0.1:0".into(),
        http_timeouts: Default::default(),
        model: "m".into(),
        max_model_len: 65_536,
        kv: None,
        kv_jsonl: None,
        worker_http: Vec::new(),
        bootstrap_timeout_s: 300.0,
        tokenizer: Default::default(),
        hash_mode: Default::default(),
        client_faults: false,
        load_balance_method: Default::default(),
        lora: None,
        admin: false,
    }
}

/// `base` with one prefill and one decode worker.
pub fn one_prefill_one_decode(base: DeploymentConfig) -> DeploymentConfig {
    DeploymentConfig {
        prefill_workers: 1,
        decode_workers: 1,
        ..base
    }
}

/// [`loopback`] for one prefill and one decode worker of `spec`'s engine,
/// `base`'s deployment otherwise.
pub fn loopback_pd(base: DeploymentConfig, spec: EngineSpec) -> ServeConfig {
    loopback(one_prefill_one_decode(base), vec![spec; 2])
}

/// A listener for each of workers `0..n`, each on a free loopback port.
pub fn worker_listeners(n: u32) -> Vec<(u32, String)> {
    (0..n).map(|w| (w, "127.0.0.1:0".into())).collect()
}

/// Runs `config` on its own thread until [`Server::stop`]; returns where
/// it listens once it does.
pub fn start(config: ServeConfig) -> (Listening, Server) {
    try_start(config).expect("the server listens")
}

/// A server with ZMQ sockets for `n` schedulers on ports picked
/// beforehand ([`kv_endpoints`]): another socket may take such a port
/// between the pick and the server's bind, so a start that fails is tried
/// again with fresh ports (a few times).
pub fn start_with_kv(
    n: usize,
    config: impl Fn(KvEndpoints) -> ServeConfig,
) -> (Listening, Server, KvEndpoints) {
    let mut last = String::new();
    for _ in 0..5 {
        let ep = kv_endpoints(n);
        match try_start(config(ep.clone())) {
            Ok((l, s)) => return (l, s, ep),
            Err(e) => last = e,
        }
    }
    panic!("the server never listened: {last}");
}

/// As [`start`], or why the server stopped before it listened.
pub fn try_start(config: ServeConfig) -> Result<(Listening, Server), String> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (ltx, lrx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        serve_workers_until(
            config,
            move |l| {
                let _ = ltx.send(l);
            },
            async move {
                let _ = rx.await;
            },
        )
    });
    let l = match lrx.recv_timeout(Duration::from_secs(20)) {
        Ok(l) => l,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            return Err(match thread.join() {
                Ok(Err(e)) => e.to_string(),
                Ok(Ok(_)) => "the server ended before it listened".into(),
                Err(_) => "the server thread panicked".into(),
            });
        }
        Err(e) => return Err(format!("the server did not listen in 20 s: {e}")),
    };
    let server = Server {
        stop: Some(tx),
        thread: Some(thread),
    };
    Ok((l, server))
}

/// The per-worker listeners' addresses, in worker order.
pub fn worker_addrs(l: &Listening) -> Vec<SocketAddr> {
    l.workers.iter().map(|(_, a)| *a).collect()
}

/// A server running on its own thread until [`Server::stop`].
pub struct Server {
    pub stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub thread:
        Option<std::thread::JoinHandle<Result<handoff_serving::Report, handoff_serve::ServeError>>>,
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
    send_with(to, method, path, &[], body)
}

/// [`send`] with extra `headers` (name, value).
pub fn send_with(
    to: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> TcpStream {
    let mut s = TcpStream::connect(to).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         {extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    s
}

/// Status and body of a request read to the end.
pub fn call(to: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    call_with(to, method, path, &[], body)
}

/// [`call`] with extra `headers` (name, value).
pub fn call_with(
    to: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    read_answer("", send_with(to, method, path, headers, body))
}

/// Status and body of a response whose first part, `head`, was read
/// already, read from `s` to its end.
pub fn read_answer(head: &str, mut s: TcpStream) -> (u16, String) {
    let mut rest = String::new();
    s.read_to_string(&mut rest).expect("read");
    let text = format!("{head}{rest}");
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

/// Reads a streamed response off `conn` until `n` SSE events (`data: `)
/// came; the stream must not end before.
pub fn read_events(conn: &mut TcpStream, n: usize) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while got.windows(6).filter(|w| w == b"data: ").count() < n {
        let read = conn.read(&mut buf).expect("read");
        assert!(read > 0, "the stream ended early");
        got.extend_from_slice(&buf[..read]);
    }
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

/// A `Write` the test reads after the server stopped.
#[derive(Clone, Default)]
pub struct Shared(pub Arc<Mutex<Vec<u8>>>);

impl Shared {
    /// Everything written so far, as text.
    pub fn text(&self) -> String {
        String::from_utf8(self.0.lock().expect("not poisoned").clone()).expect("utf-8")
    }
}

impl Write for Shared {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// ZMQ KV event sockets for `n` schedulers, each publisher and replay
/// socket on a free loopback port; empty topic, vLLM's array layout.
pub fn kv_endpoints(n: usize) -> KvEndpoints {
    let ports = |_| format!("tcp://127.0.0.1:{}", free_port());
    KvEndpoints {
        publish: (0..n).map(ports).collect(),
        replay: (0..n).map(ports).collect(),
        topic: String::new(),
        encoding: KvEventEncoding::Array,
        ..KvEndpoints::default()
    }
}

/// Every batch a scheduler published, asked of its replay socket `replay`
/// from sequence 0 (as Dynamo's listener does, with a DEALER), each as its
/// decoded msgpack.
pub async fn replay_batches(replay: &str) -> Vec<rmpv::Value> {
    let mut dealer = zeromq::DealerSocket::new();
    dealer.connect(replay).await.expect("connect");
    let ask = vec![Bytes::new(), Bytes::copy_from_slice(&0u64.to_be_bytes())];
    dealer
        .send(ZmqMessage::try_from(ask).expect("frames"))
        .await
        .expect("send");
    let mut out = Vec::new();
    loop {
        let f = tokio::time::timeout(Duration::from_secs(10), dealer.recv())
            .await
            .expect("replay answers")
            .expect("recv")
            .into_vec();
        // [delimiter, topic, seq, payload] (vLLM 0.26's layout, the default).
        assert_eq!(f.len(), 4, "[delimiter, topic, seq, payload]");
        if f[3].is_empty() {
            assert_eq!(&f[2][..], &END_SEQ[..]);
            return out;
        }
        out.push(rmpv::decode::read_value(&mut &f[3][..]).expect("msgpack"));
    }
}
