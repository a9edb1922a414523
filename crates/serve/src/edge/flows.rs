//! Flows: one HTTP request's stream while it is in flight, and what it
//! counts. A flow opens with its prompt's blocks held for the KV events
//! ([`super::kv`]); it is placed on a scheduler (the prefix-cache lookup:
//! `cached_tokens`, `prefix_cache_queries`/`hits`, `prompt_tokens_total`),
//! streams output tokens (TTFT, ITL, `generation_tokens_total`), and ends
//! once: finished, pinned (a `do_remote_decode` prefill answered with its
//! `kv_transfer_params`), failed or refused.
//!
//! Counted where vLLM's engine counts (`vllm/v1/metrics/loggers.py`,
//! `PrometheusStatLogger`, fed by `IterationStats` and `FinishedRequestStats`
//! in `vllm/v1/metrics/stats.py`): prompt tokens on the scheduler that
//! prefills; generated tokens and one success on the scheduler that
//! produced them, the pinned prefill's one sampled token and success on
//! its prefill scheduler (vLLM's prefill engine finishes a `max_tokens=1`
//! request); failures by reason, once per request.

use super::Edge;
use crate::openai::prompt::chained_block_hashes_salted;
use crate::sglang::bootstrap::BootstrapError;
use crate::vllm::kv_transfer::{Pinned, ProxyError};
use handoff_core::FailureReason;
use handoff_core::{Instant, Request, RequestId, WorkerId};
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// What the engine tells one HTTP request, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamMsg {
    /// It was routed; this many prompt tokens were cached on the worker
    /// that prefills it.
    Started {
        /// `usage.prompt_tokens_details.cached_tokens`.
        cached_tokens: u32,
    },
    /// Output tokens were produced.
    Tokens(u32),
    /// It finished.
    Finished,
    /// It failed, for this reason.
    Failed(FailureReason),
    /// Per-worker HTTP, `do_remote_decode`: the prefill pinned (its one
    /// token is implied); the response carries the `kv_transfer_params`.
    Prefilled(Pinned),
    /// Per-worker HTTP: the worker's listener refused it (a 4xx).
    Refused(ProxyError),
    /// SGLang PD leg: refused at its bootstrap room, its partner never
    /// came, or (a decode leg that reserved early) its KV never came.
    Bootstrap(BootstrapError),
}

/// One HTTP request while it is in flight.
pub(crate) struct Flow {
    tx: UnboundedSender<StreamMsg>,
    arrival: Instant,
    last_token: Option<Instant>,
    prompt_tokens: u32,
    /// The prompt's chained block hashes (LoRA-salted, as the core's), for
    /// `cached_tokens` and the KV events' token ids.
    hashes: Vec<u64>,
    /// Its LoRA adapter's name.
    lora: Option<Arc<str>>,
}

impl Edge {
    /// Opens the stream of `request` (prompt `tokens`), answered on `tx`.
    /// A request already open is replaced (its blocks let go).
    pub(crate) fn open(
        &mut self,
        request: &Request,
        tokens: &[u32],
        tx: UnboundedSender<StreamMsg>,
    ) {
        let bs = self.kv.block_size();
        let hashes = chained_block_hashes_salted(tokens, bs, request.lora_salt());
        self.kv.hold(&hashes, tokens, request.lora.as_ref());
        let flow = Flow {
            tx,
            arrival: request.arrival,
            last_token: None,
            prompt_tokens: request.prompt_tokens,
            hashes,
            lora: request.lora.as_ref().map(|l| Arc::from(l.name.as_str())),
        };
        if let Some(old) = self.flows.insert(request.id, flow) {
            self.kv.release(&old.hashes);
        }
    }

    /// `r` is served whole on a prefill scheduler: its tokens and its
    /// finish reach the client.
    pub(crate) fn serve_whole(&mut self, r: RequestId) {
        self.local.insert(r);
    }

    /// Whether `r`'s stream is open.
    pub(crate) fn is_open(&self, r: RequestId) -> bool {
        self.flows.contains_key(&r)
    }

    /// The open flows' requests, in id order.
    pub(crate) fn open_ids(&self) -> Vec<RequestId> {
        let mut ids: Vec<RequestId> = self.flows.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// `r`'s prompt length, while it is open.
    pub(crate) fn prompt_tokens(&self, r: RequestId) -> Option<u32> {
        self.flows.get(&r).map(|f| f.prompt_tokens)
    }

    /// Sends `msg` on `r`'s stream without ending it.
    pub(crate) fn tell(&self, r: RequestId, msg: StreamMsg) {
        if let Some(f) = self.flows.get(&r) {
            let _ = f.tx.send(msg);
        }
    }

    /// `r` was placed on scheduler `s` to prefill: its cached prompt
    /// tokens there (returned) are its prefix-cache hit, its prompt is
    /// queried and counted there, its adapter waits there, the conformance
    /// report hears where it was computed, and its client hears `Started`.
    pub(crate) fn started(&mut self, s: WorkerId, r: RequestId) -> u32 {
        let si = s.0 as usize;
        let Some(f) = self.flows.get(&r) else {
            return 0;
        };
        let cached = self.kv.cached_on(s, &f.hashes, f.prompt_tokens);
        let (last, at) = (f.hashes.last().copied(), f.arrival);
        if let Some(name) = f.lora.clone() {
            let w = self.lora.waiting(r, name, si);
            self.lora_changed(w);
        }
        self.computed(s, r, last, at);
        if let Some(f) = self.flows.get(&r) {
            let q = u64::from(f.prompt_tokens);
            self.metrics.prefix_query(si, q, u64::from(cached));
            let _ = f.tx.send(StreamMsg::Started {
                cached_tokens: cached,
            });
        }
        cached
    }

    /// `tokens` output tokens of `r` produced on scheduler index `si`
    /// reached the client at `now`: the stream, TTFT, ITL and the
    /// generated-token counter see them.
    pub(crate) fn stream(&mut self, si: usize, r: RequestId, tokens: u32, now: Instant) {
        if let Some((left, on)) = self.lora.running(r, si) {
            self.lora_changed(left);
            self.lora_changed(on);
        }
        if let Some(f) = self.flows.get_mut(&r) {
            match f.last_token {
                None => self.metrics.ttft(si, (now - f.arrival).as_secs_f64()),
                Some(t) => {
                    let gap = (now - t).as_secs_f64() / f64::from(tokens);
                    for _ in 0..tokens {
                        self.metrics.itl(si, gap);
                    }
                }
            }
            f.last_token = Some(now);
            self.metrics.generated(si, u64::from(tokens));
            let _ = f.tx.send(StreamMsg::Tokens(tokens));
        }
    }

    /// Scheduler `s` pinned the `do_remote_decode` prefill `r`: its one
    /// sampled token and its success count there (the caller ends its
    /// stream with the `kv_transfer_params`; [`Edge::close`] holds its
    /// prompt blocks until its source role ends).
    pub(crate) fn pinned(&mut self, s: WorkerId, r: RequestId) {
        let si = s.0 as usize;
        if self.flows.contains_key(&r) {
            self.metrics.generated(si, 1);
            self.metrics.request_succeeded(si);
        }
    }

    /// Request-end accounting: a failure counts by its reason.
    pub(crate) fn account(&self, msg: &StreamMsg) {
        if let StreamMsg::Failed(reason) = msg {
            self.metrics.request_failed(*reason);
        }
    }

    /// Ends `r`'s stream with `msg`: its adapter leaves the LoRA lists, its
    /// prompt blocks are let go (a pin's are held until its source ends).
    pub(crate) fn close(&mut self, r: RequestId, msg: StreamMsg) {
        self.local.remove(&r);
        if let Some(w) = self.lora.ended(r) {
            self.lora_changed(w);
        }
        if let Some(f) = self.flows.remove(&r) {
            let pinned = matches!(msg, StreamMsg::Prefilled(_));
            let _ = f.tx.send(msg);
            if pinned {
                if let Some(old) = self.pinned.insert(r, f.hashes) {
                    self.kv.release(&old);
                }
            } else {
                self.kv.release(&f.hashes);
            }
        }
    }

    /// `r`'s end-to-end latency on scheduler index `si` at `now`, and its
    /// success there, if its stream is open.
    pub(crate) fn finished_on(&self, si: usize, r: RequestId, now: Instant) {
        if let Some(f) = self.flows.get(&r) {
            self.metrics.e2e(si, (now - f.arrival).as_secs_f64());
            self.metrics.request_succeeded(si);
        }
    }

    /// The source role of pinned prefill `r` ended: its prompt blocks go.
    pub(crate) fn source_ended(&mut self, r: RequestId) {
        if let Some(hashes) = self.pinned.remove(&r) {
            self.kv.release(&hashes);
        }
    }

    /// Writes scheduler `si`'s adapter lists to the metrics.
    fn lora_changed(&self, si: usize) {
        let (running, waiting) = self.lora.lists(si);
        self.metrics.lora_adapters(si, running, waiting);
    }
}
