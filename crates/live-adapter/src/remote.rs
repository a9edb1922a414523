//! Virtual-clock live: the one engine with its hosts elsewhere.
//!
//! [`RemotePort`] is a [`HostPort`] whose hosts are worker nodes reached over
//! a [`Transport`] (threads over channels, or processes over TCP). The
//! coordinator (the frontend process) runs the engine; each operation the
//! engine asks of a host travels as a `Frame::Host`, and the node answers
//! with the outputs its [`WorkerHost`] released and its status. Facts between
//! workers, submissions and transfer completions all cross the coordinator
//! with their model timestamps, so the run is byte-identical to replay.
//!
//! [`serve_virtual`] is the node side: it owns the worker's host and applies
//! the operations it is sent, nothing else.

use handoff_core::{CoreBox, HostFinal, HostOutput, HostStatus, WorkerHost, WorkerId};
use handoff_engine::{apply_op, HostOp, HostPort};
use handoff_transport::{Frame, HostReply, Incoming, Transport};
use std::time::Duration as StdDuration;

/// Why a virtual-clock run could not go on.
#[derive(Clone, Debug, PartialEq)]
pub enum RemoteError {
    /// A worker's engine spec builds no core.
    Engine(WorkerId, handoff_deployment::EngineError),
    /// The deployment refuses a worker's core.
    Deployment(handoff_deployment::DeploymentError),
    /// The node of a worker went away mid-run.
    Lost(WorkerId),
    /// A node did not answer in time.
    Timeout(WorkerId),
    /// A frame could not be sent.
    Send(WorkerId, String),
    /// The coordinator's endpoint closed.
    Closed,
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RemoteError::Engine(w, e) => write!(f, "worker {w}: {e}"),
            RemoteError::Deployment(e) => e.fmt(f),
            RemoteError::Lost(w) => write!(f, "worker {w} was lost during a virtual-clock run"),
            RemoteError::Timeout(w) => write!(f, "worker {w} did not answer in time"),
            RemoteError::Send(w, e) => write!(f, "cannot send to worker {w}: {e}"),
            RemoteError::Closed => f.write_str("the coordinator's endpoint closed"),
        }
    }
}

impl std::error::Error for RemoteError {}

/// See the module docs.
pub struct RemotePort<T: Transport> {
    transport: T,
    workers: u32,
    timeout: StdDuration,
    error: Option<RemoteError>,
    calls: u64,
}

impl<T: Transport> RemotePort<T> {
    /// A port over `transport` to workers `0..workers`, each of which must
    /// answer an operation within `timeout`.
    pub fn new(transport: T, workers: u32, timeout: StdDuration) -> Self {
        RemotePort {
            transport,
            workers,
            timeout,
            error: None,
            calls: 0,
        }
    }

    /// The first error, if the run could not go on exactly.
    pub fn error(&self) -> Option<&RemoteError> {
        self.error.as_ref()
    }

    /// Operations sent.
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Says goodbye to every node.
    pub fn close(&self) {
        self.transport.close();
    }

    fn fail(&mut self, e: RemoteError) {
        if self.error.is_none() {
            self.error = Some(e);
        }
    }

    /// Waits for `w`'s next answer.
    fn answer(&mut self, w: WorkerId) -> Option<Frame> {
        loop {
            match self.transport.incoming().recv_timeout(self.timeout) {
                Ok(Incoming::Frame { from, frame }) if from == w => return Some(frame),
                Ok(Incoming::PeerLost { peer }) if peer == w => {
                    self.fail(RemoteError::Lost(w));
                    return None;
                }
                Ok(_) => {}
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                    self.fail(RemoteError::Timeout(w));
                    return None;
                }
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    self.fail(RemoteError::Closed);
                    return None;
                }
            }
        }
    }
}

/// What a host that cannot be reached looks like to the engine: nothing to
/// do, so the run winds down and reports the error.
const UNREACHABLE: HostStatus = HostStatus {
    deadline: None,
    wants_step: false,
    drained: true,
    step_end: None,
};

impl<T: Transport> HostPort for RemotePort<T> {
    fn hosts(&self) -> u32 {
        self.workers
    }

    fn call(&mut self, w: WorkerId, op: HostOp, out: &mut Vec<HostOutput>) -> HostStatus {
        if self.error.is_some() {
            return UNREACHABLE;
        }
        self.calls += 1;
        if let Err(e) = self.transport.send(w, Frame::Host(op)) {
            self.fail(RemoteError::Send(w, e.to_string()));
            return UNREACHABLE;
        }
        match self.answer(w) {
            Some(Frame::HostReply(r)) => {
                out.extend(r.outputs);
                r.status
            }
            Some(other) => {
                self.fail(RemoteError::Send(
                    w,
                    format!("answered {} to an operation", other.name()),
                ));
                UNREACHABLE
            }
            None => UNREACHABLE,
        }
    }

    fn finals(&mut self) -> Vec<HostFinal> {
        let mut out = Vec::new();
        for i in 0..self.workers {
            let w = WorkerId(i);
            if self.error.is_some() || self.transport.send(w, Frame::FinalQuery).is_err() {
                continue;
            }
            if let Some(Frame::Final(f)) = self.answer(w) {
                out.push(f);
            }
        }
        out
    }
}

/// Counters of one node's virtual-clock session.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServeStats {
    /// Operations applied.
    pub ops: u64,
}

/// Serves one coordinator session: applies each operation `coordinator`
/// sends to `host` and answers with the outputs and status, until the
/// coordinator goes away. `make_core` builds the fresh core of a restart.
pub fn serve_virtual<T: Transport>(
    host: &mut WorkerHost<CoreBox>,
    make_core: &mut dyn FnMut(WorkerId) -> CoreBox,
    transport: &T,
    coordinator: WorkerId,
) -> ServeStats {
    let mut stats = ServeStats::default();
    let mut outs = Vec::new();
    while let Ok(inc) = transport.incoming().recv() {
        match inc {
            Incoming::Frame { from, frame } if from == coordinator => match frame {
                Frame::Host(op) => {
                    stats.ops += 1;
                    apply_op(host, op, &mut outs, make_core);
                    let reply = HostReply {
                        outputs: std::mem::take(&mut outs),
                        status: host.status(),
                    };
                    if transport
                        .send(coordinator, Frame::HostReply(reply))
                        .is_err()
                    {
                        break;
                    }
                }
                Frame::FinalQuery
                    if transport
                        .send(coordinator, Frame::Final(host.final_state()))
                        .is_err() =>
                {
                    break;
                }
                _ => {}
            },
            Incoming::PeerLost { peer } if peer == coordinator => break,
            _ => {}
        }
    }
    stats
}
