//! Scenario 2: SGLang destination gate: zero, partial and full prefix hits.

use super::checks::{end, Checks};
use super::harness::{chunks, request, Flavour, Lab, View, P};
use serde_json::{json, Value};

/// Zero, partial and full destination-prefix hits after decode learned a
/// prefix; SGLang's decode keeps a radix cache here (the DEP's locked-prefix
/// mode), as its default chunk cache never hits.
pub(super) fn gate(f: Flavour) -> Value {
    let mut lab = Lab::locked_prefix(f, 1 << 16);
    let mut hits = Vec::new();
    let prefix = chunks(500, 4);
    let cases = [
        ("zero", request(1, 2048, 4, &prefix)),
        (
            "partial",
            request(2, 3072, 4, &[prefix.clone(), chunks(600, 2)].concat()),
        ),
        ("full", request(3, 2048, 4, &prefix)),
    ];
    for (name, r) in cases {
        let id = r.id;
        lab.arrive(r);
        lab.run_until(|e| e.d().finished.contains(&id) && e.host(P).is_drained());
        if let Some((_, s)) = lab.d().summaries.iter().rev().find(|(q, _)| *q == id) {
            hits.push(json!({
                "hit": name,
                "matched_prefix_tokens": s.matched_prefix_tokens,
                "physical_blocks": s.physical_blocks,
                "transfer_tokens": s.transfer_tokens,
                "request_slot": s.request_slot,
                "decode_headroom_tokens": s.decode_headroom_tokens,
            }));
        }
    }
    lab.run_out();
    json!({ "scenario": "destination-gate", "backend": f.name(), "reservations": hits, "end": lab.end() })
}

/// The checks of scenario 2 on one backend's observations `o`.
pub(super) fn judge(o: &Value) -> Checks {
    let mut c = Checks::default();
    let b = o["backend"].as_str().unwrap_or_default();
    let r = &o["reservations"];
    c.eq(
        "reservations observed (zero, partial, full hit)",
        3,
        r.as_array().map_or(0, Vec::len),
    );
    c.eq(
        "zero hit: matched prefix tokens",
        0,
        r[0]["matched_prefix_tokens"].clone(),
    );
    c.positive(
        "partial hit: matched prefix tokens",
        &r[1]["matched_prefix_tokens"],
    );
    c.below(
        "partial hit: physical blocks fewer than a zero hit's",
        &r[1]["physical_blocks"],
        r[0]["physical_blocks"].as_f64().unwrap_or(0.0),
    );
    c.below(
        "full hit: transfer tokens fewer than a partial hit's",
        &r[2]["transfer_tokens"],
        r[1]["transfer_tokens"].as_f64().unwrap_or(0.0),
    );
    if b == "sglang" {
        c.eq(
            "full hit: delta pages reserved",
            0,
            r[2]["physical_blocks"].clone(),
        );
        for (i, hit) in ["zero", "partial", "full"].iter().enumerate() {
            c.eq(
                format!("{hit} hit: request slot reserved"),
                true,
                r[i]["request_slot"].clone(),
            );
            c.positive(
                format!("{hit} hit: decode headroom reserved, tokens"),
                &r[i]["decode_headroom_tokens"],
            );
        }
    }
    end(&mut c, &o["end"]);
    c
}
