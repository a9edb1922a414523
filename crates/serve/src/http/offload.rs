//! Request bodies are parsed and tokenised off the runtime's worker
//! threads: on tokio's blocking pool, at most [`PARSE_SLOTS`] at once. The
//! two worker threads that answer `/health`, stream tokens and accept
//! connections never run a tokenizer, so one heavy prompt (a 4 MB body of
//! a Hugging Face tokenizer's worst case) delays only the bodies queued
//! behind it, not the server. A body waiting for a slot holds no thread.

use crate::openai::{parse, ApiError, Endpoint, ErrorKind, GenRequest, Limits};
use bytes::Bytes;
use tokio::sync::Semaphore;

/// Bodies parsed at once (the machine this is sized for has two cores; the
/// runtime's own two worker threads stay free).
pub const PARSE_SLOTS: usize = 2;

static SLOTS: Semaphore = Semaphore::const_new(PARSE_SLOTS);

/// Runs `work` (parsing and tokenising a body) on the blocking pool once a
/// slot is free.
pub(crate) async fn off_thread<T, F>(work: F) -> Result<T, ApiError>
where
    F: FnOnce() -> Result<T, ApiError> + Send + 'static,
    T: Send + 'static,
{
    let internal = |what: &str| ApiError {
        status: 500,
        message: format!("parsing the request failed: {what}"),
        kind: ErrorKind::Internal,
        param: None,
    };
    // The semaphore is never closed.
    let _slot = SLOTS
        .acquire()
        .await
        .map_err(|_| internal("no parse slot"))?;
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|e| Err(internal(&e.to_string())))
}

/// [`parse`] of `body` sent to `endpoint`, off the worker threads.
pub(crate) async fn parse_off(
    endpoint: Endpoint,
    body: &Bytes,
    limits: &Limits,
) -> Result<GenRequest, ApiError> {
    let (body, limits) = (body.clone(), limits.clone());
    off_thread(move || parse(endpoint, &body, &limits)).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// On a runtime of one thread, the work waits for a message the
    /// runtime's own task sends after it started: had the work run on the
    /// runtime's thread, nothing could send it and it would time out.
    #[test]
    fn work_runs_beside_the_runtime_not_on_it() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let work = tokio::spawn(off_thread(move || {
                rx.recv_timeout(Duration::from_secs(5))
                    .map_err(|_| ApiError::invalid(None, "the runtime was blocked"))
            }));
            tokio::time::sleep(Duration::from_millis(20)).await;
            tx.send(()).expect("the work is waiting");
            assert_eq!(work.await.expect("joined"), Ok(()));
        });
    }

    /// No more than [`PARSE_SLOTS`] bodies are parsed at once; the rest
    /// wait without a thread and all finish.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn at_most_the_slots_run_at_once() {
        let running = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..8)
            .map(|_| {
                let (running, most) = (running.clone(), most.clone());
                tokio::spawn(off_thread(move || {
                    let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(30));
                    running.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }))
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.expect("joined"), Ok(()));
        }
        let most = most.load(Ordering::SeqCst);
        assert!((1..=PARSE_SLOTS).contains(&most), "{most} at once");
    }
}
