//! A graceful shutdown waits for the responses still streaming; a second
//! signal (here the `force` future) ends it at once, cutting them, and the
//! run still reports.

mod common;

use handoff_deployment::{DeploymentConfig, EngineSpec};
use std::io::Read;
use std::time::{Duration, Instant};

#[test]
fn force_ends_a_graceful_shutdown_that_a_stream_holds_open() {
    let config = common::loopback_pd(DeploymentConfig::default(), EngineSpec::default());
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let (force_tx, force_rx) = tokio::sync::oneshot::channel::<()>();
    let (ltx, lrx) = std::sync::mpsc::channel();
    let server = std::thread::spawn(move || {
        handoff_serve::serve_workers_until_forced(
            config,
            move |l| {
                let _ = ltx.send(l);
            },
            async move {
                let _ = stop_rx.await;
            },
            async move {
                let _ = force_rx.await;
            },
        )
    });
    let l = lrx
        .recv_timeout(Duration::from_secs(20))
        .expect("the server listens");
    // At real speed, 60,000 tokens stream for minutes.
    let body = r#"{"model": "m", "prompt": "hello there", "max_tokens": 60000,
        "ignore_eos": true, "stream": true}"#;
    let mut conn = common::send(l.http, "POST", "/v1/completions", body);
    common::read_events(&mut conn, 2);
    stop_tx.send(()).expect("stop");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        !server.is_finished(),
        "the graceful shutdown waits for the stream"
    );
    let forced = Instant::now();
    force_tx.send(()).expect("force");
    while !server.is_finished() {
        assert!(
            forced.elapsed() < Duration::from_secs(10),
            "still serving 10 s after the force"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let report = server
        .join()
        .expect("no panic")
        .expect("a forced exit still reports");
    assert_eq!(report.num_requests, 1);
    // The client sees its stream end.
    conn.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let mut rest = Vec::new();
    let _ = conn.read_to_end(&mut rest);
}
