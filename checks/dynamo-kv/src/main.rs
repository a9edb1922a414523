//! `dynamo-kv-check`: does NVIDIA Dynamo's router accept and index
//! handoff-mocker's KV events as the mocker's own router does?
//!
//! ```text
//! dynamo-kv-check --events KV.jsonl [--trace TRACE.jsonl | --prompts PROMPTS.jsonl]
//!                 [--block-size N] [--cached CACHED.json] [--checkpoints N] [--samples N]
//! ```
//!
//! Dynamo's side runs on Dynamo's code only (`dynamo-kv-router` 1.6.1):
//!
//! - every line deserializes into `RouterEvent` (serde, as Dynamo's
//!   subscriber reads JSON events) and `RadixTree::apply_event` takes it
//!   without error;
//! - each worker's event ids pass Dynamo's cursor rule
//!   (`recovery::CursorState::observe`): the first id is 0, each next one is
//!   the last plus one (a gap or a stale id fails, as the listener would
//!   replay or drop it);
//! - at the end, the blocks each worker holds in Dynamo's tree (its dump)
//!   equal those the mocker's router index (`handoff_router::PrefixIndex`,
//!   the index the mocker routes by) holds after the same stream;
//! - with `--trace`, at `--checkpoints` points of the stream, for
//!   `--samples` requests of the trace (and at the end for up to 400
//!   requests spread over it), the overlap Dynamo finds
//!   (`RadixTree::find_matches` of `compute_block_hash_for_seq` over the
//!   request's stand-in token ids) equals, for every worker, the overlap
//!   the mocker's index finds for the request's engine block hashes
//!   (`Request::block_hashes`). The stand-in ids are rebuilt here from the
//!   rule README.md documents ("Reproducing our hashes"), not from the
//!   mocker's code; any stored block of a sampled request must carry the
//!   `tokens_hash` Dynamo computes from them.
//! - with `--prompts` (serve traffic: one `{"token_ids": [...]}` line per
//!   request, the ids serve's `/v1/completions/render` gave), the same
//!   comparisons over those prompts: Dynamo hashes the real token ids, the
//!   mocker's index is asked for the prompt's engine block hashes, rebuilt
//!   here from the rule `handoff-serve`'s `prompt` module documents
//!   ([`serve_block_hashes`]);
//! - with `--cached` (`{"WORKER": tokens}`: what serve's `/debug/workers`
//!   reports cached once drained), every worker's blocks in Dynamo's tree
//!   times the block size must be exactly that many tokens.

use dynamo_kv_router::protocols::{BlockHashOptions, KvCacheEventData, WorkerWithDpRank};
use dynamo_kv_router::recovery::{CursorObservation, CursorState};
use dynamo_kv_router::{RadixTree, RouterEvent, compute_block_hash_for_seq};
use handoff_core::{KvEvent, KvEventData, Request};
use handoff_router::PrefixIndex;
use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::process::ExitCode;

/// Requests of the trace whose overlaps are compared (evenly spaced).
const MAX_SAMPLES: usize = 400;

struct Args {
    events: String,
    trace: Option<String>,
    prompts: Option<String>,
    cached: Option<String>,
    block_size: u32,
    checkpoints: usize,
    samples: usize,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        events: String::new(),
        trace: None,
        prompts: None,
        cached: None,
        block_size: 0,
        checkpoints: 40,
        samples: 50,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag}: missing value"));
        let num = |v: String| v.parse::<usize>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--events" => a.events = value()?,
            "--trace" => a.trace = Some(value()?),
            "--prompts" => a.prompts = Some(value()?),
            "--cached" => a.cached = Some(value()?),
            "--block-size" => a.block_size = num(value()?)? as u32,
            "--checkpoints" => a.checkpoints = num(value()?)?.max(1),
            "--samples" => a.samples = num(value()?)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.events.is_empty() {
        return Err("--events FILE is required".into());
    }
    if a.trace.is_some() && a.prompts.is_some() {
        return Err("--trace and --prompts: one workload at a time".into());
    }
    if (a.trace.is_some() || a.prompts.is_some() || a.cached.is_some()) && a.block_size == 0 {
        return Err(
            "--trace, --prompts and --cached need --block-size (the workers' KV event block size)"
                .into(),
        );
    }
    Ok(a)
}

/// splitmix64's finaliser (README: `mix64`).
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The prompt's stand-in token ids, by README's rule: token `p` is
/// `mix64(mix64(x) ^ (p % 512)) & 0x7fffffff` with `x` the hash id of chunk
/// `p / 512`, or `mix64(request_id ^ 0xdeadbeef) ^ chunk` past the trace's.
fn stand_in_prompt(r: &Request) -> Vec<u32> {
    let hbt = u64::from(r.hash_block_tokens.max(1));
    (0..u64::from(r.prompt_tokens))
        .map(|p| {
            let c = p / hbt;
            let x = match r.prefix_hashes.get(c as usize) {
                Some(&h) => h,
                None => mix64(r.id.0 ^ 0xdead_beef) ^ c,
            };
            (mix64(mix64(x) ^ (p % hbt)) & 0x7fff_ffff) as u32
        })
        .collect()
}

/// A generated block's stand-in token ids, by README's rule: token `i` of
/// the block published as `h` is `mix64(mix64(h) ^ i) & 0x7fffffff`.
fn stand_in_generated(h: u64, block_size: u32) -> Vec<u32> {
    (0..u64::from(block_size))
        .map(|i| (mix64(mix64(h) ^ i) & 0x7fff_ffff) as u32)
        .collect()
}

/// FNV-1a 64 over the ids' little-endian `u32` bytes: an HTTP prompt
/// block's content hash (`handoff-serve`'s `prompt::block_content_hash`).
fn block_content_hash(tokens: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in tokens.iter().flat_map(|t| t.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The engine hash of each full block of an HTTP prompt, by the rule
/// `handoff-serve`'s `prompt` module documents: `c_0 = mix64(h_0 ^
/// 0x5eed)`, `c_i = mix64(c_{i-1} ^ h_i)`, block `i` published as
/// `mix64(c_i) & !31`.
fn serve_block_hashes(tokens: &[u32], block_size: u32) -> Vec<u64> {
    let mut chained = 0u64;
    tokens
        .chunks_exact(block_size.max(1) as usize)
        .enumerate()
        .map(|(i, block)| {
            let h = block_content_hash(block);
            chained = mix64(if i == 0 { h ^ 0x5eed } else { chained ^ h });
            mix64(chained) & !31
        })
        .collect()
}

/// Serve traffic's prompts: one `{"token_ids": [...]}` per line.
fn read_prompts(path: &str) -> Result<Vec<Vec<u32>>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    text.lines()
        .enumerate()
        .map(|(n, line)| {
            let v: serde_json::Value =
                serde_json::from_str(line).map_err(|e| format!("{path}:{}: {e}", n + 1))?;
            serde_json::from_value(v["token_ids"].clone())
                .map_err(|e| format!("{path}:{}: token_ids: {e}", n + 1))
        })
        .collect()
}

/// One sampled request: its engine hashes and Dynamo's hashes of its
/// stand-in tokens, block for block.
struct Sample {
    engine: Vec<u64>,
    dynamo: Vec<dynamo_kv_router::LocalBlockHash>,
}

fn read_trace(path: &str) -> Result<Vec<Request>, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let opts = handoff_workload::ReaderOptions::new(path);
    handoff_workload::TraceReader::new(std::io::BufReader::new(f), opts)
        .map(|r| r.map(|i| i.request).map_err(|e| format!("{path}: {e}")))
        .collect()
}

#[derive(Default)]
struct Tally {
    lines: u64,
    stored: u64,
    removed: u64,
    cleared: u64,
    comparisons: u64,
    nonzero: u64,
    /// Comparisons where the overlap reaches past the first trace chunk.
    deep: u64,
    tokens_hash_checked: u64,
    failures: Vec<String>,
}

impl Tally {
    fn fail(&mut self, msg: String) {
        if self.failures.len() < 20 {
            eprintln!("FAIL: {msg}");
        }
        self.failures.push(msg);
    }
}

/// The mocker's event, for the mocker's router index.
fn to_mocker(e: &RouterEvent) -> KvEvent {
    let data = match &e.event.data {
        KvCacheEventData::Stored(s) => KvEventData::Stored {
            parent_hash: s.parent_hash.map(|h| h.0),
            block_hashes: s.blocks.iter().map(|b| b.block_hash.0).collect(),
        },
        KvCacheEventData::Removed(r) => KvEventData::Removed {
            block_hashes: r.block_hashes.iter().map(|h| h.0).collect(),
        },
        KvCacheEventData::Cleared => KvEventData::Cleared,
    };
    KvEvent {
        event_id: e.event.event_id,
        data,
    }
}

fn compare_overlaps(
    tree: &RadixTree,
    mocker: &BTreeMap<WorkerWithDpRank, PrefixIndex>,
    samples: &[Sample],
    picks: impl Iterator<Item = usize>,
    at_line: u64,
    deep_after: u32,
    t: &mut Tally,
) {
    for i in picks {
        let s = &samples[i];
        let scores = tree.find_matches(s.dynamo.clone(), false).scores;
        for (w, index) in mocker {
            let ours = index.overlap(&s.engine);
            let theirs = scores.get(w).copied().unwrap_or(0);
            t.comparisons += 1;
            t.nonzero += u64::from(ours > 0);
            t.deep += u64::from(ours > deep_after);
            if ours != theirs {
                t.fail(format!(
                    "line {at_line}: request {i} on worker {}: mocker overlap {ours}, Dynamo {theirs}",
                    w.worker_id
                ));
            }
        }
    }
}

/// Every prompt block of the trace: engine hash -> Dynamo's hash of its
/// stand-in tokens; and at most [`MAX_SAMPLES`] requests, evenly spaced,
/// kept whole for the overlap comparisons.
fn expectations(prompts: &[Prompt], block_size: u32) -> (HashMap<u64, u64>, Vec<Sample>) {
    let stride = prompts.len().div_ceil(MAX_SAMPLES).max(1);
    let mut expect_tokens_hash: HashMap<u64, u64> = HashMap::new();
    let mut samples: Vec<Sample> = Vec::new();
    for (i, (engine, tokens)) in prompts.iter().enumerate() {
        let engine = engine.clone();
        let dynamo = compute_block_hash_for_seq(tokens, block_size, BlockHashOptions::default());
        for (e, d) in engine.iter().zip(&dynamo) {
            expect_tokens_hash.insert(*e, d.0);
        }
        if i % stride == 0 {
            samples.push(Sample { engine, dynamo });
        }
    }
    (expect_tokens_hash, samples)
}

/// The blocks each worker holds in Dynamo's tree (its dump) against the
/// mocker's router index, and against the tokens `cached` says the worker
/// itself holds (`block_size` tokens a block), when given.
fn compare_counts(
    tree: &RadixTree,
    mocker: &BTreeMap<WorkerWithDpRank, PrefixIndex>,
    cached: Option<&BTreeMap<u64, u64>>,
    block_size: u32,
    t: &mut Tally,
) {
    let mut dumped: BTreeMap<u64, usize> = BTreeMap::new();
    for e in tree.dump_tree_as_events() {
        if let KvCacheEventData::Stored(s) = e.event.data {
            *dumped.entry(e.worker_id).or_default() += s.blocks.len();
        }
    }
    if dumped.values().sum::<usize>() != tree.current_size() {
        t.fail(format!(
            "Dynamo's dump holds {} blocks, its lookup {}",
            dumped.values().sum::<usize>(),
            tree.current_size()
        ));
    }
    for (w, index) in mocker {
        let theirs = dumped.get(&w.worker_id).copied().unwrap_or(0);
        println!(
            "worker {}: mocker router index {} blocks, Dynamo radix tree {theirs}",
            w.worker_id,
            index.len()
        );
        if index.len() != theirs {
            t.fail(format!(
                "worker {}: mocker holds {} blocks, Dynamo {theirs}",
                w.worker_id,
                index.len()
            ));
        }
    }
    for (w, &tokens) in cached.into_iter().flatten() {
        let theirs = dumped.get(w).copied().unwrap_or(0) as u64;
        println!("worker {w}: serve caches {tokens} tokens, Dynamo's tree {theirs} blocks");
        if theirs * u64::from(block_size) != tokens {
            t.fail(format!(
                "worker {w}: serve caches {tokens} tokens, Dynamo holds {theirs} blocks of {block_size}"
            ));
        }
    }
}

/// `--cached`: `{"WORKER": tokens}`.
fn read_cached(path: &str) -> Result<BTreeMap<u64, u64>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let m: BTreeMap<String, u64> =
        serde_json::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    m.into_iter()
        .map(|(w, n)| {
            Ok((
                w.parse().map_err(|e| format!("{path}: worker {w}: {e}"))?,
                n,
            ))
        })
        .collect()
}

/// A prompt's engine block hashes and its token ids.
type Prompt = (Vec<u64>, Vec<u32>);

/// Each prompt of the workload (`--trace` or `--prompts`).
fn workload(a: &Args) -> Result<Vec<Prompt>, String> {
    Ok(match (&a.trace, &a.prompts) {
        (Some(p), _) => read_trace(p)?
            .iter()
            .map(|r| {
                let mut engine = Vec::new();
                r.block_hashes(a.block_size, &mut engine);
                (engine, stand_in_prompt(r))
            })
            .collect(),
        (None, Some(p)) => read_prompts(p)?
            .into_iter()
            .map(|t| (serve_block_hashes(&t, a.block_size), t))
            .collect(),
        (None, None) => Vec::new(),
    })
}

fn run(a: &Args) -> Result<Tally, String> {
    let prompts = workload(a)?;
    let workload = !prompts.is_empty();
    let (expect_tokens_hash, samples) = expectations(&prompts, a.block_size);
    let open = || {
        std::fs::File::open(&a.events)
            .map(|f| std::io::BufReader::with_capacity(1 << 20, f).lines())
            .map_err(|e| format!("{}: {e}", a.events))
    };
    let total = open()?.count();
    let every = (total / a.checkpoints).max(1);
    // Blocks of the first 512-token trace chunk (which many prompts share).
    let deep_after = 512 / a.block_size.max(1);
    let mut tree = RadixTree::new();
    let mut mocker: BTreeMap<WorkerWithDpRank, PrefixIndex> = BTreeMap::new();
    let mut cursors: HashMap<WorkerWithDpRank, CursorState> = HashMap::new();
    let mut t = Tally::default();
    let mut checkpoint = 0usize;
    for (n, line) in open()?.enumerate() {
        let n = n as u64 + 1;
        t.lines += 1;
        let line = line.map_err(|e| format!("{}: line {n}: {e}", a.events))?;
        let ev: RouterEvent = match serde_json::from_str(&line) {
            Ok(ev) => ev,
            Err(e) => {
                t.fail(format!("line {n}: not a Dynamo RouterEvent: {e}"));
                continue;
            }
        };
        let w = WorkerWithDpRank::new(ev.worker_id, ev.event.dp_rank);
        let cursor = cursors.entry(w).or_default();
        match cursor.observe(ev.event.event_id) {
            CursorObservation::Initial { got: 0 } | CursorObservation::Contiguous { .. } => {}
            o => t.fail(format!("line {n}: worker {}: event id {o:?}", w.worker_id)),
        }
        *cursor = cursor.advance_to(ev.event.event_id);
        match &ev.event.data {
            KvCacheEventData::Stored(s) => {
                t.stored += 1;
                for b in &s.blocks {
                    // A trace prompt's block, else a generated one.
                    let (kind, want) = match expect_tokens_hash.get(&b.block_hash.0) {
                        Some(&w) => ("prompt", w),
                        None if workload => {
                            let t = stand_in_generated(b.block_hash.0, a.block_size);
                            let h = compute_block_hash_for_seq(
                                &t,
                                a.block_size,
                                BlockHashOptions::default(),
                            );
                            ("generated", h.first().map_or(0, |h| h.0))
                        }
                        None => continue,
                    };
                    t.tokens_hash_checked += 1;
                    if b.tokens_hash.0 != want {
                        t.fail(format!(
                            "line {n}: {kind} block {} has tokens_hash {}, Dynamo's hash of its tokens is {want}",
                            b.block_hash.0, b.tokens_hash.0
                        ));
                    }
                }
            }
            KvCacheEventData::Removed(_) => t.removed += 1,
            KvCacheEventData::Cleared => t.cleared += 1,
        }
        mocker.entry(w).or_default().apply(&to_mocker(&ev));
        if let Err(e) = tree.apply_event(ev) {
            t.fail(format!("line {n}: Dynamo's RadixTree refused it: {e:?}"));
        }
        if !samples.is_empty() && (n as usize).is_multiple_of(every) {
            checkpoint += 1;
            let k = samples.len();
            let picks = (0..a.samples.min(k)).map(|j| (checkpoint * 7919 + j * 104_729) % k);
            compare_overlaps(&tree, &mocker, &samples, picks, n, deep_after, &mut t);
        }
    }
    // Final state: every request once against the full tree is the
    // strongest overlap check.
    if !samples.is_empty() {
        compare_overlaps(
            &tree,
            &mocker,
            &samples,
            0..samples.len(),
            t.lines,
            deep_after,
            &mut t,
        );
    }
    let cached = a.cached.as_deref().map(read_cached).transpose()?;
    compare_counts(&tree, &mocker, cached.as_ref(), a.block_size, &mut t);
    Ok(t)
}

fn main() -> ExitCode {
    let a = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("dynamo-kv-check: {e}");
            return ExitCode::from(2);
        }
    };
    let t = match run(&a) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("dynamo-kv-check: {e}");
            return ExitCode::from(2);
        }
    };
    println!(
        "{}: {} lines ({} stored, {} removed, {} cleared); {} overlap comparisons ({} non-zero, {} past the first chunk); {} tokens_hash values checked",
        a.events,
        t.lines,
        t.stored,
        t.removed,
        t.cleared,
        t.comparisons,
        t.nonzero,
        t.deep,
        t.tokens_hash_checked
    );
    if (a.trace.is_some() || a.prompts.is_some()) && (t.deep == 0 || t.tokens_hash_checked == 0) {
        eprintln!("FAIL: the overlap check compared nothing but zeros");
        return ExitCode::FAILURE;
    }
    if t.failures.is_empty() {
        println!("OK: Dynamo's router agrees with the mocker's");
        ExitCode::SUCCESS
    } else {
        eprintln!("{} failures", t.failures.len());
        ExitCode::FAILURE
    }
}
