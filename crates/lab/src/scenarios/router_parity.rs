//! Scenario 3: Router booking vs physical reservation along one handoff.

use super::checks::{end, Checks};
use super::harness::{chunks, request, Flavour, Lab, View, D};
use serde_json::{json, Value};

/// Router booking vs physical occupancy along one handoff.
pub(super) fn router_parity(f: Flavour) -> Value {
    let mut lab = Lab::new(f, 1 << 16);
    let r = request(1, 2048, 8, &chunks(700, 4));
    lab.arrive(r);
    let mut points = Vec::new();
    let sample = |l: &Lab, at: &str| {
        let dl = l.d().frontend.decode_router().and_then(|d| d.load(D));
        let c = l.cap(D);
        json!({
            "point": at,
            "decode_router_booked_blocks": dl.map_or(0, |x| x.booked_blocks),
            "decode_reserved_blocks": c.reserved_destination_blocks,
            "decode_active_blocks": c.active_blocks,
            "decode_kv_used_blocks": c.kv_used_blocks(),
        })
    };
    // Stop in the instant the frontend routed the decode side; the decode
    // worker gets the request a hop later.
    lab.run_until(|e| e.d().at_routing.is_some());
    let (booked, reserved) = lab.d().at_routing.unwrap_or_default();
    points.push(json!({
        "point": "routed",
        "decode_router_booked_blocks": booked,
        "decode_reserved_blocks": reserved,
    }));
    // The transfer takes TRANSFER, so the reservation is seen before it
    // becomes active.
    lab.run_until(|e| e.cap(D).reserved_destination_blocks > 0);
    points.push(sample(&lab, "reserved"));
    lab.run_until(|e| !e.d().activated.is_empty());
    points.push(sample(&lab, "activated"));
    lab.run_out();
    points.push(sample(&lab, "completed"));
    json!({ "scenario": "router-parity", "backend": f.name(), "points": points, "end": lab.end() })
}

/// The checks of scenario 3 on one backend's observations `o`.
pub(super) fn judge(o: &Value) -> Checks {
    let mut c = Checks::default();
    let p = &o["points"];
    c.positive(
        "routed: decode router booked, blocks",
        &p[0]["decode_router_booked_blocks"],
    );
    c.eq(
        "routed: nothing reserved yet, blocks",
        0,
        p[0]["decode_reserved_blocks"].clone(),
    );
    c.positive(
        "reserved: physical reservation, blocks",
        &p[1]["decode_reserved_blocks"],
    );
    c.eq(
        "reserved: booking unchanged since routing",
        p[0]["decode_router_booked_blocks"].clone(),
        p[1]["decode_router_booked_blocks"].clone(),
    );
    c.eq(
        "activated: reservation moved to active, reserved blocks",
        0,
        p[2]["decode_reserved_blocks"].clone(),
    );
    c.positive("activated: active blocks", &p[2]["decode_active_blocks"]);
    c.eq(
        "activated: counted once (used == active)",
        p[2]["decode_active_blocks"].clone(),
        p[2]["decode_kv_used_blocks"].clone(),
    );
    c.eq(
        "completed: booking released, blocks",
        0,
        p[3]["decode_router_booked_blocks"].clone(),
    );
    c.eq(
        "completed: KV released, blocks",
        0,
        p[3]["decode_kv_used_blocks"].clone(),
    );
    end(&mut c, &o["end"]);
    c
}
