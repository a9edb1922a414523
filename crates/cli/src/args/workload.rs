//! Where requests come from: `--trace` or the embedded synthetic workload,
//! checked as they stream.

use super::positive;
use clap::{Args, ValueEnum};
use handoff_core::{Duration, Instant};
use handoff_deployment::EngineSpec;
use handoff_workload::{
    RateCurve, ReaderOptions, SyntheticConfig, SyntheticWorkload, TraceError, TraceFormat,
    TraceItem, TraceReader,
};
use std::cell::RefCell;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;
use std::rc::Rc;

/// `--trace-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum TraceFormatArg {
    /// By extension: `.csv` is azure, anything else mooncake.
    Auto,
    /// Mooncake JSONL (`timestamp`, `input_length`, `output_length`, `hash_ids`).
    Mooncake,
    /// Azure LLM inference trace CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`).
    Azure,
}

/// Where requests come from.
#[derive(Args, Debug, Clone)]
pub struct WorkloadArgs {
    /// Trace file (Mooncake JSONL or Azure CSV); without it, the embedded
    /// synthetic workload runs.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Format of --trace.
    #[arg(long, value_enum, default_value = "auto", value_name = "FORMAT")]
    pub trace_format: TraceFormatArg,
    /// Prompt tokens each hash id of the trace covers (Mooncake's traces:
    /// 512).
    #[arg(long, default_value_t = 512, value_name = "TOKENS")]
    pub trace_block_size: u32,
    /// Count and report malformed trace lines instead of failing on the first.
    #[arg(long)]
    pub skip_bad_lines: bool,
    /// Divides every arrival time (and think-time) of the workload: 2 sends
    /// the same requests twice as fast (Dynamo's `--arrival-speedup-ratio`).
    #[arg(long, default_value_t = 1.0, value_name = "RATIO")]
    pub arrival_speedup_ratio: f64,
    /// Synthetic workload: number of requests [default: 2000].
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,
    /// Synthetic workload: Poisson arrival rate, in requests/s [default: 16].
    #[arg(long, value_name = "PER_S")]
    pub rate: Option<f64>,
    /// Synthetic workload: a time-varying Poisson rate instead of --rate:
    /// `step:T=R,...`, `ramp:R0..R1/T`, `sine:MEAN,AMP,PERIOD` or
    /// `bursts:BASE,PEAK,EVERY,LEN` (times in s, or with ms/s/m/h).
    #[arg(long, value_name = "CURVE", conflicts_with = "rate", value_parser = parse_rate_curve)]
    pub rate_curve: Option<RateCurve>,
    /// Stop after this many requests [default: all].
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,
}

/// Stops a trace stream at its first error and keeps it for the caller, so a
/// run over a bad trace writes nothing; with `--skip-bad-lines`, keeps the
/// reader's count of skipped lines and their first errors.
pub struct Checked<R> {
    inner: TraceReader<R>,
    /// The first error, once seen.
    pub error: Rc<RefCell<Option<TraceError>>>,
    skipped: Rc<RefCell<Skipped>>,
    left: Option<u64>,
}

/// Lines `--skip-bad-lines` passed over.
#[derive(Debug, Default)]
pub struct Skipped {
    /// How many.
    pub count: u64,
    /// The first few, located.
    pub first: Vec<String>,
}

impl<R: std::io::BufRead> Iterator for Checked<R> {
    type Item = TraceItem;
    fn next(&mut self) -> Option<TraceItem> {
        if self.left == Some(0) {
            return None;
        }
        let next = self.inner.next();
        let bad = self.inner.stats().bad_lines;
        if bad != self.skipped.borrow().count {
            let mut sk = self.skipped.borrow_mut();
            sk.count = bad;
            sk.first = self
                .inner
                .errors()
                .iter()
                .take(5)
                .map(|e| e.to_string())
                .collect();
        }
        match next? {
            Ok(item) => {
                self.left = self.left.map(|n| n - 1);
                Some(item)
            }
            Err(e) => {
                *self.error.borrow_mut() = Some(e);
                None
            }
        }
    }
}

impl Workload {
    /// The requests `items` (already read and checked elsewhere, as
    /// `validate` reads a real run), described by `note`.
    pub fn from_items(items: Vec<TraceItem>, note: String) -> Workload {
        Workload {
            items: Box::new(items.into_iter()),
            error: Rc::default(),
            note,
            skipped: Rc::default(),
            open_loop_rate: None,
        }
    }

    /// Refuses a deployment whose KV pools cannot hold the workload's first
    /// request (prompt plus output) at all, instead of failing every request
    /// on it: `specs` are the schedulers' engines (one per DP rank),
    /// prefill (or aggregated) first, the last `decode` of them decode
    /// ranks.
    pub fn check_fits(&mut self, specs: &[EngineSpec], decode: usize) -> Result<(), String> {
        let Some(first) = self.items.next() else {
            return Ok(());
        };
        let need = u64::from(first.request.prompt_tokens);
        let total = need + u64::from(first.request.max_output_tokens);
        let split = specs.len().saturating_sub(decode);
        for (i, spec) in specs.iter().enumerate() {
            let (role, flag, needs) = if i >= split {
                ("a decode", "--decode-kv-tokens", total)
            } else if decode == 0 {
                ("an aggregated", "--prefill-kv-tokens", total)
            } else {
                ("a prefill", "--prefill-kv-tokens", need)
            };
            if spec.kv_tokens < needs {
                return Err(format!(
                    "{flag} {}: {role} worker cannot hold the workload's first request \
                     ({needs} tokens of KV), so every request like it would fail; raise {flag}",
                    spec.kv_tokens
                ));
            }
        }
        let rest = std::mem::replace(&mut self.items, Box::new(std::iter::empty()));
        self.items = Box::new(std::iter::once(first).chain(rest));
        Ok(())
    }

    /// Says in the note that the workload runs closed loop with `n`
    /// requests in flight, instead of at its open-loop rate.
    pub fn closed_loop(&mut self, n: usize) {
        if let Some(rate) = self.open_loop_rate.take() {
            if let Some(at) = self.note.find(&rate) {
                self.note.replace_range(at..at + rate.len(), "");
            }
        }
        self.note
            .push_str(&format!(", closed loop with {n} in flight"));
    }

    /// The items, leaving an empty stream behind (the rest of the workload
    /// stays readable for the report).
    pub fn take_items(&mut self) -> Box<dyn Iterator<Item = TraceItem>> {
        std::mem::replace(&mut self.items, Box::new(std::iter::empty()))
    }
}

/// `--rate-curve`: the typed parser, its located error as clap's message.
fn parse_rate_curve(s: &str) -> Result<RateCurve, String> {
    RateCurve::parse(s).map_err(|e| e.to_string())
}

/// A workload stream plus a slot where a trace error lands.
pub struct Workload {
    /// The items.
    pub items: Box<dyn Iterator<Item = TraceItem>>,
    /// Set when the trace had an error (the stream ended there).
    pub error: Rc<RefCell<Option<TraceError>>>,
    /// What it is, for the summary.
    pub note: String,
    /// Bad lines skipped (`--skip-bad-lines`).
    pub skipped: Rc<RefCell<Skipped>>,
    /// The synthetic workload's rate in the note (` at 16/s`), which a
    /// closed loop does not follow.
    open_loop_rate: Option<String>,
}

impl Skipped {
    /// `note` plus, if any lines were skipped, how many and the first errors.
    pub fn describe(&self, note: &str) -> String {
        let sk = self;
        if sk.count == 0 {
            return note.to_string();
        }
        let mut s = format!("{note} ({} bad lines skipped)", sk.count);
        for e in &sk.first {
            s.push_str("\n  skipped ");
            s.push_str(e);
        }
        s
    }
}

impl WorkloadArgs {
    /// Opens the trace, or builds the synthetic workload.
    pub fn open(&self, seed: u64) -> Result<Workload, String> {
        self.check_ranges()?;
        let mut wl = self.open_unscaled(seed)?;
        let ratio = positive("arrival-speedup-ratio", self.arrival_speedup_ratio)?;
        if ratio != 1.0 {
            let items = std::mem::replace(&mut wl.items, Box::new(std::iter::empty()));
            wl.items = Box::new(items.map(move |mut it| {
                it.request.arrival = Instant((it.request.arrival.0 as f64 / ratio).round() as u64);
                it.delay = it
                    .delay
                    .map(|d| Duration::from_nanos((d.as_nanos() as f64 / ratio).round() as u64));
                it
            }));
            wl.note.push_str(&format!(", arrivals {ratio}x faster"));
        }
        Ok(wl)
    }

    /// The trace format `--trace-format` names for `path`.
    pub fn format(&self, path: &std::path::Path) -> TraceFormat {
        match self.trace_format {
            TraceFormatArg::Auto => TraceFormat::from_path(path),
            TraceFormatArg::Mooncake => TraceFormat::Mooncake,
            TraceFormatArg::Azure => TraceFormat::AzureCsv,
        }
    }

    fn open_unscaled(&self, seed: u64) -> Result<Workload, String> {
        let error = Rc::new(RefCell::new(None));
        let skipped = Rc::new(RefCell::new(Skipped::default()));
        if self.trace_block_size == 0 {
            return Err("--trace-block-size: must be at least 1".into());
        }
        match &self.trace {
            Some(path) => {
                let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
                let format = self.format(path);
                let mut opts = ReaderOptions::new(path.display().to_string())
                    .with_format(format)
                    .with_hash_block_tokens(self.trace_block_size);
                if self.skip_bad_lines {
                    opts = opts.skipping_bad_lines();
                }
                let reader = TraceReader::new(BufReader::with_capacity(1 << 20, file), opts);
                let items = Checked {
                    inner: reader,
                    error: error.clone(),
                    skipped: skipped.clone(),
                    left: self.limit,
                };
                Ok(Workload {
                    items: Box::new(items),
                    error,
                    note: format!("trace {} ({})", path.display(), format.name()),
                    skipped,
                    open_loop_rate: None,
                })
            }
            None => {
                let mut sc = SyntheticConfig {
                    seed,
                    ..SyntheticConfig::default()
                };
                if let Some(n) = self.requests {
                    sc.requests = n;
                }
                if let Some(r) = self.rate {
                    sc.rate_per_sec = positive("rate", r)?;
                }
                if let Some(l) = self.limit {
                    sc.requests = sc.requests.min(l);
                }
                let rate = match &self.rate_curve {
                    Some(curve) => {
                        sc.rate_curve = Some(curve.clone());
                        format!(" at rate curve {}", curve.describe())
                    }
                    None => format!(" at {}/s", sc.rate_per_sec),
                };
                let note = format!(
                    "embedded synthetic workload: {} requests{rate}",
                    sc.requests
                );
                Ok(Workload {
                    items: Box::new(SyntheticWorkload::new(sc)),
                    error,
                    note,
                    skipped,
                    open_loop_rate: Some(rate),
                })
            }
        }
    }
}
