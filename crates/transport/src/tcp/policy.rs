//! Who may connect to an endpoint: a typed decision on each `Hello`, by
//! the id, role and generation it claims, where it comes from, and what the
//! endpoint already holds.
//!
//! vLLM's side channel plays the same part: the prefill's
//! `_nixl_handshake_listener` answers a decode's handshake with its agent
//! metadata, and the decode's `NixlConnectorWorker._nixl_handshake` checks
//! the remote metadata (engine id, block layout) before it adds the remote
//! agent (`vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`).
//! Here a hello is a claim, not a proof: the policy refuses the claims an
//! engine can tell are false (its own ids, a second frontend, a role it
//! never talks to, an id that is already connected) and bounds what a
//! flood of plausible claims can cost.

use crate::frame::PeerRole;
use crate::FRONTEND;
use handoff_core::{Generation, WorkerId};
use std::fmt;
use std::net::IpAddr;

/// Identified connections an endpoint holds at most by default (each
/// costs a reading and a pinging thread).
pub const MAX_CONNECTIONS: usize = 256;

/// Connections still saying hello an endpoint holds at most by default
/// (each costs a thread for at most the handshake deadline).
pub const MAX_HANDSHAKES: usize = 32;

/// Who may claim the frontend's id ([`FRONTEND`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontendRule {
    /// Anyone (a `live` worker process serves frontend after frontend).
    Anyone,
    /// The first connection that claims it, from a loopback address, and
    /// no one after it: an engine process's own driver dials its ranks
    /// right after binding them.
    OnceFromLoopback,
}

/// What a hello claiming an id that is already connected gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DuplicateRule {
    /// A newer generation replaces the connected one, the same generation
    /// is kept as one more connection, an older one is refused (`live`:
    /// workers dial each other, a restarted worker comes back at once).
    NewerReplaces,
    /// Refused whatever its generation: a restarted peer reconnects once
    /// its old connection was seen lost (its process died, or it stayed
    /// silent past the silence limit). A connection this endpoint dials
    /// to a peer already connected in the same generation is not kept:
    /// the existing one serves.
    Refuse,
}

/// Who may connect; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcceptPolicy {
    /// Ids no peer may claim besides the endpoint's own (its engine's
    /// other ranks).
    pub reserved: Vec<WorkerId>,
    /// Who may claim the frontend's id.
    pub frontend: FrontendRule,
    /// The roles a connection this endpoint did not dial may announce
    /// (the frontend's is governed by `frontend`); `None`: any.
    pub inbound_roles: Option<Vec<PeerRole>>,
    /// A claim of an id that is already connected.
    pub duplicate: DuplicateRule,
    /// Identified connections held at most.
    pub max_connections: usize,
    /// Connections still in their handshake held at most; more are closed
    /// as soon as they are accepted.
    pub max_handshakes: usize,
}

impl Default for AcceptPolicy {
    /// `live`'s: anyone but the endpoint itself, a newer incarnation
    /// replaces the older; bounded.
    fn default() -> Self {
        AcceptPolicy {
            reserved: Vec::new(),
            frontend: FrontendRule::Anyone,
            inbound_roles: None,
            duplicate: DuplicateRule::NewerReplaces,
            max_connections: MAX_CONNECTIONS,
            max_handshakes: MAX_HANDSHAKES,
        }
    }
}

/// Which side opened a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// This endpoint's listener accepted it.
    Accepted,
    /// This endpoint dialled it.
    Dialled,
}

/// What the endpoint holds of the claimed peer, and in all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// The claimed id's connected generation, if it is connected.
    pub connected: Option<Generation>,
    /// Whether the frontend's id was ever accepted.
    pub frontend_seen: bool,
    /// Identified connections held.
    pub connections: usize,
}

/// A hello's claim, where it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The id it claims.
    pub worker: WorkerId,
    /// Its generation.
    pub generation: Generation,
    /// Its role.
    pub role: PeerRole,
    /// Who opened the connection.
    pub direction: Direction,
    /// The remote address.
    pub ip: IpAddr,
}

/// An accepted claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// A peer not connected before.
    New,
    /// One more connection of the connected incarnation.
    Another,
    /// A newer incarnation: the connected one's connections are closed.
    Replace,
    /// This endpoint dialled a peer it is already connected to in this
    /// generation: the new socket is closed, the existing link serves.
    AlreadyLinked,
}

/// Why a hello was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It claims the endpoint's own id.
    Itself(WorkerId),
    /// It claims one of the engine's other ranks.
    Reserved(WorkerId),
    /// It claims the frontend's id, which is taken or not open to it.
    Frontend {
        /// Whether the frontend had already connected.
        seen: bool,
        /// Whether the connection came from a loopback address.
        loopback: bool,
    },
    /// It announces a role this endpoint takes no connection from.
    Role(PeerRole),
    /// Its id is connected already ([`DuplicateRule::Refuse`]).
    Connected {
        /// The id.
        peer: WorkerId,
        /// The connected generation.
        connected: Generation,
        /// The claimed one.
        claimed: Generation,
    },
    /// An older incarnation than the connected one.
    Stale {
        /// The id.
        peer: WorkerId,
        /// The connected generation.
        connected: Generation,
        /// The claimed one.
        claimed: Generation,
    },
    /// The endpoint holds its maximum of connections.
    Full {
        /// The maximum.
        limit: usize,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Itself(w) => write!(f, "peer says it is {w}, which is this endpoint"),
            Refusal::Reserved(w) => write!(f, "peer says it is {w}, a rank of this engine"),
            Refusal::Frontend { seen, loopback } => write!(
                f,
                "peer says it is the frontend ({})",
                match (seen, loopback) {
                    (true, _) => "this endpoint's frontend is connected already",
                    (false, false) => "only from a loopback address",
                    (false, true) => "this endpoint takes no frontend",
                }
            ),
            Refusal::Role(r) => write!(f, "peer serves as {r}: no such peer connects here"),
            Refusal::Connected {
                peer,
                connected,
                claimed,
            } => write!(
                f,
                "{peer} (generation {}) is connected already in generation {}",
                claimed.0, connected.0
            ),
            Refusal::Stale {
                peer,
                connected,
                claimed,
            } => write!(
                f,
                "{peer} generation {} is older than the connected {}",
                claimed.0, connected.0
            ),
            Refusal::Full { limit } => write!(f, "this endpoint holds {limit} connections"),
        }
    }
}

impl AcceptPolicy {
    /// An engine rank's policy: none of `reserved` (its engine's other
    /// ranks), its own driver once from loopback, only peers of
    /// `inbound_roles` dialling in, one connection per peer.
    pub fn engine(reserved: Vec<WorkerId>, inbound_roles: Vec<PeerRole>) -> Self {
        AcceptPolicy {
            reserved,
            frontend: FrontendRule::OnceFromLoopback,
            inbound_roles: Some(inbound_roles),
            duplicate: DuplicateRule::Refuse,
            ..AcceptPolicy::default()
        }
    }

    /// Decides `claim` by endpoint `me` holding `held`.
    pub fn decide(&self, me: WorkerId, claim: &Claim, held: &Held) -> Result<Admit, Refusal> {
        let peer = claim.worker;
        if peer == me {
            return Err(Refusal::Itself(peer));
        }
        if self.reserved.contains(&peer) {
            return Err(Refusal::Reserved(peer));
        }
        let accepted = claim.direction == Direction::Accepted;
        if peer == FRONTEND && accepted {
            let loopback = claim.ip.is_loopback()
                || matches!(claim.ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()));
            match self.frontend {
                FrontendRule::Anyone => {}
                FrontendRule::OnceFromLoopback if loopback && !held.frontend_seen => {}
                FrontendRule::OnceFromLoopback => {
                    return Err(Refusal::Frontend {
                        seen: held.frontend_seen,
                        loopback,
                    })
                }
            }
        } else if accepted {
            if let Some(roles) = &self.inbound_roles {
                if !roles.contains(&claim.role) {
                    return Err(Refusal::Role(claim.role));
                }
            }
        }
        let admit = match (held.connected, self.duplicate) {
            (None, _) => Admit::New,
            (Some(g), DuplicateRule::Refuse)
                if g == claim.generation && claim.direction == Direction::Dialled =>
            {
                return Ok(Admit::AlreadyLinked)
            }
            (Some(connected), DuplicateRule::Refuse) => {
                return Err(Refusal::Connected {
                    peer,
                    connected,
                    claimed: claim.generation,
                })
            }
            (Some(g), DuplicateRule::NewerReplaces) if claim.generation > g => Admit::Replace,
            (Some(g), DuplicateRule::NewerReplaces) if claim.generation == g => Admit::Another,
            (Some(connected), DuplicateRule::NewerReplaces) => {
                return Err(Refusal::Stale {
                    peer,
                    connected,
                    claimed: claim.generation,
                })
            }
        };
        if admit != Admit::Replace && held.connections >= self.max_connections {
            return Err(Refusal::Full {
                limit: self.max_connections,
            });
        }
        Ok(admit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    const ME: WorkerId = WorkerId(64);

    fn claim(w: u32, g: u32, role: PeerRole, direction: Direction, ip: [u8; 4]) -> Claim {
        Claim {
            worker: WorkerId(w),
            generation: Generation(g),
            role,
            direction,
            ip: IpAddr::V4(Ipv4Addr::from(ip)),
        }
    }

    fn held(connected: Option<u32>, frontend_seen: bool, connections: usize) -> Held {
        Held {
            connected: connected.map(Generation),
            frontend_seen,
            connections,
        }
    }

    fn prefill_rank() -> AcceptPolicy {
        AcceptPolicy::engine(vec![ME, WorkerId(65)], vec![PeerRole::Decode])
    }

    #[test]
    fn an_engine_rank_refuses_every_false_claim_it_can_tell() {
        let p = prefill_rank();
        let lo = [127, 0, 0, 1];
        let none = held(None, false, 0);
        let acc = Direction::Accepted;
        let d = |w, g| claim(w, g, PeerRole::Decode, acc, lo);
        assert_eq!(p.decide(ME, &d(7, 1), &none), Ok(Admit::New));
        assert_eq!(
            p.decide(ME, &d(64, 1), &none),
            Err(Refusal::Itself(ME)),
            "its own id"
        );
        assert_eq!(
            p.decide(ME, &d(65, 1), &none),
            Err(Refusal::Reserved(WorkerId(65))),
            "a sibling rank"
        );
        let max = u32::MAX;
        let f = |ip| claim(max, max, PeerRole::Frontend, acc, ip);
        assert_eq!(p.decide(ME, &f(lo), &none), Ok(Admit::New));
        assert_eq!(
            p.decide(ME, &f(lo), &held(None, true, 1)),
            Err(Refusal::Frontend {
                seen: true,
                loopback: true
            }),
            "a second frontend, even after the first was lost"
        );
        assert_eq!(
            p.decide(ME, &f([10, 0, 0, 2]), &none),
            Err(Refusal::Frontend {
                seen: false,
                loopback: false
            })
        );
        for role in [PeerRole::Prefill, PeerRole::Aggregated, PeerRole::Any] {
            let c = claim(7, 1, role, acc, lo);
            assert_eq!(p.decide(ME, &c, &none), Err(Refusal::Role(role)));
            let dialled = Claim {
                direction: Direction::Dialled,
                ..c
            };
            assert_eq!(p.decide(ME, &dialled, &none), Ok(Admit::New));
        }
    }

    #[test]
    fn a_connected_id_is_not_replaced_and_the_count_is_bounded() {
        let p = prefill_rank();
        let lo = [127, 0, 0, 1];
        let d = |g, dir| claim(7, g, PeerRole::Decode, dir, lo);
        for g in [1, 2, u32::MAX] {
            assert_eq!(
                p.decide(ME, &d(g, Direction::Accepted), &held(Some(1), true, 1)),
                Err(Refusal::Connected {
                    peer: WorkerId(7),
                    connected: Generation(1),
                    claimed: Generation(g)
                })
            );
        }
        assert_eq!(
            p.decide(ME, &d(1, Direction::Dialled), &held(Some(1), true, 1)),
            Ok(Admit::AlreadyLinked)
        );
        let full = held(None, true, MAX_CONNECTIONS);
        assert_eq!(
            p.decide(ME, &d(1, Direction::Accepted), &full),
            Err(Refusal::Full {
                limit: MAX_CONNECTIONS
            })
        );
        let open = AcceptPolicy::default();
        let any = |g| claim(7, g, PeerRole::Any, Direction::Accepted, [10, 1, 1, 1]);
        let one = held(Some(5), false, 1);
        assert_eq!(open.decide(ME, &any(6), &one), Ok(Admit::Replace));
        assert_eq!(open.decide(ME, &any(5), &one), Ok(Admit::Another));
        assert!(matches!(
            open.decide(ME, &any(4), &one),
            Err(Refusal::Stale { .. })
        ));
        let f = claim(
            u32::MAX,
            0,
            PeerRole::Frontend,
            Direction::Accepted,
            [10, 1, 1, 1],
        );
        assert_eq!(
            open.decide(ME, &f, &held(None, true, 1)),
            Ok(Admit::New),
            "live's frontend: anyone"
        );
    }
}
