//! What both serve modes (one process, `server`; an engine process of its
//! own, `pod`) share to shut down: the signals that start and force it,
//! and how long open responses get to write their end.

/// How long the responses still open when the grace period ends may take
/// to write their end (the error event and `[DONE]`, or the 503) before
/// their connections are cut.
pub const FLUSH: std::time::Duration = std::time::Duration::from_secs(2);

/// The first SIGINT or SIGTERM (the first future) starts a graceful
/// shutdown; the next one of either (the second) forces the exit. uvicorn,
/// which serves vLLM's API, forces on a SIGINT during shutdown
/// (`uvicorn/server.py`, `Server.handle_exit` sets `force_exit`); here a
/// second SIGTERM does too, since a supervisor's second TERM means the same.
/// Both futures read the same streams, registered once, so no signal
/// between them is lost.
pub(crate) fn shutdown_signals() -> (
    impl std::future::Future<Output = ()> + Send + 'static,
    impl std::future::Future<Output = ()> + Send + 'static,
) {
    let (tx, rx) = tokio::sync::watch::channel(0u32);
    let mut second = rx.clone();
    let first = async move {
        // Polled on the runtime, which the signal streams need.
        tokio::spawn(count_signals(tx));
        let mut rx = rx;
        if rx.wait_for(|n| *n >= 1).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let second = async move {
        if second.wait_for(|n| *n >= 2).await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    (first, second)
}

/// Counts SIGINTs and SIGTERMs into `tx` for ever (holding `tx`, so a
/// stream that cannot be registered never reads as a signal).
async fn count_signals(tx: tokio::sync::watch::Sender<u32>) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            return std::future::pending().await;
        };
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            tx.send_modify(|n| *n = n.saturating_add(1));
        }
    }
    #[cfg(not(unix))]
    loop {
        if tokio::signal::ctrl_c().await.is_err() {
            return std::future::pending().await;
        }
        tx.send_modify(|n| *n = n.saturating_add(1));
    }
}
