//! An engine process's drain on SIGTERM (`serve --engine`): from the
//! signal on, `/ready` answers 503 (`draining`), so Kubernetes takes the
//! pod out of its Service and a router polling readiness stops picking
//! it, and a new request is refused with a 503 while the responses in
//! flight finish; the process exits once nothing is open (or the grace
//! period ends). This is vLLM's graceful shutdown (`vllm serve
//! --enable-graceful-shutdown --drain-timeout`: after SIGTERM new requests
//! get 503 while in-flight ones complete, then the process exits; vLLM's
//! `tests/entrypoints/.../test_graceful_shutdown.py`), and SGLang's
//! (`srt/managers/tokenizer_manager.py`, `sigterm_watchdog`: on SIGTERM
//! `gracefully_exit` is set, the health check answers 503, and the
//! process waits for its requests in flight before it exits). Without it
//! the listener closed at once and a router saw connections refused.
//!
//! [`Drain`] counts the responses open (a request holds an [`Open`] from
//! before it reaches the engine until its response ends), so the shutdown
//! knows when the last one has been written.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Whether the server drains, and how many responses are open.
#[derive(Debug, Default)]
pub struct Drain {
    draining: AtomicBool,
    open: AtomicUsize,
}

/// One open response; dropping it ends it.
#[derive(Debug)]
pub struct Open(Arc<Drain>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Drain {
    /// From now on new requests are refused and readiness fails.
    pub fn start(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Whether the drain has started.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Opens a response, or `None` when draining. The count goes up before
    /// the flag is read, and [`Drain::start`] sets the flag before
    /// [`Drain::open`] is read, so a request is either refused or counted
    /// by the shutdown (sequentially consistent).
    pub fn enter(self: &Arc<Self>) -> Option<Open> {
        self.open.fetch_add(1, Ordering::SeqCst);
        let open = Open(self.clone());
        (!self.is_draining()).then_some(open)
    }

    /// Responses open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }
}

/// The 503 a request gets while the engine drains.
pub(crate) fn refusal() -> handoff_openai::ApiError {
    handoff_openai::ApiError {
        status: 503,
        message: "the engine is draining after SIGTERM and takes no new requests".into(),
        kind: handoff_openai::ErrorKind::Unavailable,
        param: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_until_draining_then_refuses() {
        let d = Arc::new(Drain::default());
        let a = d.enter().expect("not draining");
        assert_eq!(d.open(), 1);
        d.start();
        assert!(d.enter().is_none(), "refused while draining");
        assert_eq!(d.open(), 1, "a refused request is not counted");
        drop(a);
        assert_eq!(d.open(), 0);
    }
}
