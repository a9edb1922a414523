//! Which LoRA adapters have requests waiting and running on each worker,
//! for `vllm:lora_requests_info` (`crate::metrics::gateway`): vLLM's
//! `LoRARequestStates` (`vllm/v1/metrics/stats.py`) counts a request as
//! waiting until it is scheduled and running until it finishes. Here a
//! request waits on the worker it is routed to until its first token and
//! runs on the worker that streams its tokens until it ends. Entries are
//! removed when their request ends, so the table holds only requests in
//! flight.

use handoff_core::RequestId;
use std::collections::BTreeMap;
use std::sync::Arc;

#[derive(Clone, Debug)]
struct Entry {
    worker: usize,
    name: Arc<str>,
    running: bool,
}

/// The LoRA requests in flight, by request id (so by arrival).
#[derive(Debug, Default)]
pub(crate) struct LoraLoad {
    reqs: BTreeMap<RequestId, Entry>,
}

impl LoraLoad {
    /// `r`, on adapter `name`, waits on worker `w`; returns the worker whose
    /// lists changed.
    pub(crate) fn waiting(&mut self, r: RequestId, name: Arc<str>, w: usize) -> usize {
        self.reqs.insert(
            r,
            Entry {
                worker: w,
                name,
                running: false,
            },
        );
        w
    }

    /// `r` produced a token on worker `w`: it runs there. Returns the
    /// workers whose lists changed (the one it left, if another).
    pub(crate) fn running(&mut self, r: RequestId, w: usize) -> Option<(usize, usize)> {
        let e = self.reqs.get_mut(&r)?;
        if e.running && e.worker == w {
            return None;
        }
        let left = std::mem::replace(&mut e.worker, w);
        e.running = true;
        Some((left, w))
    }

    /// `r` ended; returns the worker whose lists changed.
    pub(crate) fn ended(&mut self, r: RequestId) -> Option<usize> {
        self.reqs.remove(&r).map(|e| e.worker)
    }

    /// Worker `w`'s adapters with running and with waiting requests, each
    /// comma-separated in the order of its oldest such request.
    pub(crate) fn lists(&self, w: usize) -> (String, String) {
        let (mut run, mut wait): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
        for e in self.reqs.values().filter(|e| e.worker == w) {
            let list = if e.running { &mut run } else { &mut wait };
            if !list.contains(&&*e.name) {
                list.push(&e.name);
            }
        }
        (run.join(","), wait.join(","))
    }

    /// Requests tracked (`/debug/workers`' `held`).
    pub(crate) fn len(&self) -> usize {
        self.reqs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_follow_requests_from_waiting_to_running_to_gone() {
        let mut l = LoraLoad::default();
        let (a, b): (Arc<str>, Arc<str>) = (Arc::from("a"), Arc::from("b"));
        l.waiting(RequestId(2), b.clone(), 0);
        l.waiting(RequestId(1), a.clone(), 0);
        l.waiting(RequestId(3), a, 1);
        assert_eq!(l.lists(0), (String::new(), "a,b".into()));
        assert_eq!(l.running(RequestId(2), 0), Some((0, 0)));
        assert_eq!(l.running(RequestId(2), 0), None);
        assert_eq!(l.lists(0), ("b".into(), "a".into()));
        assert_eq!(l.lists(1), (String::new(), "a".into()));
        // A decode on another worker: it runs there.
        assert_eq!(l.running(RequestId(1), 1), Some((0, 1)));
        assert_eq!(l.lists(1), ("a".into(), "a".into()));
        assert_eq!(l.ended(RequestId(2)), Some(0));
        assert_eq!(l.lists(0), (String::new(), String::new()));
        l.ended(RequestId(1));
        l.ended(RequestId(3));
        assert_eq!(l.len(), 0);
    }
}
