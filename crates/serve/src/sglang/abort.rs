//! SGLang's `POST /abort_request {rid, abort_all}`
//! (`sglang/srt/entrypoints/http_server.py`, `abort_request`;
//! `TokenizerManager.abort_request`): abort the request of that `rid` on
//! this server (every request with `abort_all`), answering an empty 200
//! whether or not the rid is known (an unknown rid is ignored, as the
//! tokenizer manager returns when `rid` is not in `rid_to_state`).
//!
//! This module keeps the rid table and reads the body; the route is
//! `sglang::native`'s. Here a rid is the one a native `/generate` named (`rid` in its body).
//! Aborting cancels the request in the engine (the same path as a client
//! that went away: every role ends, the core frees what it holds) and the
//! aborted request answers as SGLang's does, 200 with `meta_info`'s
//! `finish_reason` `{"type": "abort", ...}` (`FINISH_ABORT`). A worker's
//! listener aborts only what was sent to it; the front port any request.
//! AIBrix's gateway posts `{rid}` to the decode engine when an SGLang
//! prefill fails; smg aborts a dropped request's rid on its worker.
//! Limit: the engine cancels a request through its handoff's roles (as it
//! cancels one whose client went away), so a request served whole on an
//! aggregated worker is not stopped: it runs to its end and answers as
//! usual. Deviation: SGLang's scheduler matches `rid` as a prefix (the `rid_i` of
//! an `n > 1` request); `/generate` here serves `n = 1` only, so a rid is
//! matched exactly.

use handoff_core::RequestId;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The most rids held at once (a request past it runs, unabortable).
pub const MAX_RIDS: usize = 1 << 20;

/// Who may abort a request: the listener it was sent to.
pub type Scope = Option<u32>;

#[derive(Debug)]
struct Held {
    id: RequestId,
    scope: Scope,
    aborted: Arc<AtomicBool>,
}

/// The rids of requests in flight.
#[derive(Debug, Default)]
pub struct RidTable {
    map: Mutex<HashMap<String, Held>>,
}

/// A rid registered while its request runs; dropping it forgets the rid.
#[derive(Debug)]
pub struct RidEntry {
    table: Arc<RidTable>,
    rid: String,
    id: RequestId,
    aborted: Arc<AtomicBool>,
}

impl RidEntry {
    /// `/abort_request` named it.
    pub fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed)
    }
}

impl Drop for RidEntry {
    fn drop(&mut self) {
        if let Ok(mut m) = self.table.map.lock() {
            if m.get(&self.rid).is_some_and(|h| h.id == self.id) {
                m.remove(&self.rid);
            }
        }
    }
}

impl RidTable {
    /// Registers `rid` for request `id` sent to `scope`; `None` when the
    /// rid is empty, already running, or the table is full.
    pub fn register(
        table: &Arc<RidTable>,
        rid: &str,
        id: RequestId,
        scope: Scope,
    ) -> Option<RidEntry> {
        let mut m = table.map.lock().ok()?;
        if rid.is_empty() || m.contains_key(rid) || m.len() >= MAX_RIDS {
            return None;
        }
        let aborted = Arc::new(AtomicBool::new(false));
        m.insert(
            rid.to_string(),
            Held {
                id,
                scope,
                aborted: aborted.clone(),
            },
        );
        Some(RidEntry {
            table: table.clone(),
            rid: rid.to_string(),
            id,
            aborted,
        })
    }

    /// Marks as aborted, and returns, the requests `rid` (or, with `all`,
    /// every request) names that a listener of `scope` may abort.
    pub fn abort(&self, rid: &str, all: bool, scope: Scope) -> Vec<RequestId> {
        let Ok(m) = self.map.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (r, h) in m.iter() {
            let named = all || r == rid;
            let reachable = scope.is_none() || h.scope == scope;
            if named && reachable {
                h.aborted.store(true, Ordering::Relaxed);
                out.push(h.id);
            }
        }
        out.sort_by_key(|id| id.0);
        out
    }
}

/// Why a body is not an `AbortReq`.
#[derive(Debug, PartialEq, Eq)]
pub enum AbortBodyError {
    /// Not a JSON object.
    NotAnObject,
    /// `rid` is not a string.
    Rid,
    /// `abort_all` is not a boolean.
    AbortAll,
}

/// `body`'s `rid` (default empty) and `abort_all` (default false).
pub fn parse(body: &[u8]) -> Result<(String, bool), AbortBodyError> {
    let v: Value = serde_json::from_slice(body).map_err(|_| AbortBodyError::NotAnObject)?;
    if !v.is_object() {
        return Err(AbortBodyError::NotAnObject);
    }
    let rid = match v.get("rid") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(AbortBodyError::Rid),
    };
    let all = match v.get("abort_all") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(AbortBodyError::AbortAll),
    };
    Ok((rid, all))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abort_finds_the_rid_in_its_scope_and_forgets_it_when_done() {
        let t = Arc::new(RidTable::default());
        let a = RidTable::register(&t, "a", RequestId(1), Some(0)).expect("new");
        let b = RidTable::register(&t, "b", RequestId(2), None).expect("new");
        assert!(
            RidTable::register(&t, "a", RequestId(3), None).is_none(),
            "running"
        );
        assert!(
            RidTable::register(&t, "", RequestId(4), None).is_none(),
            "empty"
        );
        // Worker 1's listener cannot reach worker 0's request.
        assert!(t.abort("a", false, Some(1)).is_empty());
        assert!(!a.aborted());
        assert_eq!(t.abort("a", false, Some(0)), vec![RequestId(1)]);
        assert!(a.aborted() && !b.aborted());
        assert!(
            t.abort("zzz", false, None).is_empty(),
            "unknown rid: nothing"
        );
        assert_eq!(t.abort("", true, None), vec![RequestId(1), RequestId(2)]);
        drop(a);
        assert_eq!(t.abort("", true, None), vec![RequestId(2)]);
        assert!(RidTable::register(&t, "a", RequestId(5), None).is_some());
    }

    #[test]
    fn bodies_as_sglang_reads_them() {
        assert_eq!(parse(br#"{"rid": "x"}"#), Ok(("x".into(), false)));
        assert_eq!(parse(br#"{"abort_all": true}"#), Ok((String::new(), true)));
        assert_eq!(parse(br#"{"rid": 3}"#), Err(AbortBodyError::Rid));
        assert_eq!(parse(br#"{"abort_all": 1}"#), Err(AbortBodyError::AbortAll));
        assert_eq!(parse(b"[]"), Err(AbortBodyError::NotAnObject));
    }
}
