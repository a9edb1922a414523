//! An in-process hub: every endpoint is a crossbeam channel, frames are moved
//! (not encoded), and joining, restarting and leaving are announced to the
//! other members exactly as a TCP endpoint announces them.

use crate::frame::Frame;
use crate::{Incoming, SendError, Transport};
use crossbeam_channel::{Receiver, Sender};
use handoff_core::{Generation, WorkerId};
use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

struct Member {
    generation: Generation,
    tx: Sender<Incoming>,
    /// Which endpoint value holds this membership, so that an endpoint
    /// replaced by a newer incarnation cannot act for it.
    token: u64,
}

#[derive(Default)]
struct Hub {
    members: BTreeMap<WorkerId, Member>,
    next_token: u64,
}

impl Hub {
    fn is_member(&self, me: WorkerId, token: u64) -> bool {
        self.members.get(&me).is_some_and(|m| m.token == token)
    }

    fn announce(&self, me: WorkerId, msg: &Incoming) {
        for (&w, m) in &self.members {
            if w != me {
                // A member whose endpoint is gone is removed by its drop;
                // until then a failed send has no one to tell.
                let _ = m.tx.send(msg.clone());
            }
        }
    }

    fn greet(&self, me: WorkerId, tx: &Sender<Incoming>) {
        for (&peer, m) in &self.members {
            if peer != me {
                let _ = tx.send(Incoming::PeerUp {
                    peer,
                    generation: m.generation,
                });
            }
        }
    }
}

/// The hub. Cloning it gives another handle to the same hub.
#[derive(Clone, Default)]
pub struct ChannelNet {
    hub: Arc<Mutex<Hub>>,
}

impl ChannelNet {
    /// An empty hub.
    pub fn new() -> Self {
        Self::default()
    }

    /// Joins `worker` in `generation`. Existing members see `PeerUp` for it
    /// and it sees `PeerUp` for each of them. If `worker` already has an
    /// endpoint, that one is superseded: its sends fail with
    /// [`SendError::Closed`] and its close no longer affects the new one.
    pub fn endpoint(&self, worker: WorkerId, generation: Generation) -> ChannelEndpoint {
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut hub = self.hub.lock();
        let token = hub.next_token;
        hub.next_token += 1;
        hub.greet(worker, &tx);
        hub.announce(
            worker,
            &Incoming::PeerUp {
                peer: worker,
                generation,
            },
        );
        hub.members.insert(
            worker,
            Member {
                generation,
                tx,
                token,
            },
        );
        ChannelEndpoint {
            me: worker,
            generation: AtomicU32::new(generation.0),
            token,
            hub: Arc::clone(&self.hub),
            rx,
        }
    }
}

/// One member of a [`ChannelNet`].
pub struct ChannelEndpoint {
    me: WorkerId,
    generation: AtomicU32,
    token: u64,
    hub: Arc<Mutex<Hub>>,
    rx: Receiver<Incoming>,
}

impl ChannelEndpoint {
    /// This worker came back as `generation`: peers see `PeerUp` with it,
    /// this endpoint sees `PeerUp` for every peer again (as after a
    /// reconnect), and whatever was queued for the old incarnation is
    /// discarded, as a restarted process loses its socket buffers.
    pub fn restart(&self, generation: Generation) -> Result<(), SendError> {
        let mut hub = self.hub.lock();
        if !hub.is_member(self.me, self.token) {
            return Err(SendError::Closed);
        }
        self.generation.store(generation.0, Ordering::Relaxed);
        while self.rx.try_recv().is_ok() {}
        if let Some(m) = hub.members.get_mut(&self.me) {
            m.generation = generation;
            let tx = m.tx.clone();
            hub.greet(self.me, &tx);
        }
        hub.announce(
            self.me,
            &Incoming::PeerUp {
                peer: self.me,
                generation,
            },
        );
        Ok(())
    }
}

impl Transport for ChannelEndpoint {
    fn me(&self) -> WorkerId {
        self.me
    }

    fn generation(&self) -> Generation {
        Generation(self.generation.load(Ordering::Relaxed))
    }

    fn send(&self, to: WorkerId, frame: Frame) -> Result<(), SendError> {
        if frame.is_control() {
            return Err(SendError::ControlFrame(frame.name()));
        }
        // Sending under the hub lock orders frames with joins and leaves:
        // no frame from an endpoint can arrive after its PeerLost.
        let hub = self.hub.lock();
        if !hub.is_member(self.me, self.token) {
            return Err(SendError::Closed);
        }
        match hub.members.get(&to) {
            Some(m) if to != self.me => {
                m.tx.send(Incoming::Frame {
                    from: self.me,
                    frame,
                })
                .map_err(|_| SendError::UnknownPeer(to))
            }
            _ => Err(SendError::UnknownPeer(to)),
        }
    }

    fn incoming(&self) -> &Receiver<Incoming> {
        &self.rx
    }

    fn close(&self) {
        let mut hub = self.hub.lock();
        if hub.is_member(self.me, self.token) {
            hub.members.remove(&self.me);
            hub.announce(self.me, &Incoming::PeerLost { peer: self.me });
        }
    }
}

impl Drop for ChannelEndpoint {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::samples::{every_frame, handoff};
    use std::time::Duration;

    const WAIT: Duration = Duration::from_secs(5);

    fn next(ep: &ChannelEndpoint) -> Incoming {
        ep.incoming().recv_timeout(WAIT).expect("an incoming")
    }

    #[test]
    fn joining_is_announced_both_ways() {
        let net = ChannelNet::new();
        let a = net.endpoint(WorkerId(1), Generation(0));
        let b = net.endpoint(WorkerId(2), Generation(3));
        assert_eq!(
            next(&a),
            Incoming::PeerUp {
                peer: WorkerId(2),
                generation: Generation(3)
            }
        );
        assert_eq!(
            next(&b),
            Incoming::PeerUp {
                peer: WorkerId(1),
                generation: Generation(0)
            }
        );
        assert!(a.incoming().is_empty() && b.incoming().is_empty());
    }

    #[test]
    fn every_data_frame_arrives_in_order() {
        let net = ChannelNet::new();
        let a = net.endpoint(WorkerId(1), Generation(0));
        let b = net.endpoint(WorkerId(2), Generation(0));
        let _ = next(&b);
        let data: Vec<Frame> = every_frame()
            .into_iter()
            .filter(|f| !f.is_control())
            .collect();
        for f in &data {
            a.send(WorkerId(2), f.clone()).unwrap();
        }
        for f in data {
            assert_eq!(
                next(&b),
                Incoming::Frame {
                    from: WorkerId(1),
                    frame: f
                }
            );
        }
    }

    #[test]
    fn control_frames_and_unknown_peers_are_refused() {
        let net = ChannelNet::new();
        let a = net.endpoint(WorkerId(1), Generation(0));
        assert_eq!(
            a.send(WorkerId(1), Frame::Handoff(handoff(1))),
            Err(SendError::UnknownPeer(WorkerId(1)))
        );
        assert_eq!(
            a.send(WorkerId(9), Frame::Handoff(handoff(1))),
            Err(SendError::UnknownPeer(WorkerId(9)))
        );
        assert_eq!(
            a.send(WorkerId(9), Frame::Bye),
            Err(SendError::ControlFrame("Bye"))
        );
    }

    #[test]
    fn drop_and_close_are_peer_lost() {
        let net = ChannelNet::new();
        let a = net.endpoint(WorkerId(1), Generation(0));
        let b = net.endpoint(WorkerId(2), Generation(0));
        let c = net.endpoint(WorkerId(3), Generation(0));
        while a.incoming().try_recv().is_ok() {}
        drop(b);
        assert_eq!(next(&a), Incoming::PeerLost { peer: WorkerId(2) });
        c.close();
        c.close();
        assert_eq!(next(&a), Incoming::PeerLost { peer: WorkerId(3) });
        assert!(a.incoming().is_empty());
        assert_eq!(
            c.send(WorkerId(1), Frame::Handoff(handoff(1))),
            Err(SendError::Closed)
        );
        assert_eq!(
            a.send(WorkerId(2), Frame::Handoff(handoff(1))),
            Err(SendError::UnknownPeer(WorkerId(2)))
        );
    }

    #[test]
    fn restart_announces_the_new_generation() {
        let net = ChannelNet::new();
        let a = net.endpoint(WorkerId(1), Generation(0));
        let b = net.endpoint(WorkerId(2), Generation(4));
        let _ = next(&a);
        a.send(WorkerId(2), Frame::Handoff(handoff(1))).unwrap();
        b.restart(Generation(5)).unwrap();
        assert_eq!(b.generation(), Generation(5));
        assert_eq!(
            next(&a),
            Incoming::PeerUp {
                peer: WorkerId(2),
                generation: Generation(5)
            }
        );
        // The old incarnation's queue (PeerUp for a, the frame) is gone; the
        // new one hears about a afresh.
        assert_eq!(
            next(&b),
            Incoming::PeerUp {
                peer: WorkerId(1),
                generation: Generation(0)
            }
        );
        assert!(b.incoming().is_empty());
    }

    #[test]
    fn a_new_endpoint_for_the_same_worker_supersedes_the_old() {
        let net = ChannelNet::new();
        let a = net.endpoint(WorkerId(1), Generation(0));
        let old = net.endpoint(WorkerId(2), Generation(0));
        let new = net.endpoint(WorkerId(2), Generation(1));
        assert_eq!(
            next(&a),
            Incoming::PeerUp {
                peer: WorkerId(2),
                generation: Generation(0)
            }
        );
        assert_eq!(
            next(&a),
            Incoming::PeerUp {
                peer: WorkerId(2),
                generation: Generation(1)
            }
        );
        assert_eq!(
            old.send(WorkerId(1), Frame::Handoff(handoff(1))),
            Err(SendError::Closed)
        );
        assert_eq!(old.restart(Generation(7)), Err(SendError::Closed));
        drop(old);
        assert!(a.incoming().is_empty(), "the old endpoint must not report");
        new.send(WorkerId(1), Frame::Handoff(handoff(2))).unwrap();
        assert_eq!(
            next(&a),
            Incoming::Frame {
                from: WorkerId(2),
                frame: Frame::Handoff(handoff(2))
            }
        );
    }
}
