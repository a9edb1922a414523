//! `serve` under abuse, over raw TCP: a client that sends half its head or
//! stalls its body is closed within the timeouts while others are served;
//! every error on a keep-alive connection (413, 400, 405) leaves the
//! connection either closed cleanly or answering the next request
//! correctly; wrong field types are 400s naming the field. Timeouts are
//! short here (half a second) so the whole file runs in a few seconds.

mod common;

use common::Server;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_serve::HttpTimeouts;
use handoff_serve::ServeConfig;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// The head and body timeouts of the server under test.
const TIMEOUT: Duration = Duration::from_millis(500);

/// How long a timed-out connection may take to be closed, at most.
const CLOSED_WITHIN: Duration = Duration::from_secs(5);

const GOOD: &str = r#"{"model":"m","prompt":"hello there","max_tokens":3,"ignore_eos":true}"#;

fn start() -> (SocketAddr, Server) {
    let (l, server) = common::start(ServeConfig {
        http_timeouts: HttpTimeouts {
            header: TIMEOUT,
            body: TIMEOUT,
        },
        ..common::loopback_pd(DeploymentConfig::default(), EngineSpec::default())
    });
    (l.http, server)
}

fn connect(to: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(to).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(15))).ok();
    s
}

/// A keep-alive request (no `Connection: close`).
fn request(method: &str, path: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// One response read off a keep-alive connection.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: String,
    body: String,
}

impl Answer {
    fn closes(&self) -> bool {
        self.headers
            .lines()
            .any(|l| l.eq_ignore_ascii_case("connection: close"))
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// Reads one response (a `Content-Length` body), or `None` on a clean
/// close (end of stream or a reset) before its first byte.
fn read_answer(s: &mut TcpStream) -> Option<Answer> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(0) => {
                assert!(buf.is_empty(), "cut mid-head: {:?}", buf);
                return None;
            }
            Ok(_) => buf.push(byte[0]),
            Err(e) if e.kind() == ErrorKind::ConnectionReset && buf.is_empty() => return None,
            Err(e) => panic!("reading a response: {e}"),
        }
    }
    let head = String::from_utf8(buf).expect("an ASCII head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("a status line");
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or_else(|| panic!("no content-length: {head}"));
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).expect("the whole body");
    Some(Answer {
        status,
        headers: head,
        body: String::from_utf8(body).expect("a UTF-8 body"),
    })
}

/// Whether the server closes `s` (end of stream or a reset) without
/// sending anything more, within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> Duration {
    let t = Instant::now();
    s.set_read_timeout(Some(within)).ok();
    let mut rest = Vec::new();
    match s.read_to_end(&mut rest) {
        Ok(_) => assert!(rest.is_empty(), "unexpected bytes: {rest:?}"),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
        Err(e) => panic!("not closed within {within:?}: {e}"),
    }
    t.elapsed()
}

/// After an error answer on `s`: a second, good request on the same
/// connection is either answered correctly or meets a clean close.
fn usable_or_closed(mut s: TcpStream, first: &Answer) {
    // Writing may fail once the server has closed; the read below says.
    let _ = s.write_all(request("POST", "/v1/completions", GOOD).as_bytes());
    // A clean close (None) is the other acceptable outcome.
    if let Some(a) = read_answer(&mut s) {
        assert!(!first.closes(), "answered after Connection: close");
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.json()["usage"]["completion_tokens"], 3);
    }
}

fn good_request_succeeds(addr: SocketAddr) -> Duration {
    let t = Instant::now();
    let mut s = connect(addr);
    s.write_all(request("POST", "/v1/completions", GOOD).as_bytes())
        .unwrap();
    let a = read_answer(&mut s).expect("an answer");
    assert_eq!(a.status, 200, "{a:?}");
    t.elapsed()
}

#[test]
fn slow_or_stalled_clients_are_closed_and_others_served() {
    let (addr, server) = start();
    // Half a head, a head trickled line by line, an idle connection, and a
    // body that stops after 10 of its 100 bytes.
    let mut half = connect(addr);
    half.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut idle = connect(addr);
    let mut stalled = connect(addr);
    stalled
        .write_all(
            b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\n\r\n{\"model\":",
        )
        .unwrap();
    let mut trickle = connect(addr);
    let t0 = Instant::now();
    for line in ["GET /health HTTP/1.1\r\n", "Host: x\r\n", "X-A: 1\r\n"] {
        trickle.write_all(line.as_bytes()).unwrap();
        std::thread::sleep(TIMEOUT / 3);
        let _ = trickle.write_all(b"X-B: 2\r\n");
    }
    // Others are served meanwhile, promptly.
    assert!(good_request_succeeds(addr) < Duration::from_secs(3));
    for s in [&mut half, &mut idle, &mut trickle] {
        closed_within(s, CLOSED_WITHIN);
    }
    assert!(t0.elapsed() < TIMEOUT + CLOSED_WITHIN, "{:?}", t0.elapsed());
    // The stalled body is answered 408 naming the timeout, and closed.
    let a = read_answer(&mut stalled).expect("a 408");
    assert_eq!(a.status, 408, "{a:?}");
    assert!(a.closes(), "{a:?}");
    let msg = a.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(msg.contains("did not arrive within 0.5 s"), "{msg}");
    closed_within(&mut stalled, CLOSED_WITHIN);
    // An idle keep-alive connection is closed after the head timeout, as
    // uvicorn's timeout_keep_alive closes it.
    let mut s = connect(addr);
    s.write_all(request("GET", "/health", "").as_bytes())
        .unwrap();
    assert_eq!(read_answer(&mut s).expect("an answer").status, 200);
    let waited = closed_within(&mut s, CLOSED_WITHIN);
    assert!(waited >= TIMEOUT / 2, "closed too early: {waited:?}");
    assert!(good_request_succeeds(addr) < Duration::from_secs(3));
    common::wait_drained(addr);
    let report = server.stop();
    assert_eq!(report.completed_requests, 2);
}

#[test]
fn errors_leave_the_connection_usable_or_closed() {
    let (addr, server) = start();
    // 413: a 5 MB body announced and sent whole, as most clients send it
    // before reading: answered at once, the body drained, then closed.
    let mut s = connect(addr);
    let big = 5 << 20;
    let mut w = s.try_clone().unwrap();
    let writer = std::thread::spawn(move || {
        write!(
            w,
            "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: {big}\r\n\r\n"
        )
        .and_then(|()| w.write_all(&vec![b'a'; big]))
    });
    let a = read_answer(&mut s).expect("a 413");
    assert_eq!(a.status, 413, "{a:?}");
    assert!(a.closes(), "{a:?}");
    assert_eq!(a.json()["error"]["code"], 413);
    writer.join().unwrap().expect("the whole body is taken");
    closed_within(&mut s, CLOSED_WITHIN);
    // Announced, part sent, then a stall: the same 413, closed by the body
    // timeout at the latest.
    let mut s = connect(addr);
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {big}\r\n\r\n{{\"model\":\"m\",\"prompt\":\""
    )
    .unwrap();
    let _ = s.write_all(&vec![b'a'; 64 << 10]);
    let a = read_answer(&mut s).expect("a 413");
    assert_eq!(a.status, 413, "{a:?}");
    assert!(a.closes(), "{a:?}");
    usable_or_closed(s, &a);

    // 413 on a chunked body with no length: refused once the server has
    // read past the limit.
    let mut s = connect(addr);
    s.write_all(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Transfer-Encoding: chunked\r\n\r\n",
    )
    .unwrap();
    let chunk = vec![b' '; 1 << 20];
    for _ in 0..5 {
        let _ = write!(s, "{:x}\r\n", chunk.len());
        let _ = s.write_all(&chunk);
        let _ = s.write_all(b"\r\n");
    }
    let a = read_answer(&mut s).expect("a 413");
    assert_eq!(a.status, 413, "{a:?}");
    assert!(a.closes(), "{a:?}");
    usable_or_closed(s, &a);

    // 400 on a body that is not JSON, 404 on an unknown model, 405 on a
    // GET (and a PUT with a body) to a POST route: OpenAI-style JSON.
    let cases: [(&str, &str, &str, u16); 5] = [
        ("POST", "/v1/completions", "{not json", 400),
        ("POST", "/v1/chat/completions", "[1,2]", 400),
        (
            "POST",
            "/v1/completions",
            r#"{"model":"x","prompt":"a"}"#,
            404,
        ),
        ("GET", "/v1/completions", "", 405),
        ("PUT", "/v1/chat/completions", GOOD, 405),
    ];
    for (method, path, body, status) in cases {
        let mut s = connect(addr);
        s.write_all(request(method, path, body).as_bytes()).unwrap();
        let a = read_answer(&mut s).expect("an answer");
        assert_eq!(a.status, status, "{method} {path} {body}: {a:?}");
        let e = &a.json()["error"];
        assert_eq!(e["code"], status, "{a:?}");
        assert!(
            e["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{a:?}"
        );
        assert!(e["type"].is_string(), "{a:?}");
        usable_or_closed(s, &a);
    }

    // An unknown route and a malformed request line.
    let mut s = connect(addr);
    s.write_all(request("POST", "/v2/nothing", GOOD).as_bytes())
        .unwrap();
    let a = read_answer(&mut s).expect("a 404");
    assert_eq!(a.status, 404);
    usable_or_closed(s, &a);
    let mut s = connect(addr);
    s.write_all(b"BLAH\r\n\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    let text = String::from_utf8_lossy(&rest);
    assert!(
        rest.is_empty() || text.starts_with("HTTP/1.1 400"),
        "{text}"
    );

    assert!(good_request_succeeds(addr) < Duration::from_secs(3));
    common::wait_drained(addr);
    server.stop();
}

#[test]
fn wrong_types_are_400s_naming_the_field() {
    let (addr, server) = start();
    let chat = |extra: &str| {
        format!(r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}]{extra}}}"#)
    };
    let completion = |extra: &str| format!(r#"{{"model":"m","prompt":"hi"{extra}}}"#);
    let cases = [
        (
            "/v1/completions",
            completion(r#","temperature":"hot""#),
            "temperature",
        ),
        (
            "/v1/completions",
            completion(r#","max_tokens":8.5"#),
            "max_tokens",
        ),
        (
            "/v1/completions",
            completion(r#","logprobs":true"#),
            "logprobs",
        ),
        ("/v1/completions", completion(r#","best_of":2"#), "best_of"),
        ("/v1/completions", completion(r#","stop":[1]"#), "stop"),
        ("/v1/completions", completion(r#","stream":1"#), "stream"),
        (
            "/v1/chat/completions",
            chat(r#","tools":{"type":"x"}"#),
            "tools",
        ),
        (
            "/v1/chat/completions",
            chat(r#","logprobs":"yes""#),
            "logprobs",
        ),
        ("/v1/chat/completions", chat(r#","top_p":2"#), "top_p"),
        (
            "/v1/chat/completions",
            r#"{"model":"m","messages":[{"role":"robot","content":"hi"}]}"#.to_string(),
            "messages",
        ),
    ];
    // All on one keep-alive connection: each 400 leaves it usable.
    let mut s = connect(addr);
    for (path, body, field) in &cases {
        s.write_all(request("POST", path, body).as_bytes()).unwrap();
        let a = read_answer(&mut s).expect("an answer on the same connection");
        assert_eq!(a.status, 400, "{body}: {a:?}");
        assert_eq!(a.json()["error"]["param"], *field, "{body}: {a:?}");
    }
    s.write_all(request("POST", "/v1/completions", GOOD).as_bytes())
        .unwrap();
    assert_eq!(read_answer(&mut s).expect("an answer").status, 200);
    common::wait_drained(addr);
    server.stop();
}

/// An HTTP/2 client's preface gets uvicorn's 400 (vLLM's server answers
/// it so) instead of a silent close, and the server goes on serving.
#[test]
fn an_http2_preface_is_answered_400() {
    let (addr, server) = start();
    let mut s = connect(addr);
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").unwrap();
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text:?}");
    assert!(
        text.ends_with("\r\n\r\nInvalid HTTP request received."),
        "{text:?}"
    );
    good_request_succeeds(addr);
    server.stop();
}
