//! Per-request state is freed: after 3 000 requests of every kind the
//! front serves (whole and streamed completions and chats, clients that
//! leave mid-stream, refused requests) on keep-alive connections, every
//! per-request table `/debug/workers` reports (`held`) is empty again. A
//! request held open first shows the same tables non-empty, so the counts
//! are the live ones. RSS over a long run is measured in
//! `docs/perf/` (2026-12-03-serve-rss.md), not here.

mod common;

use common::Server;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_serve::ServeConfig;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const REQUESTS: usize = 3_000;
const CLIENTS: usize = 6;

fn start() -> (SocketAddr, Server) {
    let (l, server) = common::start(ServeConfig {
        speed: 20.0,
        ..common::loopback_pd(DeploymentConfig::default(), EngineSpec::default())
    });
    (l.http, server)
}

fn head(path: &str, body: &str, close: bool) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{}\r\n{body}",
        body.len(),
        if close { "Connection: close\r\n" } else { "" }
    )
}

/// Status of one response read off `r` (its body consumed: by length, or
/// chunked to the last chunk).
fn read_response(r: &mut BufReader<TcpStream>) -> u16 {
    let mut line = String::new();
    r.read_line(&mut line).expect("status line");
    let status: u16 = line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("status line {line:?}"));
    let (mut len, mut chunked) = (0usize, false);
    loop {
        line.clear();
        r.read_line(&mut line).expect("header");
        let l = line.trim_end().to_ascii_lowercase();
        if l.is_empty() {
            break;
        }
        if let Some(v) = l.strip_prefix("content-length:") {
            len = v.trim().parse().expect("a length");
        }
        chunked |= l == "transfer-encoding: chunked";
    }
    if !chunked {
        let mut body = vec![0; len];
        r.read_exact(&mut body).expect("body");
        return status;
    }
    loop {
        line.clear();
        r.read_line(&mut line).expect("chunk size");
        let n = usize::from_str_radix(line.trim(), 16).expect("a chunk size");
        let mut chunk = vec![0; n + 2];
        r.read_exact(&mut chunk).expect("chunk");
        if n == 0 {
            return status;
        }
    }
}

/// Client `k`'s share of the run: request `i` is one of six kinds.
fn client(addr: SocketAddr, k: usize) -> usize {
    let s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    let mut w = s.try_clone().expect("clone");
    let mut r = BufReader::new(s);
    let mut ok = 0;
    for i in (k..REQUESTS).step_by(CLIENTS) {
        let words = format!("request {i} of client {k} with a few words that fill blocks");
        let (path, body, want) = match i % 6 {
            0 => (
                "/v1/completions",
                format!(r#"{{"model":"m","prompt":"{words}","max_tokens":6}}"#),
                200,
            ),
            1 => (
                "/v1/chat/completions",
                format!(
                    r#"{{"model":"m","messages":[{{"role":"user","content":"{words}"}}],"max_tokens":5,"stream":true,"stream_options":{{"include_usage":true}}}}"#
                ),
                200,
            ),
            2 => (
                "/v1/completions",
                format!(r#"{{"model":"m","prompt":"{words}","max_tokens":4,"stream":true}}"#),
                200,
            ),
            3 => (
                "/v1/completions",
                format!(r#"{{"model":"m","prompt":"{words}","temperature":"hot"}}"#),
                400,
            ),
            4 => (
                "/v1/chat/completions",
                format!(
                    r#"{{"model":"m","messages":[{{"role":"system","content":"{words}"}},{{"role":"user","content":"go"}}],"max_completion_tokens":7,"ignore_eos":true}}"#
                ),
                200,
            ),
            _ => {
                // A client that leaves mid-stream, on its own connection.
                let mut c = TcpStream::connect(addr).expect("connect");
                let body = format!(
                    r#"{{"model":"m","prompt":"{words}","max_tokens":500,"ignore_eos":true,"stream":true}}"#
                );
                c.write_all(head("/v1/completions", &body, true).as_bytes())
                    .expect("write");
                let mut first = [0u8; 64];
                let _ = c.read(&mut first);
                continue;
            }
        };
        w.write_all(head(path, &body, false).as_bytes())
            .expect("write");
        let status = read_response(&mut r);
        assert_eq!(status, want, "request {i}: {body}");
        ok += 1;
    }
    ok
}

fn held(addr: SocketAddr) -> serde_json::Value {
    let (status, body) = common::call(addr, "GET", "/debug/workers", "");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    v["held"].clone()
}

#[test]
fn per_request_tables_are_empty_after_thousands_of_requests() {
    let (addr, server) = start();
    // One long request open: its tables are non-empty while it runs.
    let long = format!(
        r#"{{"model":"m","prompt":"{}","max_tokens":4000,"ignore_eos":true,"stream":true}}"#,
        "a long prompt of many words ".repeat(20)
    );
    let mut c = TcpStream::connect(addr).expect("connect");
    c.write_all(head("/v1/completions", &long, true).as_bytes())
        .expect("write");
    c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("data: ") {
        let n = c.read(&mut buf).expect("the stream");
        assert!(n > 0, "the stream ended early");
        seen.extend_from_slice(&buf[..n]);
    }
    // Its tokens flow, so it is in every table of a request in flight (the
    // view is published by the engine thread, at its next wake-up).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let h = held(addr);
        let open = ["flows", "recorded", "prompt_blocks"]
            .iter()
            .all(|t| h[t].as_u64() >= Some(1));
        if open {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never seen open: {h}");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(c);

    let clients: Vec<_> = (0..CLIENTS)
        .map(|k| std::thread::spawn(move || client(addr, k)))
        .collect();
    let answered: usize = clients.into_iter().map(|t| t.join().expect("client")).sum();
    assert_eq!(answered, REQUESTS - REQUESTS / 6);

    let v = common::wait_drained(addr);
    let h = &v["held"];
    let tables = h.as_object().expect("held is an object");
    assert_eq!(tables.len(), 11, "{h}");
    for (table, n) in tables {
        assert_eq!(n, 0, "{table} still holds entries after the run: {h}");
    }
    let report = server.stop();
    // Every request that reached the engine ended: finished, or cancelled
    // by its client.
    assert_eq!(
        report.completed_requests + report.failed_requests,
        report.num_requests
    );
    assert!(report.completed_requests >= (REQUESTS * 4 / 6) as u64);
}
