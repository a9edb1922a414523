//! Serve's two KV channels name every block the same way: each worker's
//! vLLM ZMQ stream (read back through its replay socket by a DEALER, as
//! Dynamo's listener does) and its Dynamo `RouterEvent` JSONL carry the
//! same events with the same block and parent hashes, and each JSONL
//! `tokens_hash` is Dynamo's hash of the token ids the ZMQ event carries;
//! generated blocks carry their stand-in ids.

mod common;

use common::Shared;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_kv_events::dynamo_hash::{generated_tokens, tokens_hash};
use handoff_kv_events::RouterEventWriter;
use handoff_serve::ServeConfig;
use rmpv::Value;

/// One stored event as either channel shows it: block hashes, parent and,
/// per block, the token ids (ZMQ) or `tokens_hash` (JSONL).
#[derive(Debug, PartialEq)]
enum Ev {
    Stored(Vec<u64>, Option<u64>, Vec<u64>),
    Removed(Vec<u64>),
    Cleared,
}

use Ev::{Cleared, Removed, Stored};

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|x| x.as_u64().expect("u64"))
        .collect()
}

/// Every batch worker `w` published, through its replay socket; stored
/// events' per-block field is Dynamo's hash of the block's token ids.
async fn zmq_events(replay: &str, block_size: usize, generated: &mut usize) -> Vec<Ev> {
    let mut out = Vec::new();
    for batch in common::replay_batches(replay).await {
        for e in batch.as_array().expect("batch")[1]
            .as_array()
            .expect("events")
        {
            let e = e.as_array().expect("tagged");
            out.push(match e[0].as_str() {
                Some("BlockStored") => {
                    let hashes = u64s(&e[1]);
                    let ids: Vec<u32> = u64s(&e[3]).into_iter().map(|t| t as u32).collect();
                    let per_block: Vec<u64> = ids
                        .chunks_exact(block_size)
                        .zip(&hashes)
                        .map(|(t, h)| {
                            if *t == generated_tokens(*h, block_size as u32)[..] {
                                *generated += 1;
                            }
                            tokens_hash(t)
                        })
                        .collect();
                    assert_eq!(per_block.len(), hashes.len(), "token ids per block");
                    Stored(hashes, e[2].as_u64(), per_block)
                }
                Some("BlockRemoved") => Removed(u64s(&e[1])),
                _ => Cleared,
            });
        }
    }
    out
}

fn jsonl_events(text: &str, worker: u64) -> Vec<Ev> {
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json"))
        .filter(|v| v["worker_id"] == worker)
        .map(|v| {
            let d = &v["event"]["data"];
            if let Some(s) = d.get("stored") {
                let blocks = s["blocks"].as_array().expect("blocks");
                let f = |k: &str| blocks.iter().map(|b| b[k].as_u64().expect("u64")).collect();
                Stored(f("block_hash"), s["parent_hash"].as_u64(), f("tokens_hash"))
            } else if let Some(r) = d.get("removed") {
                Removed(
                    r["block_hashes"]
                        .as_array()
                        .expect("hashes")
                        .iter()
                        .map(|h| h.as_u64().expect("u64"))
                        .collect(),
                )
            } else {
                Cleared
            }
        })
        .collect()
}

#[test]
fn zmq_and_jsonl_carry_one_identity_and_dynamos_tokens_hash() {
    let spec = EngineSpec::default();
    let block_size = spec.block_size as usize;
    let jsonl = Shared::default();
    let (l, server, ep) = common::start_with_kv(2, |ep| ServeConfig {
        kv: Some(ep),
        kv_jsonl: Some(RouterEventWriter::new(Box::new(jsonl.clone()))),
        ..common::loopback_pd(DeploymentConfig::default(), spec.clone())
    });
    let addr = l.http;
    for i in 0..6 {
        let body = format!(
            r#"{{"model":"m","prompt":"A shared system prompt about storage racks, cables, fans and disks, long enough for several blocks. Question {i}?","max_tokens":40,"ignore_eos":true}}"#
        );
        let (status, _) = common::call(addr, "POST", "/v1/completions", &body);
        assert_eq!(status, 200);
    }
    common::wait_drained(addr);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut generated = 0;
    let zmq: Vec<Vec<Ev>> = ep
        .replay
        .iter()
        .map(|r| rt.block_on(zmq_events(r, block_size, &mut generated)))
        .collect();
    let _ = server.stop();
    let text = jsonl.text();
    for (w, z) in zmq.iter().enumerate() {
        let j = jsonl_events(&text, w as u64);
        assert!(!j.is_empty(), "worker {w} published");
        assert_eq!(z, &j, "worker {w}: the two channels differ");
    }
    assert!(generated > 0, "generated blocks carry their stand-in ids");
}
