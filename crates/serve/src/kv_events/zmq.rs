//! Per-worker ZMQ publishers of vLLM-format KV event batches, with vLLM's
//! replay socket (`vllm/distributed/kv_events.py`, `ZmqEventPublisher`:
//! `_publisher_thread` sends `(topic, seq, payload)`, `_service_replay`
//! answers a ROUTER request from its bounded buffer). See
//! [`crate::vllm::wire`] for the frames. ZMTP 3 is spoken by the pure-Rust
//! `zeromq` crate, so any libzmq subscriber (pyzmq) can connect.
//!
//! Replay, as vLLM's `_service_replay` answers it: a request for
//! `start_seq` gets every kept batch whose sequence is at least
//! `start_seq`, in order and without holes, then the end marker (`END_SEQ`,
//! empty payload). A batch is kept before it is published, so any sequence
//! a subscriber has seen can be replayed. The buffer holds the last
//! `keep` batches; when `start_seq` is older than the oldest kept, the
//! answer starts at the oldest kept (its first sequence is above the one
//! asked for, which Dynamo's listener reports as `started_after_requested`)
//! and still ends with the marker; a `start_seq` past the newest is
//! answered with the marker alone.

use crate::vllm::wire::{encode_batch_as, KvEventEncoding, WireEvent, END_SEQ};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc::{unbounded_channel, UnboundedSender};
use zeromq::{Socket, SocketRecv, SocketSend, ZmqMessage};

/// Batches kept for replay per worker (vLLM's `buffer_steps` default).
pub const REPLAY_BUFFER: usize = 10_000;

/// The batches kept for replay, oldest first, with their sequence numbers.
#[derive(Debug)]
struct Kept {
    keep: usize,
    batches: VecDeque<(u64, Bytes)>,
}

impl Kept {
    fn new(keep: usize) -> Self {
        Kept {
            keep: keep.max(1),
            batches: VecDeque::new(),
        }
    }

    fn push(&mut self, seq: u64, payload: Bytes) {
        self.batches.push_back((seq, payload));
        while self.batches.len() > self.keep {
            self.batches.pop_front();
        }
    }

    /// The kept batches from `start` on. Sequences are consecutive, so the
    /// first one is found by subtraction.
    fn from(&self, start: u64) -> Vec<(u64, Bytes)> {
        let Some(&(oldest, _)) = self.batches.front() else {
            return Vec::new();
        };
        let skip = usize::try_from(start.saturating_sub(oldest)).unwrap_or(usize::MAX);
        self.batches.iter().skip(skip).cloned().collect()
    }
}

type Buffer = Arc<Mutex<Kept>>;

/// Where worker `w`'s sockets listen.
#[derive(Clone, Debug)]
pub struct KvEndpoints {
    /// `tcp://HOST:PORT` of the PUB socket, one per worker.
    pub publish: Vec<String>,
    /// `tcp://HOST:PORT` of the ROUTER replay socket, one per worker, if any.
    pub replay: Vec<String>,
    /// The topic frame (vLLM's default is empty).
    pub topic: String,
    /// How events are laid out in a batch (vLLM's array form by default).
    pub encoding: KvEventEncoding,
}

/// The running publishers; [`KvPublishers::publish`] is called from the
/// engine thread.
pub struct KvPublishers {
    senders: Vec<UnboundedSender<Bytes>>,
    encoding: KvEventEncoding,
}

impl KvPublishers {
    /// Binds every socket (so a bad address fails here, before serving) and
    /// starts their tasks on the current tokio runtime.
    pub async fn start(ep: &KvEndpoints) -> Result<Self, String> {
        Self::start_keeping(ep, REPLAY_BUFFER).await
    }

    /// As [`KvPublishers::start`], keeping the last `keep` batches per
    /// worker for replay.
    pub async fn start_keeping(ep: &KvEndpoints, keep: usize) -> Result<Self, String> {
        let mut senders = Vec::new();
        for (w, addr) in ep.publish.iter().enumerate() {
            let mut sock = zeromq::PubSocket::new();
            sock.bind(addr)
                .await
                .map_err(|e| format!("--kv-events: binding {addr}: {e}"))?;
            let buffer: Buffer = Arc::new(Mutex::new(Kept::new(keep)));
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
                    // Kept first: a subscriber that sees `seq` live and asks
                    // for it back finds it.
                    if let Ok(mut b) = buffer.lock() {
                        b.push(seq, payload.clone());
                    }
                    let frames = vec![
                        topic.clone(),
                        Bytes::copy_from_slice(&seq.to_be_bytes()),
                        payload,
                    ];
                    if let Ok(msg) = ZmqMessage::try_from(frames) {
                        // No subscriber is not an error for a publisher.
                        let _ = sock.send(msg).await;
                    }
                    seq += 1;
                }
            });
            senders.push(tx);
        }
        Ok(KvPublishers {
            senders,
            encoding: ep.encoding,
        })
    }

    #[cfg(test)]
    /// Publishes worker `w`'s events of one engine instant as one batch.
    pub fn publish(&self, w: usize, ts: f64, events: &[WireEvent]) {
        self.publish_rank(w, 0, ts, events);
    }

    /// Publishes scheduler `s`'s events of one engine instant as one batch
    /// stamped with its `data_parallel_rank` (publishers are per
    /// scheduler: each rank has its own, as in vLLM).
    pub fn publish_rank(&self, s: usize, dp_rank: u16, ts: f64, events: &[WireEvent]) {
        if let Some(tx) = self.senders.get(s) {
            let _ = tx.send(Bytes::from(encode_batch_as(
                ts,
                events,
                u32::from(dp_rank),
                self.encoding,
            )));
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
        let kept = buffer.lock().map(|b| b.from(start)).unwrap_or_default();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(keep: usize, n: u64) -> Kept {
        let mut k = Kept::new(keep);
        for seq in 0..n {
            k.push(seq, Bytes::from(seq.to_string()));
        }
        k
    }

    fn seqs(v: &[(u64, Bytes)]) -> Vec<u64> {
        v.iter().map(|(s, _)| *s).collect()
    }

    #[test]
    fn any_kept_range_comes_back_whole_and_evicted_starts_at_the_oldest() {
        let k = kept(4, 10);
        assert_eq!(seqs(&k.from(7)), vec![7, 8, 9]);
        assert_eq!(seqs(&k.from(6)), vec![6, 7, 8, 9]);
        // 0..6 are gone: the answer starts at the oldest kept.
        assert_eq!(seqs(&k.from(0)), vec![6, 7, 8, 9]);
        assert!(k.from(10).is_empty());
        assert!(k.from(u64::MAX).is_empty());
        assert!(Kept::new(4).from(0).is_empty());
        assert_eq!(k.from(8)[0].1, Bytes::from("8"));
    }

    /// Asks `dealer`'s replay socket for `start` on; the sequences answered
    /// before the end marker.
    async fn answer(dealer: &mut zeromq::DealerSocket, start: u64) -> Vec<u64> {
        let ask = vec![Bytes::new(), Bytes::copy_from_slice(&start.to_be_bytes())];
        dealer
            .send(ZmqMessage::try_from(ask).expect("frames"))
            .await
            .expect("send");
        let mut got = Vec::new();
        loop {
            let f = tokio::time::timeout(std::time::Duration::from_secs(5), dealer.recv())
                .await
                .expect("answer in time")
                .expect("recv")
                .into_vec();
            assert_eq!(f.len(), 3, "[delimiter, seq, payload]");
            assert!(f[0].is_empty());
            if f[2].is_empty() {
                assert_eq!(&f[1][..], &END_SEQ[..], "end marker");
                return got;
            }
            got.push(u64::from_be_bytes(f[1][..].try_into().expect("8 bytes")));
        }
    }

    /// A DEALER client (as Dynamo's listener connects) asks the replay
    /// socket for ranges over loopback: kept ones come back in order, each
    /// answer ends with vLLM's end marker, an evicted start is answered
    /// from the oldest kept.
    #[tokio::test]
    async fn replay_socket_answers_ranges_over_loopback() {
        let ports: Vec<u16> = (0..2)
            .map(|_| {
                std::net::TcpListener::bind("127.0.0.1:0")
                    .and_then(|l| l.local_addr())
                    .map(|a| a.port())
                    .expect("free port")
            })
            .collect();
        let ep = KvEndpoints {
            publish: vec![format!("tcp://127.0.0.1:{}", ports[0])],
            replay: vec![format!("tcp://127.0.0.1:{}", ports[1])],
            topic: String::new(),
            encoding: KvEventEncoding::Array,
        };
        let publishers = KvPublishers::start_keeping(&ep, 5).await.expect("bind");
        for i in 0..8u32 {
            publishers.publish(0, f64::from(i), &[WireEvent::AllBlocksCleared]);
        }
        let mut dealer = zeromq::DealerSocket::new();
        dealer.connect(&ep.replay[0]).await.expect("connect");
        // Publishing is asynchronous: wait until the newest batch is kept.
        let mut waited = 0;
        while answer(&mut dealer, 7).await.is_empty() {
            waited += 1;
            assert!(waited < 100, "batches never kept");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(answer(&mut dealer, 4).await, vec![4, 5, 6, 7]);
        assert_eq!(answer(&mut dealer, 5).await, vec![5, 6, 7]);
        assert_eq!(
            answer(&mut dealer, 0).await,
            vec![3, 4, 5, 6, 7],
            "0..3 evicted"
        );
        assert_eq!(answer(&mut dealer, 8).await, Vec::<u64>::new());
    }
}
