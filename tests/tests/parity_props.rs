//! Replay == virtual-clock live, byte for byte (transcript, final worker
//! states, report), on generated runs: both backends, one to three workers
//! per pool, idle to overloaded traces with shared prefixes and long
//! prompts, decode pools small enough that reservations fail and leases
//! expire, and a third of the runs under a generated fault plan (kills,
//! restarts, partitions, lossy facts, failed transfers, cancels).
//!
//! `PARITY_CASES` sets the number of runs (200 by default).

use handoff_tests::{gen, parity::compare};

#[test]
fn replay_equals_virtual_live_on_generated_runs() {
    let cases: u64 = std::env::var("PARITY_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    let mut handoffs = 0;
    let mut faulted = 0;
    // How many runs reached each hard lifecycle path.
    let mut reached = [0u64; 4];
    let paths = [
        "LeaseExpired",
        "ReservationExpired",
        "Unavailable",
        "Cancelled",
    ];
    for seed in 0..cases {
        let run = gen::run(seed);
        if !run.cfg.faults.is_empty() {
            faulted += 1;
        }
        let (d, t) = compare(&run.cfg, &run.specs, run.items.clone());
        handoffs += t.handoffs();
        let text = t.render();
        for (k, p) in paths.iter().enumerate() {
            if text.contains(p) {
                reached[k] += 1;
            }
        }
        if let Some(d) = d {
            panic!(
                "seed {seed}: virtual live differs from replay: {d}\nconfig: {:?}\nfaults:\n{}",
                run.cfg, run.cfg.faults
            );
        }
    }
    assert!(
        handoffs > cases as usize,
        "generated runs exercised handoffs"
    );
    assert!(faulted > 0, "some generated runs had faults");
    if cases >= 200 {
        for (k, p) in paths.iter().enumerate() {
            assert!(reached[k] > 0, "no generated run reached {p}: {reached:?}");
        }
    }
    eprintln!(
        "runs {cases}, faulted {faulted}, handoffs {handoffs}, reached {paths:?} = {reached:?}"
    );
}
