//! # handoff-transport
//!
//! Carries [`Frame`]s between live workers and their frontend: handoff facts
//! worker to worker, requests frontend to worker, events worker to frontend.
//! It knows nothing of replay or of what the frames mean.
//!
//! Two implementations of [`Transport`]:
//! - [`ChannelNet`] / [`ChannelEndpoint`]: an in-process hub over crossbeam
//!   channels, for tests and single-process runs.
//! - [`TcpEndpoint`]: one TCP connection per peer pair, each starting with a
//!   `Hello` in both directions, framed as in [`codec`].
//!
//! Both report what happens to peers through the same [`Incoming`] stream,
//! so a driver's loop is one `select!` over [`Transport::incoming`] and its
//! own timers. Delivery is per-peer FIFO while a peer stays up; a lost peer
//! loses what was in flight (the handoff roles recover through aborts,
//! leases and generations, not through the transport).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod channel;
pub mod codec;
pub mod frame;
pub mod tcp;

pub use channel::{ChannelEndpoint, ChannelNet};
pub use codec::{
    encode_frame, DecodeError, DecodeErrorKind, EncodeError, FrameReader, ReadError, MAX_FRAME,
};
pub use frame::{Frame, HostReply, PeerRole};
pub use tcp::{
    AcceptPolicy, ConnectError, DuplicateRule, FrontendRule, Liveness, PeerHello, Refusal,
    Refusals, TcpEndpoint,
};

use handoff_core::{Generation, WorkerId};
use std::fmt;

/// The identity the frontend announces in its `Hello`: an id no worker
/// takes, so that workers and frontend agree on it without configuration.
pub const FRONTEND: WorkerId = WorkerId(u32::MAX);

/// What an endpoint hears.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// A frame from an identified peer (never `Hello`, `Bye` or `Ping`).
    Frame {
        /// The peer.
        from: WorkerId,
        /// The frame.
        frame: Frame,
    },
    /// A peer is reachable in `generation`. Seen again with a higher
    /// generation when the peer restarted: its older attempts are void
    /// (`Worker::handle_peer_generation`). After a `PeerLost` it may come
    /// again with the same generation (a reconnect). Frames the old
    /// incarnation had in flight may still follow a newer `PeerUp`; the
    /// generation stamped on each `HandoffMsg` tells them apart.
    PeerUp {
        /// The peer.
        peer: WorkerId,
        /// Its incarnation.
        generation: Generation,
    },
    /// A peer is gone: its connection closed, failed, sent garbage or (TCP)
    /// stayed silent for [`Liveness::silence_limit`]
    /// (`Worker::handle_peer_lost`).
    PeerLost {
        /// The peer.
        peer: WorkerId,
    },
    /// A connection misbehaved and was closed. For a connection that had not
    /// identified itself this is the only report; for an identified one a
    /// `PeerLost` follows. For logs.
    BadPeer {
        /// The remote address, and the worker if it had said hello.
        addr: String,
        /// What it did wrong.
        error: String,
    },
}

/// Why a frame was not sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SendError {
    /// No connection to that worker (never connected, or lost).
    UnknownPeer(WorkerId),
    /// This endpoint is closed (or was replaced by a newer incarnation).
    Closed,
    /// `Hello`, `Bye` and `Ping` belong to the transport.
    ControlFrame(&'static str),
    /// The frame cannot be encoded (too large for [`MAX_FRAME`]).
    Encode(EncodeError),
    /// Writing failed; the connection is closed and the peer will be
    /// reported [`Incoming::PeerLost`].
    Lost {
        /// The peer.
        peer: WorkerId,
        /// The i/o error.
        reason: String,
    },
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SendError::UnknownPeer(w) => write!(f, "no connection to {w}"),
            SendError::Closed => f.write_str("endpoint closed"),
            SendError::ControlFrame(name) => {
                write!(f, "{name} is sent by the transport itself")
            }
            SendError::Encode(e) => e.fmt(f),
            SendError::Lost { peer, reason } => write!(f, "connection to {peer} lost: {reason}"),
        }
    }
}

impl std::error::Error for SendError {}

/// One worker's (or the frontend's) attachment to the others.
///
/// Endpoints are `Sync` in both implementations, so one thread may block on
/// [`Transport::incoming`] while others send.
pub trait Transport: Send {
    /// Who this endpoint speaks as.
    fn me(&self) -> WorkerId;

    /// The incarnation it announces.
    fn generation(&self) -> Generation;

    /// Sends `frame` to `to`. Frames to one peer arrive in send order.
    fn send(&self, to: WorkerId, frame: Frame) -> Result<(), SendError>;

    /// Everything this endpoint hears, in arrival order. Unbounded: a reader
    /// never waits on a slow consumer, so a consumer that sends from the
    /// same thread it drains from cannot deadlock against it.
    fn incoming(&self) -> &crossbeam_channel::Receiver<Incoming>;

    /// Says goodbye to every peer and stops. Idempotent; dropping the
    /// endpoint does the same.
    fn close(&self);
}

/// A shared endpoint is an endpoint: a process that serves successive
/// sessions keeps one listener and hands it to each session's driver.
impl<T: Transport + Sync> Transport for &T {
    fn me(&self) -> WorkerId {
        (**self).me()
    }

    fn generation(&self) -> Generation {
        (**self).generation()
    }

    fn send(&self, to: WorkerId, frame: Frame) -> Result<(), SendError> {
        (**self).send(to, frame)
    }

    fn incoming(&self) -> &crossbeam_channel::Receiver<Incoming> {
        (**self).incoming()
    }

    fn close(&self) {
        (**self).close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shareable<T: Transport + Sync>() {}

    #[test]
    fn endpoints_can_be_shared_between_threads() {
        shareable::<ChannelEndpoint>();
        shareable::<TcpEndpoint>();
        let _: Box<dyn Transport> = Box::new(ChannelNet::new().endpoint(FRONTEND, Generation(0)));
    }
}
