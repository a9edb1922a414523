//! `--tokenizer` with `--block-hash vllm`: a prompt tokenised by a Hugging
//! Face `tokenizer.json` (a WordLevel model written by this test) is
//! published under vLLM's `sha256_cbor` chain, which this test recomputes
//! on its own: its own word-to-id table, CBOR bytes written by hand from
//! RFC 8949, SHA-256, the last eight digest bytes big-endian
//! (`vllm/v1/core/kv_cache_utils.py`: `hash_block_tokens`,
//! `init_none_hash`, `maybe_convert_block_hash`).

mod common;

use common::Shared;
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_kv_events::vllm_hash::{BlockHashMode, VllmHasher};
use handoff_kv_events::RouterEventWriter;
use handoff_serve::ServeConfig;
use handoff_serve::Tokenizer;
use sha2::{Digest, Sha256};

const WORDS: usize = 300;

/// A WordLevel `tokenizer.json`: word `wN` is id `N + 1`, split on
/// whitespace, `[UNK]` id 0.
fn tokenizer_json() -> String {
    let vocab: Vec<String> = (0..WORDS).map(|i| format!("\"w{i}\": {}", i + 1)).collect();
    format!(
        r#"{{"version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false,
    "rstrip": false, "normalized": false, "special": true}}],
  "normalizer": null, "pre_tokenizer": {{"type": "WhitespaceSplit"}},
  "post_processor": null, "decoder": null,
  "model": {{"type": "WordLevel", "vocab": {{"[UNK]": 0, {}}}, "unk_token": "[UNK]"}}}}"#,
        vocab.join(", ")
    )
}

/// A CBOR head: major type `major`, argument `n`, shortest form.
fn head(out: &mut Vec<u8>, major: u8, n: u64) {
    let m = major << 5;
    match n {
        0..=23 => out.push(m | n as u8),
        24..=0xff => out.extend_from_slice(&[m | 24, n as u8]),
        0x100..=0xffff => {
            out.push(m | 25);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(m | 26);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        _ => {
            out.push(m | 27);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

fn sha(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// vLLM's chain for `ids`, recomputed from scratch with seed "0", as the
/// wire's 64-bit ints.
fn vllm_chain(ids: &[u32], bs: usize) -> Vec<u64> {
    let mut seed = Vec::new();
    head(&mut seed, 3, 1);
    seed.push(b'0');
    let mut parent = sha(&seed);
    let mut out = Vec::new();
    for block in ids.chunks_exact(bs) {
        let mut b = Vec::new();
        head(&mut b, 4, 3);
        head(&mut b, 2, 32);
        b.extend_from_slice(&parent);
        head(&mut b, 4, block.len() as u64);
        for t in block {
            head(&mut b, 0, u64::from(*t));
        }
        b.push(0xf6);
        parent = sha(&b);
        let mut low = [0u8; 8];
        low.copy_from_slice(&parent[24..]);
        out.push(u64::from_be_bytes(low));
    }
    out
}

#[test]
fn prompt_blocks_carry_vllms_hash_of_the_tokenizers_ids() {
    let dir = std::env::temp_dir().join(format!("handoff-vllm-hash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, tokenizer_json()).expect("write tokenizer.json");
    let tokenizer = Tokenizer::from_file(&path).expect("a valid tokenizer.json");
    let spec = EngineSpec::default();
    let bs = spec.block_size as usize;
    let jsonl = Shared::default();
    let (l, server) = common::start(ServeConfig {
        kv_jsonl: Some(RouterEventWriter::new(Box::new(jsonl.clone()))),
        tokenizer,
        hash_mode: BlockHashMode::Vllm(VllmHasher::new("0")),
        ..common::loopback_pd(DeploymentConfig::default(), spec)
    });
    let addr = l.http;
    // 50 words, ids far from the built-in tokenizer's (>= 256): 3 full blocks.
    let ids: Vec<u32> = (0..50u32).map(|i| (i * 37) % WORDS as u32).collect();
    let text: Vec<String> = ids.iter().map(|i| format!("w{i}")).collect();
    let body = format!(
        r#"{{"model":"m","prompt":"{}","max_tokens":20,"ignore_eos":true}}"#,
        text.join(" ")
    );
    let (status, out) = common::call(addr, "POST", "/v1/completions", &body);
    assert_eq!(status, 200, "{out}");
    let usage: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(usage["usage"]["prompt_tokens"], 50, "the tokenizer's ids");
    common::wait_drained(addr);
    let _ = server.stop();
    let _ = std::fs::remove_dir_all(&dir);
    let want: Vec<u64> = vllm_chain(&ids.iter().map(|i| i + 1).collect::<Vec<_>>(), bs);
    assert_eq!(want.len(), 50 / bs);
    let text = jsonl.text();
    // The prefill worker's first stored run is the prompt's blocks, from
    // the root; every later stored event chains from a published hash.
    let mut published = Vec::new();
    let mut first = None;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("json line");
        let Some(s) = v["event"]["data"].get("stored") else {
            continue;
        };
        let hashes: Vec<u64> = s["blocks"]
            .as_array()
            .expect("blocks")
            .iter()
            .map(|b| b["block_hash"].as_u64().expect("u64"))
            .collect();
        if v["worker_id"] == 0 && first.is_none() {
            assert!(
                s["parent_hash"].is_null(),
                "the prompt's run starts at the root"
            );
            first = Some(hashes.clone());
        }
        if let Some(p) = s["parent_hash"].as_u64() {
            assert!(published.contains(&p), "parent {p} was published before");
        }
        published.extend(hashes);
    }
    let first = first.expect("the prefill worker stored the prompt");
    assert_eq!(
        first[..want.len()],
        want[..],
        "vLLM's chain over the tokenizer's ids"
    );
}
