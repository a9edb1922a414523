//! Replay's `--kv-events-out` path: every stored block's `tokens_hash` is
//! Dynamo's hash of the block's stand-in token ids, those of the trace
//! prompt position it holds ([`TraceBlocks`] found it by block hash), or a
//! generated block's own.

use handoff_core::{Backend, KvEventData};
use handoff_deployment::{make_core, DeploymentConfig, EngineSpec};
use handoff_kv_events::dynamo_hash::{generated_tokens, prompt_tokens, tokens_hash};
use handoff_kv_events::TraceBlocks;
use handoff_replay::Replay;
use handoff_workload::{ReaderOptions, TraceItem, TraceReader};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

fn trace(n: usize) -> Vec<TraceItem> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/data/conversation_2000.jsonl"
    );
    let file = std::fs::File::open(path).expect("the committed trace");
    TraceReader::new(std::io::BufReader::new(file), ReaderOptions::new(path))
        .take(n)
        .map(|r| r.expect("the committed trace parses"))
        .collect()
}

#[test]
fn stored_blocks_carry_dynamos_hash_of_their_stand_in_tokens() {
    for (backend, bs) in [(Backend::Vllm, 16u32), (Backend::Sglang, 1)] {
        let items = trace(300);
        let spec = EngineSpec {
            backend,
            block_size: bs,
            ..EngineSpec::default()
        };
        let ebs = spec.event_block_tokens();
        // What each prompt block's tokens_hash must be, by engine hash.
        let mut want: HashMap<u64, u64> = HashMap::new();
        let mut hashes = Vec::new();
        for it in &items {
            it.request.block_hashes(ebs, &mut hashes);
            for (i, h) in hashes.iter().enumerate() {
                let from = i as u64 * u64::from(ebs);
                let t = prompt_tokens(&it.request, from, from + u64::from(ebs));
                want.insert(*h, tokens_hash(&t));
            }
        }
        let cfg = DeploymentConfig {
            backend,
            policy: backend.native_policy(),
            block_size: ebs,
            handoff: handoff_core::HandoffConfig::for_backend(backend),
            ..DeploymentConfig::default()
        };
        let index = Rc::new(RefCell::new(TraceBlocks::new(vec![ebs])));
        let reg = index.clone();
        let seen: Rc<RefCell<(u64, u64)>> = Rc::default();
        let s = seen.clone();
        let idx = index.clone();
        let items = items
            .into_iter()
            .inspect(move |it| reg.borrow_mut().register(&it.request));
        let _ = Replay::new(cfg, items, |_, _| make_core(&spec).unwrap())
            .expect("the cores publish at the deployment's block size")
            .with_kv_sink(Box::new(move |_, ev, _| {
                if let KvEventData::Stored { block_hashes, .. } = &ev.data {
                    for h in block_hashes {
                        let got = idx.borrow().tokens_hash(*h, ebs);
                        let mut s = s.borrow_mut();
                        match want.get(h) {
                            Some(w) => {
                                assert_eq!(got, *w, "{backend:?} prompt block {h}");
                                s.0 += 1;
                            }
                            None => {
                                assert_eq!(got, tokens_hash(&generated_tokens(*h, ebs)));
                                s.1 += 1;
                            }
                        }
                    }
                }
            }))
            .run();
        let (prompt, generated) = *seen.borrow();
        assert!(prompt > 1000, "{backend:?}: {prompt} prompt blocks stored");
        if backend == Backend::Vllm {
            assert!(generated > 0, "vLLM caches generated blocks");
        }
    }
}
