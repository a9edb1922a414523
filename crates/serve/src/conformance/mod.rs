//! The P/D conformance report: what the traffic in front of the engines
//! did that disaggregation did not intend, noted by the engines that saw
//! it (issue 55, item 8).
//!
//! A router that gets prefill/decode disaggregation wrong does so
//! silently: `smg --backend vllm` with command-line workers (no
//! `kv_connector`) sends each request twice, plain, and every engine
//! computes the prompt; a decode engine started without a KV connector
//! recomputes every prompt. Upstream engines say nothing: vLLM's
//! `NixlConnector.get_num_new_matched_tokens`
//! (`vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`)
//! matches nothing for a request without `kv_transfer_params` and the
//! scheduler prefills it locally; SGLang's PD legs wait for a partner that
//! never comes until `SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT`. Here each
//! such event is one [`ConformanceKind`], counted in
//! `<engine>:handoff_conformance_total` (label `kind`, with `model_name`),
//! listed at `GET /debug/conformance` (per kind its count and its last
//! [`MAX_EXAMPLES`] examples) and summarised at shutdown, one line per
//! kind, in both serve modes.
//!
//! The counter is named in the edge's `<engine>:handoff_*` style
//! (`vllm:` or `sglang:` as the deployment's other series), beside
//! `<engine>:handoff_requests_failed_total`, which it resembles: a tally
//! of the edge's, labelled by model and a typed reason, no `engine` label
//! (an example names its engine).
//!
//! [`Ledger`] is the tally every hook writes to (behind a mutex: the HTTP
//! handlers and the engine thread both note); [`detect::Detector`] is the
//! sans-IO state the engine side needs to tell some kinds apart (a lease's
//! reader, a prompt prefilled on both pools within a window).

pub(crate) mod detect;

use handoff_core::Backend;
use handoff_router::Pool;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::Mutex;

/// Examples kept per kind (the oldest goes first).
pub const MAX_EXAMPLES: usize = 16;

/// What the traffic did that disaggregation did not intend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConformanceKind {
    /// A decode engine got a request without the handoff's fields: vLLM,
    /// no `kv_transfer_params` (the prompt is computed on the decode engine,
    /// as vLLM's connector loads nothing for it); SGLang, no
    /// `bootstrap_host`/`bootstrap_room` (refused here with a 400).
    DecodeWithoutParams,
    /// A prefill's lease ran out before any decode began to read it (vLLM:
    /// the prefill engine's `_reqs_to_send` sweep frees it, counted as
    /// `nixl_num_kv_expired_reqs`): the decode never came, or came too late.
    LeaseExpiredUnread,
    /// A prefill's lease ran out while its decode's read was in flight:
    /// the read ends on KV that may be another request's.
    LeaseExpiredReading,
    /// The same block-aligned prompt was prefilled on a prefill engine and
    /// on a decode engine within [`detect::DUPLICATE_WINDOW`].
    DuplicatePrefill,
    /// An engine computed a prompt outside disaggregation (a decode
    /// engine's whole request, or a prefill engine's) while every engine
    /// of the other pool was idle.
    IdlePool,
    /// An SGLang PD leg whose partner never came: its bootstrap room saw
    /// one side only until the bootstrap (or, for an early decode, the
    /// waiting) timeout.
    UnpairedLeg,
    /// A decode named a prefill engine not in the deployment: a
    /// `remote_engine_id` no prefill worker has, a `remote_host` outside
    /// `--kv-peer-allow`, or a side channel nothing answers at.
    UnknownPrefillEngine,
}

impl ConformanceKind {
    /// Every kind, in report order.
    pub const ALL: [ConformanceKind; 7] = [
        ConformanceKind::DecodeWithoutParams,
        ConformanceKind::LeaseExpiredUnread,
        ConformanceKind::LeaseExpiredReading,
        ConformanceKind::DuplicatePrefill,
        ConformanceKind::IdlePool,
        ConformanceKind::UnpairedLeg,
        ConformanceKind::UnknownPrefillEngine,
    ];

    /// The `kind` label and JSON key.
    pub fn name(self) -> &'static str {
        match self {
            ConformanceKind::DecodeWithoutParams => "decode_without_params",
            ConformanceKind::LeaseExpiredUnread => "lease_expired_unread",
            ConformanceKind::LeaseExpiredReading => "lease_expired_reading",
            ConformanceKind::DuplicatePrefill => "duplicate_prefill",
            ConformanceKind::IdlePool => "idle_pool",
            ConformanceKind::UnpairedLeg => "unpaired_leg",
            ConformanceKind::UnknownPrefillEngine => "unknown_prefill_engine",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What one example says besides its kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detail {
    /// Nothing more.
    None,
    /// The pool left idle.
    IdlePool(Pool),
    /// The engine (scheduler index) that prefilled the same prompt first.
    FirstPrefilledOn(u32),
    /// An SGLang room and the side that came.
    Room {
        /// `bootstrap_room`.
        room: u64,
        /// `"prefill"` or `"decode"`.
        side: &'static str,
    },
    /// The prefill engine a decode named (sanitized, bounded).
    Peer(String),
}

impl Detail {
    fn text(&self) -> Option<String> {
        match self {
            Detail::None => None,
            Detail::IdlePool(p) => Some(format!("idle pool: {}", p.name())),
            Detail::FirstPrefilledOn(e) => Some(format!("first prefilled on engine {e}")),
            Detail::Room { room, side } => Some(format!("room {room}, {side} leg only")),
            Detail::Peer(p) => Some(format!("named {p}")),
        }
    }
}

/// Characters of a peer's name an example keeps.
const MAX_PEER: usize = 80;

/// `s`, printable ASCII only and at most [`MAX_PEER`] characters, for an
/// example naming what a client sent.
pub(crate) fn peer(s: &str) -> Detail {
    Detail::Peer(
        s.chars()
            .map(|c| if c.is_ascii_graphic() { c } else { '?' })
            .take(MAX_PEER)
            .collect(),
    )
}

/// One noted event.
#[derive(Clone, Debug, PartialEq)]
pub struct Example {
    /// The request (the engine's request id), when there is one.
    pub request: Option<u64>,
    /// The engine that noted it: its index among this process's
    /// schedulers, as the `engine` label of the other series.
    pub engine: Option<u32>,
    /// Wall-clock Unix seconds.
    pub at_unix_s: f64,
    /// What else.
    pub detail: Detail,
}

impl Example {
    fn json(&self) -> Value {
        json!({
            "request_id": self.request,
            "engine": self.engine,
            "at_unix_s": self.at_unix_s,
            "detail": self.detail.text(),
        })
    }
}

/// Labels of `<engine>:handoff_conformance_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    model_name: String,
    kind: String,
}

#[derive(Default)]
struct Tally {
    counts: [u64; ConformanceKind::ALL.len()],
    examples: [VecDeque<Example>; ConformanceKind::ALL.len()],
    /// Whether each scheduler had requests running or waiting at its last
    /// capacity snapshot, and its pool (`None`: not reported yet).
    loads: Vec<Option<(Pool, bool)>>,
}

/// The tally: counts, examples, the counter family, and the pools' last
/// loads (see the module docs).
pub struct Ledger {
    backend: Backend,
    model: String,
    counter: Family<KindLabels, Counter>,
    inner: Mutex<Tally>,
}

impl Ledger {
    /// The ledger of `schedulers` schedulers of `backend` serving `model`.
    pub fn new(backend: Backend, model: &str, schedulers: usize) -> Self {
        let tally = Tally {
            loads: vec![None; schedulers],
            ..Tally::default()
        };
        Ledger {
            backend,
            model: model.to_string(),
            counter: Family::default(),
            inner: Mutex::new(tally),
        }
    }

    /// Registers `<p>handoff_conformance` (written `..._total`).
    pub(crate) fn register(&self, registry: &mut Registry, p: &str) {
        registry.register(
            format!("{p}handoff_conformance"),
            "Traffic that disaggregation did not intend, by kind (GET /debug/conformance)",
            self.counter.clone(),
        );
    }

    /// The deployment's backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Notes `kind`, seen by scheduler `engine` about `request`, now.
    pub fn note(
        &self,
        kind: ConformanceKind,
        engine: Option<u32>,
        request: Option<u64>,
        detail: Detail,
    ) {
        let at_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        self.note_at(
            kind,
            Example {
                request,
                engine,
                at_unix_s,
                detail,
            },
        );
    }

    /// Notes `kind` with example `ex`.
    pub fn note_at(&self, kind: ConformanceKind, ex: Example) {
        let labels = KindLabels {
            model_name: self.model.clone(),
            kind: kind.name().to_string(),
        };
        self.counter.get_or_create(&labels).inc();
        if let Ok(mut t) = self.inner.lock() {
            let i = kind.index();
            t.counts[i] += 1;
            let q = &mut t.examples[i];
            if q.len() == MAX_EXAMPLES {
                q.pop_front();
            }
            q.push_back(ex);
        }
    }

    /// Scheduler `s` of `pool` is `busy` (requests running or waiting).
    pub fn load(&self, s: usize, pool: Pool, busy: bool) {
        if let Ok(mut t) = self.inner.lock() {
            if let Some(slot) = t.loads.get_mut(s) {
                *slot = Some((pool, busy));
            }
        }
    }

    /// Whether every scheduler of `pool` this process knows reported idle
    /// at its last snapshot (`false` when none of that pool reported).
    pub fn pool_idle(&self, pool: Pool) -> bool {
        let Ok(t) = self.inner.lock() else {
            return false;
        };
        let mut of_pool = t.loads.iter().flatten().filter(|(p, _)| *p == pool);
        let mut any = false;
        let idle = of_pool.all(|(_, busy)| {
            any = true;
            !busy
        });
        any && idle
    }

    /// How many of `kind` were noted.
    pub fn count(&self, kind: ConformanceKind) -> u64 {
        self.inner.lock().map_or(0, |t| t.counts[kind.index()])
    }

    /// `GET /debug/conformance`: per kind its count and last examples,
    /// oldest first.
    pub fn json(&self) -> Value {
        let Ok(t) = self.inner.lock() else {
            return json!({});
        };
        let kinds: serde_json::Map<String, Value> = ConformanceKind::ALL
            .iter()
            .map(|k| {
                let i = k.index();
                let ex: Vec<Value> = t.examples[i].iter().map(Example::json).collect();
                (
                    k.name().to_string(),
                    json!({"count": t.counts[i], "examples": ex}),
                )
            })
            .collect();
        json!({"max_examples": MAX_EXAMPLES, "kinds": kinds})
    }

    /// The shutdown summary: one line per kind.
    pub fn summary_lines(&self) -> Vec<String> {
        ConformanceKind::ALL
            .iter()
            .map(|k| {
                let n = self.count(*k);
                let tail = if n == 0 {
                    ""
                } else {
                    " (GET /debug/conformance)"
                };
                format!("handoff-mocker serve: conformance {}: {n}{tail}", k.name())
            })
            .collect()
    }

    /// Writes the shutdown summary to stderr.
    pub fn print_summary(&self) {
        for line in self.summary_lines() {
            eprintln!("{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger() -> (Ledger, Registry) {
        let l = Ledger::new(Backend::Vllm, "m", 3);
        let mut r = Registry::default();
        l.register(&mut r, "vllm:");
        (l, r)
    }

    fn text(r: &Registry) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, r).unwrap();
        s
    }

    #[test]
    fn a_note_counts_in_the_family_and_the_list() {
        let (l, r) = ledger();
        l.note(
            ConformanceKind::DecodeWithoutParams,
            Some(1),
            Some(7),
            Detail::None,
        );
        l.note(
            ConformanceKind::DecodeWithoutParams,
            Some(1),
            Some(8),
            Detail::None,
        );
        assert!(text(&r).contains(
            "vllm:handoff_conformance_total{model_name=\"m\",kind=\"decode_without_params\"} 2"
        ));
        let j = l.json();
        let k = &j["kinds"]["decode_without_params"];
        assert_eq!(k["count"], 2);
        assert_eq!(k["examples"][1]["request_id"], 8);
        assert_eq!(k["examples"][1]["engine"], 1);
        assert_eq!(j["kinds"]["unpaired_leg"]["count"], 0);
        assert_eq!(
            j["kinds"].as_object().unwrap().len(),
            ConformanceKind::ALL.len()
        );
    }

    #[test]
    fn examples_are_bounded_and_keep_the_newest() {
        let (l, _) = ledger();
        for i in 0..(MAX_EXAMPLES as u64 * 3) {
            l.note(ConformanceKind::UnpairedLeg, None, Some(i), Detail::None);
        }
        let j = l.json();
        let ex = j["kinds"]["unpaired_leg"]["examples"].as_array().unwrap();
        assert_eq!(ex.len(), MAX_EXAMPLES);
        assert_eq!(
            ex[MAX_EXAMPLES - 1]["request_id"],
            MAX_EXAMPLES as u64 * 3 - 1
        );
        assert_eq!(
            l.count(ConformanceKind::UnpairedLeg),
            MAX_EXAMPLES as u64 * 3
        );
    }

    #[test]
    fn a_pool_is_idle_only_when_every_reported_scheduler_of_it_is() {
        let (l, _) = ledger();
        assert!(!l.pool_idle(Pool::Prefill), "nothing reported");
        l.load(0, Pool::Prefill, false);
        l.load(1, Pool::Prefill, true);
        l.load(2, Pool::Decode, true);
        assert!(!l.pool_idle(Pool::Prefill));
        l.load(1, Pool::Prefill, false);
        assert!(l.pool_idle(Pool::Prefill));
        assert!(!l.pool_idle(Pool::Decode));
        l.load(99, Pool::Decode, false);
        assert!(
            !l.pool_idle(Pool::Decode),
            "an unknown scheduler is ignored"
        );
    }

    #[test]
    fn the_summary_names_every_kind_once() {
        let (l, _) = ledger();
        l.note(
            ConformanceKind::IdlePool,
            None,
            None,
            Detail::IdlePool(Pool::Prefill),
        );
        let lines = l.summary_lines();
        assert_eq!(lines.len(), ConformanceKind::ALL.len());
        assert!(lines
            .iter()
            .any(|s| s.ends_with("idle_pool: 1 (GET /debug/conformance)")));
        assert!(lines.iter().any(|s| s.ends_with("unpaired_leg: 0")));
    }

    #[test]
    fn a_peer_name_is_printable_and_bounded() {
        let Detail::Peer(p) = peer(&format!("a\nb{}", "x".repeat(500))) else {
            panic!("not a peer");
        };
        assert!(p.starts_with("a?b"));
        assert_eq!(p.chars().count(), MAX_PEER);
    }
}
