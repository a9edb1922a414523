//! Closed-loop runs: the director is asked for arrivals after every unit
//! of work.

use crate::Engine;
use handoff_core::Instant;

/// Runs `engine` to the end asking its director for arrivals after every
/// unit of work, as closed loops need (a completion lets the next request
/// in at that instant); `each` sees the engine after every unit.
pub fn run_closed_loop<P: crate::HostPort, D: crate::Director>(
    engine: &mut Engine<P, D>,
    mut each: impl FnMut(&mut Engine<P, D>, Instant),
) {
    loop {
        let at = engine.now();
        let more = engine.run_event();
        engine.arrivals_changed();
        each(engine, at);
        if !more {
            // A completion in the last instant may have freed a slot or
            // scheduled a session's next turn: look once more.
            engine.arrivals_changed();
            if engine.run_event() {
                continue;
            }
            break;
        }
    }
}
