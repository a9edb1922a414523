//! Scenario 4: A reservation publishes no KV-index visibility before activation.

use super::checks::{end, Checks};
use super::harness::{chunks, request, Flavour, Lab, View, D};
use serde_json::{json, Value};

/// Overlap a router sees on decode for a request's prefix, before and after
/// activation. SGLang's decode keeps a radix cache here (the DEP's
/// locked-prefix mode): its default chunk cache publishes nothing at all.
pub(super) fn no_false_overlap(f: Flavour) -> Value {
    let mut lab = Lab::locked_prefix(f, 1 << 16);
    let r = request(1, 2048, 8, &chunks(800, 4));
    lab.watch(&r);
    lab.arrive(r.clone());
    let overlap = |l: &mut Lab| {
        l.engine
            .director_mut()
            .frontend
            .decode_router_mut()
            .map_or(0, |d| d.overlap_blocks(D, &r))
    };
    lab.run_until(|e| e.cap(D).reserved_destination_blocks > 0);
    let during = overlap(&mut lab);
    lab.run_until(|e| !e.d().activated.is_empty());
    let after = overlap(&mut lab);
    lab.run_out();
    json!({
        "scenario": "no-false-overlap",
        "backend": f.name(),
        "decode_overlap_blocks_while_reserved": during,
        "decode_stored_blocks_before_activation": lab.d().stored_before_activation,
        "decode_overlap_blocks_after_activation": after,
        "end": lab.end(),
    })
}

/// The checks of scenario 4 on one backend's observations `o`.
pub(super) fn judge(o: &Value) -> Checks {
    let mut c = Checks::default();
    c.eq(
        "router overlap on decode while reserved, blocks",
        0,
        o["decode_overlap_blocks_while_reserved"].clone(),
    );
    c.eq(
        "decode Stored events before activation, blocks",
        0,
        o["decode_stored_blocks_before_activation"].clone(),
    );
    c.positive(
        "router overlap on decode after activation, blocks",
        &o["decode_overlap_blocks_after_activation"],
    );
    end(&mut c, &o["end"]);
    c
}
