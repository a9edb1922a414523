use kvc::*;
use workload::{generate_sessions, SessionConfig};
fn main() {
    let mut cfg = Variant::E4.configure(&KvcConfig::default());
    cfg.decode_kv_tokens = 448000;
    cfg.prefill_kv_tokens = 448000;
    cfg.sync.max_sessions = 64;
    cfg.sync.store_kv_tokens = 64 * 64000;
    cfg.log = true;
    let items = generate_sessions(&SessionConfig::default());
    let out = simulate(cfg, &items, "E4").unwrap();
    for l in &out.log {
        println!("{l}");
    }
}
