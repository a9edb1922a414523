//! The DEP's scenarios by name.

/// The DEP's test scenarios, in its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Scenario 1: vLLM stranded source (and SGLang's gate in the same situation).
    StrandedSource,
    /// Scenario 2: SGLang destination gate: zero, partial and full prefix hits.
    DestinationGate,
    /// Scenario 3: Router booking vs physical reservation along one handoff.
    RouterParity,
    /// Scenario 4: A reservation publishes no KV-index visibility before activation.
    NoFalseOverlap,
    /// Scenario 5: Cancel, lose the channel or restart an owner at every phase.
    FailureMatrix,
    /// Scenario 6: Duplicate, stale and late facts: idempotent cleanup, attempt-id
    /// isolation, no resurrection of released handoffs.
    DuplicateStaleLate,
    /// Scenario 7: The same trace on replay and on virtual- and wall-clock live
    /// (on the live adapter).
    LiveReplayParity,
    /// Scenario 8: Every supported disaggregated router mode.
    RouterModes,
}

impl Scenario {
    /// Every scenario, in the DEP's order.
    pub const ALL: [Scenario; 8] = [
        Scenario::StrandedSource,
        Scenario::DestinationGate,
        Scenario::RouterParity,
        Scenario::NoFalseOverlap,
        Scenario::FailureMatrix,
        Scenario::DuplicateStaleLate,
        Scenario::LiveReplayParity,
        Scenario::RouterModes,
    ];

    /// Stable name (the command line's).
    pub fn name(self) -> &'static str {
        match self {
            Scenario::StrandedSource => "stranded-source",
            Scenario::DestinationGate => "destination-gate",
            Scenario::RouterParity => "router-parity",
            Scenario::NoFalseOverlap => "no-false-overlap",
            Scenario::FailureMatrix => "failure-matrix",
            Scenario::DuplicateStaleLate => "duplicate-stale-late",
            Scenario::LiveReplayParity => "live-replay-parity",
            Scenario::RouterModes => "router-modes",
        }
    }
}
