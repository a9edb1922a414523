//! Scenario 6: Duplicate, stale and late facts: idempotent cleanup, attempt-id
//! isolation, no resurrection of released handoffs.

use super::checks::{end, Checks};
use super::harness::{chunks, request, Flavour, Lab, View, D, P};
use handoff_core::host::HostInput;
use handoff_core::{
    DestinationState, HandoffId, HandoffMsg, RequestId, Role, RoleState, SourceEventKind as SE,
    SourceState as SS, WorkerId,
};
use handoff_engine::FaultPlan;
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Duplicate, stale and late facts. Every fact is duplicated (the second
/// copy late) while two handoffs run, one after the other; then every fact
/// ever sent is delivered again, after both attempts were released, while
/// a third handoff is in flight.
pub(super) fn duplicate_stale_late(f: Flavour) -> Value {
    let mut plan = FaultPlan::parse("seed 7; duplicate 1; delay 0.5 max 3ms").expect("valid plan");
    plan.seed = 7;
    let mut lab = Lab::with_faults(f, 1 << 16, plan);
    let released_once = |l: &Lab, r: u64| {
        let ends = |role: Role| {
            l.d()
                .seen
                .iter()
                .filter(|t| {
                    t.request == RequestId(r)
                        && t.role == role
                        && matches!(
                            t.to,
                            RoleState::Source(SS::Released)
                                | RoleState::Destination(DestinationState::Released)
                        )
                })
                .count()
        };
        (ends(Role::Source), ends(Role::Destination))
    };
    for r in [1, 2] {
        lab.arrive(request(r, 2048, 8, &chunks(4000 + 10 * r, 4)));
        lab.run_until(|e| e.d().finished.contains(&RequestId(r)) && e.host(P).is_drained());
    }
    lab.run_out();
    let stats = |l: &Lab| (l.host(P).worker().stats(), l.host(D).worker().stats());
    let (p0, d0) = stats(&lab);
    let duplicates = p0.duplicates + d0.duplicates;
    let drops_before = lab.d().dropped.len();
    // Replay every fact, late, while request 3 is mid-handoff.
    let old: Vec<(WorkerId, WorkerId, HandoffMsg)> = lab.d().sent.clone();
    let old_ids: BTreeSet<HandoffId> = old.iter().map(|(_, _, m)| m.id).collect();
    let transitions_before = lab.d().seen.len();
    lab.arrive(request(3, 2048, 8, &chunks(4100, 4)));
    lab.run_until(|e| e.d().saw_event(SE::PrefillPinned) && e.d().pinned.contains(&RequestId(3)));
    for (from, to, msg) in &old {
        lab.engine.inject(
            *to,
            HostInput::Message {
                from: *from,
                msg: *msg,
            },
        );
    }
    lab.run_until(|e| e.d().finished.contains(&RequestId(3)) && e.host(P).is_drained());
    lab.run_out();
    let stale_old = lab.d().dropped[drops_before..]
        .iter()
        .filter(|(id, stale)| *stale && old_ids.contains(id))
        .count();
    let resurrected = lab.d().seen[transitions_before..]
        .iter()
        .filter(|t| old_ids.contains(&t.id))
        .count();
    json!({
        "scenario": "duplicate-stale-late",
        "backend": f.name(),
        "duplicate_facts_ignored": duplicates,
        "late_facts_replayed": old.len(),
        "late_facts_dropped_as_stale": stale_old,
        "transitions_of_released_attempts_after_replay": resurrected,
        "roles_released": [released_once(&lab, 1), released_once(&lab, 2), released_once(&lab, 3)],
        "third_request_finished": lab.d().finished.contains(&RequestId(3)),
        "prefill_live_handoffs": lab.host(P).worker().live_handoffs(),
        "decode_live_handoffs": lab.host(D).worker().live_handoffs(),
        "end": lab.end(),
    })
}

/// The checks of scenario 6 on one backend's observations `o`.
pub(super) fn judge(o: &Value) -> Checks {
    let mut c = Checks::default();
    c.positive(
        "duplicated facts ignored as duplicates",
        &o["duplicate_facts_ignored"],
    );
    c.eq(
        "late facts of released attempts dropped as stale",
        o["late_facts_replayed"].clone(),
        o["late_facts_dropped_as_stale"].clone(),
    );
    c.eq(
        "transitions of released attempts after the replay (resurrection)",
        0,
        o["transitions_of_released_attempts_after_replay"].clone(),
    );
    c.eq(
        "each role of each attempt released exactly once",
        json!([[1, 1], [1, 1], [1, 1]]),
        o["roles_released"].clone(),
    );
    c.eq(
        "the attempt in flight during the replay finished (isolation)",
        true,
        o["third_request_finished"].clone(),
    );
    c.eq(
        "live handoffs at the end",
        json!([0, 0]),
        json!([o["prefill_live_handoffs"], o["decode_live_handoffs"]]),
    );
    end(&mut c, &o["end"]);
    c
}
