//! The fuzzing loop every target shares: seeds first, then inputs that are
//! either freshly generated or a corpus entry with a stack of mutations;
//! each runs under `catch_unwind`; a panic or a failed check is hex-dumped,
//! saved, minimised and counted.
//!
//! Feedback: an input joins the corpus when it is *interesting*, which is
//! either (a) in an instrumented build ([`crate::coverage`]), that it
//! reached an edge hit-count bucket no earlier input reached, or (b) in any
//! build, that it shows an outcome feature ([`Sig`]: a kind of frame or
//! error the decoder produced, or a pair of them in succession) no earlier
//! input showed.
//! (b) is the cheap stable-toolchain guidance; (a) is real coverage
//! guidance when the binary is built with `fuzz/coverage.sh`.

use crate::coverage::Coverage;
use crate::mutate::{fnv, hex_dump};
use crate::rng::Rng;
use std::cell::RefCell;
use std::collections::HashSet;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One decoder under attack.
pub trait Target {
    /// Name on the command line and in reports.
    fn name(&self) -> &'static str;
    /// The initial corpus: valid inputs and hand-made edge cases.
    fn seeds(&mut self) -> Vec<Vec<u8>>;
    /// A fresh input not derived from the corpus. May occasionally be far
    /// longer than the mutation length cap (to exercise size limits); such
    /// inputs never join the corpus.
    fn generate(&mut self, rng: &mut Rng) -> Vec<u8>;
    /// Applies one mutation to `buf` (structure-aware, or a generic byte
    /// mutation); keeps it at most `max_len` bytes.
    fn mutate(&mut self, rng: &mut Rng, buf: &mut Vec<u8>, corpus: &[Vec<u8>], max_len: usize);
    /// Decodes `input` and checks everything the target promises; panics
    /// (through `check!` or a decoder bug) on any violation. Returns the
    /// outcome features ([`Sig::finish`]).
    fn run(&mut self, input: &[u8]) -> Vec<u64>;
    /// Measurements so far, for the report.
    fn summary(&self) -> String;
}

/// What one input made the decoder say, as features: every outcome kind
/// it produced (which frame kinds decoded, which errors came up) and every
/// pair of kinds in succession. An input that shows a feature no earlier
/// input showed joins the corpus: the outcome-level analogue of edge
/// coverage, bounded by the number of kinds squared rather than growing
/// with every new count or order.
#[derive(Default)]
pub struct Sig(Vec<u64>);

impl Sig {
    /// Records one outcome kind.
    pub fn add(&mut self, kind: &str) {
        self.0.push(fnv(kind.as_bytes()));
    }

    /// The distinct features: kinds, and consecutive pairs of kinds.
    pub fn finish(self) -> Vec<u64> {
        let mut f: Vec<u64> = self.0.clone();
        f.extend(
            self.0
                .windows(2)
                .map(|w| w[0].rotate_left(17) ^ w[1].wrapping_mul(0x9e37_79b9_7f4a_7c15)),
        );
        f.sort_unstable();
        f.dedup();
        f
    }
}

/// How long and how hard to fuzz.
#[derive(Clone, Debug)]
pub struct Config {
    /// Inputs to run, seeds included.
    pub iterations: u64,
    /// Seed of the input stream.
    pub seed: u64,
    /// Longest input the mutator makes.
    pub max_len: usize,
    /// Where failing inputs are written.
    pub crash_dir: PathBuf,
    /// Continue after a failure instead of stopping.
    pub keep_going: bool,
    /// Most inputs kept in the corpus.
    pub corpus_cap: usize,
    /// Print a progress line every this many inputs (0: never).
    pub progress: u64,
}

/// What one target's run did.
#[derive(Clone, Debug)]
pub struct Report {
    /// The target.
    pub name: &'static str,
    /// Inputs run.
    pub iterations: u64,
    /// Of which generated from scratch.
    pub generated: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Corpus size at the end (seeds included).
    pub corpus: usize,
    /// Distinct outcome features seen.
    pub features: usize,
    /// `(edges hit, edges instrumented)` in an instrumented build.
    pub coverage: Option<(usize, usize)>,
    /// Inputs that panicked or failed a check.
    pub failures: u64,
    /// Files the failing inputs were saved to.
    pub saved: Vec<PathBuf>,
}

thread_local! {
    static LAST_PANIC: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Replaces the panic hook with one that records the message (and its
/// location) for the failure report instead of printing it, so that a
/// failing input is reported once, with its hex dump, not buried in
/// backtraces.
pub fn install_panic_hook() {
    panic::set_hook(Box::new(|info| {
        let msg = info.to_string();
        LAST_PANIC.with(|p| *p.borrow_mut() = msg);
    }));
}

/// Runs one input; `Err` carries the panic message.
pub fn run_one(target: &mut dyn Target, input: &[u8]) -> Result<Vec<u64>, String> {
    LAST_PANIC.with(|p| p.borrow_mut().clear());
    panic::catch_unwind(AssertUnwindSafe(|| target.run(input)))
        .map_err(|_| LAST_PANIC.with(|p| p.borrow().clone()))
}

/// The panic location (`file:line:col`), which identifies "the same
/// failure" while minimising.
fn location(msg: &str) -> &str {
    msg.lines().next().unwrap_or("")
}

/// Greedily deletes chunks of `input` while it still fails at the same
/// place; at most `budget` attempts.
pub fn minimize(target: &mut dyn Target, input: &[u8], msg: &str, budget: usize) -> Vec<u8> {
    let want = location(msg).to_string();
    let mut best = input.to_vec();
    let mut tries = 0;
    let mut chunk = best.len().div_ceil(2).max(1);
    while chunk >= 1 && tries < budget {
        let mut i = 0;
        while i < best.len() && tries < budget {
            let mut cand = best.clone();
            cand.drain(i..(i + chunk).min(best.len()));
            tries += 1;
            match run_one(target, &cand) {
                Err(m) if location(&m) == want => best = cand,
                _ => i += chunk,
            }
        }
        if chunk == 1 {
            break;
        }
        chunk /= 2;
    }
    best
}

fn report_failure(
    target: &mut dyn Target,
    input: &[u8],
    msg: &str,
    cfg: &Config,
    saved: &mut Vec<PathBuf>,
) {
    let name = target.name();
    eprintln!(
        "==== {name}: FAILURE on a {}-byte input ====\n{msg}\n{}",
        input.len(),
        hex_dump(input, 4096)
    );
    let min = minimize(target, input, msg, 4000);
    let mut write = |suffix: &str, bytes: &[u8]| {
        let path = cfg
            .crash_dir
            .join(format!("{name}-{:016x}{suffix}.bin", fnv(input)));
        match std::fs::create_dir_all(&cfg.crash_dir).and_then(|_| std::fs::write(&path, bytes)) {
            Ok(()) => {
                eprintln!("saved {} ({} bytes)", path.display(), bytes.len());
                saved.push(path);
            }
            Err(e) => eprintln!("could not save {}: {e}", path.display()),
        }
    };
    write("", input);
    if min.len() < input.len() {
        write("-min", &min);
        eprintln!(
            "minimised to {} bytes:\n{}",
            min.len(),
            hex_dump(&min, 4096)
        );
    }
    eprintln!("reproduce: cargo run --release -p handoff-fuzz -- {name} --replay <file>\n====");
}

/// Fuzzes `target` as `cfg` says.
pub fn fuzz(target: &mut dyn Target, cfg: &Config) -> Report {
    let start = Instant::now();
    let mut rng = Rng::new(cfg.seed ^ fnv(target.name().as_bytes()));
    let mut cov = Coverage::new();
    let seeds = target.seeds();
    let mut corpus: Vec<Vec<u8>> = Vec::new();
    let mut seen = HashSet::new();
    let mut failures = 0;
    let mut generated = 0;
    let mut saved = Vec::new();
    let mut i = 0u64;
    while i < cfg.iterations {
        let input = if (i as usize) < seeds.len() {
            seeds[i as usize].clone()
        } else if corpus.is_empty() || rng.one_in(16) {
            generated += 1;
            target.generate(&mut rng)
        } else {
            // Favour the newest entries a little: they are what the last
            // discoveries were made from.
            let idx = if rng.one_in(4) {
                corpus.len() - 1 - rng.below(corpus.len().min(32))
            } else {
                rng.below(corpus.len())
            };
            let mut buf = corpus[idx].clone();
            let depth = 1 << rng.below(4);
            for _ in 0..rng.range(1, depth) {
                target.mutate(&mut rng, &mut buf, &corpus, cfg.max_len);
            }
            buf
        };
        cov.clear();
        match run_one(target, &input) {
            Ok(features) => {
                let new_edges = cov.novel();
                let mut new_feature = false;
                for f in features {
                    new_feature |= seen.insert(f);
                }
                let seed = (i as usize) < seeds.len();
                if (seed || new_edges || new_feature) && input.len() <= cfg.max_len {
                    if corpus.len() < cfg.corpus_cap {
                        corpus.push(input);
                    } else {
                        let j = rng.below(corpus.len());
                        corpus[j] = input;
                    }
                }
            }
            Err(msg) => {
                failures += 1;
                report_failure(target, &input, &msg, cfg, &mut saved);
                if !cfg.keep_going {
                    i += 1;
                    break;
                }
            }
        }
        i += 1;
        if cfg.progress > 0 && i.is_multiple_of(cfg.progress) {
            eprintln!(
                "{}: {i} inputs, corpus {}, {} outcome features{}, {:.1}s",
                target.name(),
                corpus.len(),
                seen.len(),
                if cov.available() {
                    format!(", {} edges", cov.edges())
                } else {
                    String::new()
                },
                start.elapsed().as_secs_f64()
            );
        }
    }
    Report {
        name: target.name(),
        iterations: i,
        generated,
        elapsed: start.elapsed(),
        corpus: corpus.len(),
        features: seen.len(),
        coverage: cov.available().then(|| (cov.edges(), cov.total())),
        failures,
        saved,
    }
}
