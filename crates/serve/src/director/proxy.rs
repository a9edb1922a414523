//! vLLM's `kv_transfer_params` flow on the worker listeners
//! ([`crate::vllm::kv_transfer`]): a `do_remote_decode` prefill on the worker it
//! was sent to, which pins and parks until its decode call attaches to a
//! decode worker; and a plain request, which the worker it was sent to
//! serves whole (smg's passthrough).

use super::{HttpDirector, Pending, StreamMsg};
use crate::vllm::kv_transfer::{Pinned, ProxyError};
use handoff_core::{FailureReason, HandoffId, Instant, Request, RequestId, SourceReady, WorkerId};
use handoff_engine::Route;
use handoff_router::Pool;
use tokio::sync::mpsc::UnboundedSender;

/// A proxied prefill that pinned and waits for its decode.
#[derive(Clone, Copy)]
pub(super) struct Parked {
    request: RequestId,
    source: WorkerId,
    ready: SourceReady,
    prompt_tokens: u32,
}

impl HttpDirector {
    /// Per-worker HTTP: queues `request` (prompt `tokens`) to arrive on
    /// `worker` itself, the router bypassed: whole on an aggregated
    /// worker, as a `do_remote_decode` prefill on a prefill worker (its
    /// stream then ends with [`StreamMsg::Prefilled`] when it pins). The
    /// listener checked the worker's pool and the ordering.
    pub fn submit_at(
        &mut self,
        request: Request,
        tokens: &[u32],
        worker: WorkerId,
        tx: UnboundedSender<StreamMsg>,
    ) {
        self.open(&request, tokens, tx);
        if self.pool(worker) == Pool::Prefill {
            self.proxied.insert(request.id);
        }
        self.arriving.push_back(Pending::At { request, worker });
    }

    /// Per-worker HTTP: queues `request` (prompt `tokens`), sent without
    /// `kv_transfer_params` to `worker` of a disaggregated source-first
    /// deployment, to be served whole there, prefill and decode, whatever
    /// `worker`'s pool ([`Serving::arrive_local`]): smg's PD passthrough
    /// for vLLM workers. Its stream ends when `worker` finishes it.
    pub fn submit_local(
        &mut self,
        request: Request,
        tokens: &[u32],
        worker: WorkerId,
        tx: UnboundedSender<StreamMsg>,
    ) {
        self.open(&request, tokens, tx);
        if self.pool(worker) == Pool::Prefill {
            self.edge.serve_whole(request.id);
        }
        self.arriving.push_back(Pending::Local { request, worker });
    }

    /// Per-worker HTTP: the decode call (`do_remote_prefill`) of the
    /// prefill `remote` names, to decode worker `worker` at `now`,
    /// generating `output_tokens`. Checked here against the pinned
    /// prefills; an error is for the caller to answer (nothing is queued).
    #[allow(clippy::too_many_arguments)]
    pub fn submit_decode(
        &mut self,
        remote: &crate::vllm::kv_transfer::RemotePrefill,
        worker: WorkerId,
        tokens: &[u32],
        output_tokens: u32,
        now: Instant,
        tx: UnboundedSender<StreamMsg>,
    ) -> Result<(), ProxyError> {
        let named = self.dp().scheduler(remote.engine.at);
        if named.is_none_or(|s| self.pool(s) != Pool::Prefill) {
            self.edge.ledger().note(
                crate::conformance::ConformanceKind::UnknownPrefillEngine,
                Some(worker.0),
                Some(remote.request.0),
                crate::conformance::peer(&remote.engine.to_string()),
            );
        }
        let p = match self.parked.get(&remote.handoff) {
            Some(p) if p.request == remote.request => *p,
            _ => return Err(ProxyError::UnknownHandoff),
        };
        if self.dp().scheduler(remote.engine.at) != Some(p.source) {
            return Err(ProxyError::WrongEngine);
        }
        let got = u32::try_from(tokens.len()).unwrap_or(u32::MAX);
        if got != p.prompt_tokens {
            return Err(ProxyError::PromptMismatch {
                expected: p.prompt_tokens,
                got,
            });
        }
        if remote.blocks != p.ready.blocks {
            return Err(ProxyError::BlockCount {
                expected: p.ready.blocks,
                got: remote.blocks,
            });
        }
        if self.edge.is_open(p.request) {
            return Err(ProxyError::AlreadyAttached);
        }
        let request = crate::openai::prompt::request_for(
            p.request,
            tokens,
            output_tokens,
            self.block_size,
            now,
        );
        self.open(&request, tokens, tx);
        self.arriving.push_back(Pending::Decode {
            at: now,
            request: p.request,
            handoff: remote.handoff,
            worker,
            output_tokens,
        });
        Ok(())
    }

    /// Routes the decode of parked `handoff` to `worker`; a handoff that
    /// ended since the call was checked refuses it.
    pub(super) fn attach(
        &mut self,
        request: RequestId,
        handoff: HandoffId,
        worker: WorkerId,
        output_tokens: u32,
        now: Instant,
        out: &mut Vec<Route>,
    ) {
        let Some(p) = self.parked.remove(&handoff) else {
            return self.end(request, StreamMsg::Refused(ProxyError::UnknownHandoff));
        };
        let routed = self.inner.route_destination_to(
            request,
            handoff,
            p.source,
            p.ready,
            worker,
            output_tokens,
            now,
            out,
        );
        if !routed {
            // The decode worker cannot take it now; the pin stays for
            // another try until its lease runs out.
            self.parked.insert(handoff, p);
            return self.end(request, StreamMsg::Failed(FailureReason::NoWorker));
        }
        // The destination reads the pinned prefix instead of computing it,
        // as vLLM counts a connector's external hit as cached.
        let cached = u32::try_from(p.ready.tokens)
            .unwrap_or(u32::MAX)
            .min(p.prompt_tokens);
        self.edge.tell(
            request,
            StreamMsg::Started {
                cached_tokens: cached,
            },
        );
    }

    /// vLLM's `request_finished` on the prefill worker for a
    /// `do_remote_decode` prefill `request` (handoff `id`) that pinned
    /// `ready` on `w`: the blocks stay, parked for the decode call, and the
    /// response carries where they are.
    pub(super) fn pinned(
        &mut self,
        w: WorkerId,
        id: HandoffId,
        request: RequestId,
        ready: SourceReady,
    ) {
        let prompt_tokens = self.edge.prompt_tokens(request).unwrap_or(0);
        self.parked.insert(
            id,
            Parked {
                request,
                source: w,
                ready,
                prompt_tokens,
            },
        );
        let dp = self.dp();
        let pinned = Pinned {
            request,
            handoff: id,
            engine: crate::vllm::kv_transfer::EngineId {
                at: dp.address(w),
                ranked: dp.is_split(),
            },
            blocks: ready.blocks,
            tokens: ready.tokens,
            side_port: None,
        };
        self.end_pinned(w, pinned);
    }
}
