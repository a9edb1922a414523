//! One engine process (`serve --engine`) on a thread of the test: started
//! on free loopback ports and waited for until `/ready`, stopped as SIGTERM
//! stops it (its summary returned).

use handoff_router::Pool;
use handoff_serve::pod::{serve_pod_until, PodConfig, PodListening, PodSummary};
use handoff_serve::{ServeConfig, ServeError};
use handoff_transport::Liveness;
use serde_json::Value;
use std::time::{Duration, Instant};

/// A running engine.
pub struct Pod {
    /// Where it listens.
    pub l: PodListening,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<Result<PodSummary, ServeError>>>,
}

/// Engine `role` of `serve`'s deployment on free ports: its own engine id,
/// a 2 s grace period, pings every 100 ms and a peer lost after 2 s of
/// silence, the default dial policy. Tests change a field with struct
/// update syntax.
pub fn config(serve: ServeConfig, role: Pool) -> PodConfig {
    PodConfig {
        serve,
        role,
        engine_id: None,
        side_channel_port: 0,
        side_channel_host: None,
        grace: Duration::from_secs(2),
        liveness: Liveness {
            ping_every: Duration::from_millis(100),
            silence_limit: Duration::from_secs(2),
        },
        peers: Default::default(),
    }
}

/// Pings every 100 ms and a peer lost after `silence`.
pub fn liveness(silence: Duration) -> Liveness {
    Liveness {
        ping_every: Duration::from_millis(100),
        silence_limit: silence,
    }
}

impl Pod {
    /// Starts `c` and waits until it listens and every rank is up.
    pub fn run(c: PodConfig) -> Pod {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (ltx, lrx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            serve_pod_until(
                c,
                move |l| {
                    let _ = ltx.send(l.clone());
                },
                async move {
                    let _ = rx.await;
                },
            )
        });
        let l = lrx
            .recv_timeout(Duration::from_secs(20))
            .expect("the engine listens");
        let deadline = Instant::now() + Duration::from_secs(20);
        while super::call(l.http, "GET", "/ready", "").0 != 200 {
            assert!(Instant::now() < deadline, "never ready");
            std::thread::sleep(Duration::from_millis(20));
        }
        Pod {
            l,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    /// `POST /v1/completions` with `body`: the status and the JSON answer.
    pub fn post(&self, body: &Value) -> (u16, Value) {
        let (status, text) = super::call(self.l.http, "POST", "/v1/completions", &body.to_string());
        let v = serde_json::from_str(&text).unwrap_or_else(|_| panic!("json: {text}"));
        (status, v)
    }

    /// SIGTERM's path: drain, end, return the summary.
    pub fn stop(mut self) -> PodSummary {
        self.term();
        self.join()
    }

    /// SIGTERM, without waiting: the engine starts draining.
    pub fn term(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    /// Waits for the engine to end; its summary.
    pub fn join(mut self) -> PodSummary {
        let t = self.thread.take().expect("running");
        t.join().expect("no panic").expect("a clean stop")
    }
}
