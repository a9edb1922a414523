//! An engine process (`serve --engine`) receiving SIGTERM, as a Kubernetes
//! scale-down sends it, behind a router that follows readiness: it fails
//! `/ready`, refuses a new request with a 503, finishes the one in flight
//! and exits 0 on its own; the router's other engine takes the traffic.
//! And `serve`'s scaling flags: `--admin` is not for an engine process,
//! the fleet's flags need it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn mocker(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_handoff-mocker"))
        .args(args)
        .output()
        .expect("runs")
}

fn free_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
}

/// Status and body of one request (`Connection: close`), or `None` when
/// nothing listens.
fn call(to: SocketAddr, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(to).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

struct Engine {
    child: Child,
    http: SocketAddr,
}

impl Engine {
    fn start() -> Engine {
        let http = free_addr();
        let child = Command::new(env!("CARGO_BIN_EXE_handoff-mocker"))
            .args(["serve", "--engine", "aggregated", "--model", "m"])
            .args(["--http", &http.to_string(), "--side-channel-port", "0"])
            .args(["--grace-period-s", "30"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawns");
        let e = Engine { child, http };
        let t = Instant::now();
        while call(http, "GET", "/ready", "").map(|r| r.0) != Some(200) {
            assert!(t.elapsed() < Duration::from_secs(30), "never ready");
            std::thread::sleep(Duration::from_millis(50));
        }
        e
    }

    fn sigterm(&self) {
        let ok = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(ok.success());
    }

    /// Waits at most `within` for the process to exit; its status.
    fn wait(mut self, within: Duration) -> std::process::ExitStatus {
        let t = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().expect("waits") {
                return s;
            }
            if t.elapsed() > within {
                let _ = self.child.kill();
                panic!("still running {within:?} after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn completion(tokens: u32) -> String {
    format!(r#"{{"model": "m", "prompt": "drain me", "max_tokens": {tokens}, "ignore_eos": true}}"#)
}

/// A router that follows readiness: the first engine whose `/ready` is 200.
fn route(engines: &[SocketAddr]) -> Option<SocketAddr> {
    engines
        .iter()
        .copied()
        .find(|e| call(*e, "GET", "/ready", "").map(|r| r.0) == Some(200))
}

#[test]
fn an_engine_process_drains_on_sigterm_and_exits_0() {
    let a = Engine::start();
    let b = Engine::start();
    let (ha, hb) = (a.http, b.http);
    let long = std::thread::spawn(move || call(ha, "POST", "/v1/completions", &completion(800)));
    // Its request is running (the stand-in tokenizer, a fixed step time).
    std::thread::sleep(Duration::from_millis(300));
    a.sigterm();
    let t = Instant::now();
    loop {
        match call(ha, "GET", "/ready", "") {
            Some((503, body)) => {
                assert!(body.contains("draining"), "{body}");
                break;
            }
            Some((200, _)) => {}
            other => panic!("/ready during the drain: {other:?}"),
        }
        assert!(t.elapsed() < Duration::from_secs(5), "still ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, body) = call(ha, "POST", "/v1/completions", &completion(4)).expect("answered");
    assert_eq!(status, 503, "{body}");
    for _ in 0..2 {
        assert_eq!(route(&[ha, hb]), Some(hb));
        let (status, body) = call(hb, "POST", "/v1/completions", &completion(4)).expect("answered");
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = long.join().expect("joined").expect("answered");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"completion_tokens\":800"), "{body}");
    let status = a.wait(Duration::from_secs(20));
    assert!(status.success(), "exit {status:?}");
    b.sigterm();
    assert!(b.wait(Duration::from_secs(20)).success());
}

#[test]
fn admin_is_for_one_process_and_the_fleet_flags_need_it() {
    let out = mocker(&["serve", "--engine", "aggregated", "--admin"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--admin") && err.contains("--engine"), "{err}");
    let out = mocker(&["serve", "--max-decode", "3"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--admin"), "{err}");
    let out = mocker(&["serve", "--admin", "--decode", "2", "--max-decode", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("max-decode"), "{err}");
}
