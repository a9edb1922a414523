//! Per-worker ZMQ publishers of vLLM-format KV event batches, with vLLM's
//! replay socket (`vllm/distributed/kv_events.py`, `ZmqEventPublisher`:
//! `_publisher_thread` sends `(topic, seq, payload)`, `_service_replay`
//! answers a ROUTER request from its bounded buffer). See
//! [`crate::vllm_wire`] for the frames. ZMTP 3 is spoken by the pure-Rust
//! `zeromq` crate, so any libzmq subscriber (pyzmq) can connect.

use crate::vllm_wire::{encode_batch, WireEvent, END_SEQ};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

/// Batches kept for replay per worker (vLLM's `buffer_steps` default).
pub const REPLAY_BUFFER: usize = 10_000;

type Buffer = Arc<Mutex<VecDeque<(u64, Bytes)>>>;

/// Where worker `w`'s sockets listen.
#[derive(Clone, Debug)]
pub struct KvEndpoints {
    /// `tcp://HOST:PORT` of the PUB socket, one per worker.
    pub publish: Vec<String>,
    /// `tcp://HOST:PORT` of the ROUTER replay socket, one per worker, if any.
    pub replay: Vec<String>,
    /// The topic frame (vLLM's default is empty).
    pub topic: String,
}

/// The running publishers; [`KvPublishers::publish`] is called from the
/// engine thread.
pub struct KvPublishers {
    senders: Vec<UnboundedSender<Bytes>>,
}

impl KvPublishers {
    /// Binds every socket (so a bad address fails here, before serving) and
    /// starts their tasks on the current tokio runtime.
    pub async fn start(ep: &KvEndpoints) -> Result<Self, String> {
        let mut senders = Vec::new();
        for (w, addr) in ep.publish.iter().enumerate() {
            let mut sock = zeromq::PubSocket::new();
            sock.bind(addr)
                .await
                .map_err(|e| format!("--kv-events: binding {addr}: {e}"))?;
            let buffer: Buffer = Arc::new(Mutex::new(VecDeque::new()));
            if let Some(raddr) = ep.replay.get(w) {
                let mut router = zeromq::RouterSocket::new();
                router
                    .bind(raddr)
                    .await
                    .map_err(|e| format!("--kv-replay: binding {raddr}: {e}"))?;
                tokio::spawn(serve_replay(router, buffer.clone()));
            }
            let (tx, mut rx) = unbounded_channel::<Bytes>();
            let topic = Bytes::from(ep.topic.clone().into_bytes());
            tokio::spawn(async move {
                let mut seq: u64 = 0;
                while let Some(payload) = rx.recv().await {
                    let frames = vec![
                        topic.clone(),
                        Bytes::copy_from_slice(&seq.to_be_bytes()),
                        payload.clone(),
                    ];
                    if let Ok(msg) = ZmqMessage::try_from(frames) {
                        // No subscriber is not an error for a publisher.
                        let _ = sock.send(msg).await;
                    }
                    if let Ok(mut b) = buffer.lock() {
                        b.push_back((seq, payload));
                        if b.len() > REPLAY_BUFFER {
                            b.pop_front();
                        }
                    }
                    seq += 1;
                }
            });
            senders.push(tx);
        }
        Ok(KvPublishers { senders })
    }

    /// Publishes worker `w`'s events of one engine instant as one batch.
    pub fn publish(&self, w: usize, ts: f64, events: &[WireEvent]) {
        if let Some(tx) = self.senders.get(w) {
            let _ = tx.send(Bytes::from(encode_batch(ts, events, 0)));
        }
    }
}

/// Answers replay requests: `[identity, (b""), start_seq]` gets every kept
/// batch from `start_seq` on, then the end marker, each with the same
/// envelope.
async fn serve_replay(mut router: zeromq::RouterSocket, buffer: Buffer) {
    while let Ok(msg) = router.recv().await {
        let frames = msg.into_vec();
        // identity, optional empty delimiter (REQ clients), start sequence.
        let (Some(identity), Some(start)) = (frames.first(), frames.last()) else {
            continue;
        };
        let delimited = frames.len() == 3 && frames[1].is_empty();
        if frames.len() < 2 || frames.len() > 3 || start.len() != 8 {
            continue;
        }
        let mut s = [0u8; 8];
        s.copy_from_slice(start);
        let start = u64::from_be_bytes(s);
        let kept: Vec<(u64, Bytes)> = buffer
            .lock()
            .map(|b| b.iter().filter(|(q, _)| *q >= start).cloned().collect())
            .unwrap_or_default();
        let reply = |seq: Bytes, payload: Bytes| {
            let mut v = vec![identity.clone()];
            if delimited {
                v.push(Bytes::new());
            }
            v.push(seq);
            v.push(payload);
            ZmqMessage::try_from(v)
        };
        for (seq, payload) in kept {
            if let Ok(m) = reply(Bytes::copy_from_slice(&seq.to_be_bytes()), payload) {
                let _ = router.send(m).await;
            }
        }
        if let Ok(m) = reply(Bytes::copy_from_slice(&END_SEQ), Bytes::new()) {
            let _ = router.send(m).await;
        }
    }
}
