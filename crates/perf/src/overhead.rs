//! Step-time terms the kernel tables leave out, named, cited and each
//! switchable (docs/step-time-terms.md explains them with their sources).
//!
//! A [`crate::ProfilePerf`] times a pass by looking its shape up in tables
//! of kernel times. A real engine's pass takes longer: the CPU prepares the
//! inputs and launches the sampler, every sequence is sampled, stop-checked
//! and detokenized, a decode batch runs at the CUDA-graph size it is padded
//! to, and with tensor parallelism every layer all-reduces its activations.
//! [`Overheads`] adds these as terms:
//!
//! ```text
//! gpu  = kernel_scale × table(pass, decode batch padded to a captured size)
//!      + step_ms + per_seq_ms × sequences + all-reduce(tokens)     (tp > 1)
//! pass = max(gpu, sched_ms)   with async scheduling
//!      = gpu + sched_ms       without
//! ```
//!
//! Every term defaults to off ([`Overheads::default`]); a model whose terms
//! are all off takes exactly the table path (same bits, same speed). Every
//! term is non-decreasing in the pass's work, so a pass never gets shorter
//! when work is added to it.

/// Lowest and highest [`Overheads::kernel_scale`].
pub const KERNEL_SCALE_RANGE: (f64, f64) = (0.25, 4.0);
/// Highest [`Overheads::step_ms`].
pub const MAX_STEP_MS: f64 = 100.0;
/// Highest [`Overheads::per_seq_ms`].
pub const MAX_PER_SEQ_MS: f64 = 10.0;
/// Highest [`Overheads::sched_ms`].
pub const MAX_SCHED_MS: f64 = 100.0;
/// Highest [`Overheads::allreduce_us`] (per all-reduce).
pub const MAX_ALLREDUCE_US: f64 = 1000.0;
/// Highest [`Overheads::allreduce_us_per_mib`].
pub const MAX_ALLREDUCE_US_PER_MIB: f64 = 10_000.0;
/// Most sizes an explicit CUDA-graph capture list may have.
pub const MAX_CUDA_GRAPH_SIZES: usize = 1024;
/// Largest batch an explicit CUDA-graph capture list may name.
pub const MAX_CUDA_GRAPH_SIZE: u32 = 1 << 16;

/// Which decode batch sizes run as captured CUDA graphs: a pure decode pass
/// of `b` sequences, `b` at most the largest size, runs (and is timed) at
/// the smallest captured size `>= b`; a larger batch runs eagerly, unpadded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum CudaGraph {
    /// No padding (eager, or graphs timed in the tables already).
    #[default]
    Off,
    /// vLLM's default capture list for the engine's `max_num_seqs`
    /// ([`CudaGraph::vllm_default`]), resolved when the engine is known.
    Vllm,
    /// SGLang's default capture list for the engine's
    /// `max_running_requests` and the profile's GPU memory and TP
    /// ([`CudaGraph::sglang_default`]), resolved when the engine is known.
    Sglang,
    /// These sizes, strictly increasing.
    Sizes(Vec<u32>),
}

impl CudaGraph {
    /// vLLM's default `cudagraph_capture_sizes` (`vllm/config/vllm.py`,
    /// `VllmConfig._set_cudagraph_sizes`): `max_cudagraph_capture_size`
    /// defaults to `min(max_num_seqs × 2, 512)` (no speculative tokens);
    /// the list is 1, 2, 4 up to it, then multiples of 8 below 256, then
    /// multiples of 16 from 256 up to it. vLLM also caps the size at
    /// `max_num_batched_tokens` ([`CudaGraph::vllm_with_token_budget`]);
    /// this is the list for a budget of at least 512 tokens (vLLM's
    /// defaults are 2048 and up).
    pub fn vllm_default(max_num_seqs: u32) -> CudaGraph {
        CudaGraph::vllm_with_token_budget(max_num_seqs, u32::MAX)
    }

    /// [`CudaGraph::vllm_default`] with the size capped at
    /// `max_num_batched_tokens`, as `_set_cudagraph_sizes` caps it.
    pub fn vllm_with_token_budget(max_num_seqs: u32, max_num_batched_tokens: u32) -> CudaGraph {
        let max = max_num_seqs
            .saturating_mul(2)
            .min(512)
            .min(max_num_batched_tokens)
            .max(1);
        let mut sizes: Vec<u32> = [1, 2, 4].into_iter().filter(|&s| s <= max).collect();
        sizes.extend((8..(max + 1).min(256)).step_by(8));
        if max >= 256 {
            sizes.extend((256..=max).step_by(16));
        }
        CudaGraph::Sizes(sizes)
    }

    /// SGLang's default `cuda_graph_bs` (`python/sglang/srt/server_args.py`,
    /// `ServerArgs._handle_gpu_memory_settings` for `cuda_graph_max_bs`, by
    /// GPU memory and TP, and `_generate_cuda_graph_batch_sizes` for the
    /// list: 1, 2, 4, 8, 12, multiples of 8 from 16 to 256, of 16 from 272
    /// below 512, of 32 from 512, up to the max), as
    /// `model_executor/cuda_graph_runner.py` `get_batch_sizes_to_capture`
    /// fits it to the request pool: when the list's largest size exceeds
    /// `max_running`, `max_running` is added and larger sizes dropped.
    /// `gpu_memory_gib` not positive or not finite: SGLang's fallback for an
    /// unknown GPU (`cuda_graph_max_bs` 160).
    pub fn sglang_default(max_running: u32, gpu_memory_gib: f64, tp: u32) -> CudaGraph {
        let max_bs = sglang_cuda_graph_max_bs(gpu_memory_gib, tp);
        let mut sizes: Vec<u32> = [1, 2, 4, 8, 12].to_vec();
        sizes.extend((16..=256).step_by(8));
        sizes.extend((272..512).step_by(16));
        sizes.extend((512..=max_bs.max(512)).step_by(32));
        sizes.retain(|&s| s <= max_bs);
        let pool = max_running.max(1);
        if sizes.last().is_some_and(|&s| s > pool) {
            sizes.retain(|&s| s < pool);
            sizes.push(pool);
        }
        CudaGraph::Sizes(sizes)
    }

    /// The capture list for an engine of `max_running` sequences (`None`:
    /// not capped by one; vLLM's then at 512) and `max_batched_tokens`, on
    /// `shape`'s GPU: the rules resolved, explicit sizes as given.
    pub fn resolve(
        &self,
        max_running: Option<u32>,
        max_batched_tokens: Option<u32>,
        shape: Option<&DeploymentShape>,
    ) -> Vec<u32> {
        match self {
            CudaGraph::Off => Vec::new(),
            CudaGraph::Sizes(s) => s.clone(),
            CudaGraph::Vllm => {
                let seqs = max_running.unwrap_or(256);
                sizes_of(CudaGraph::vllm_with_token_budget(
                    seqs,
                    max_batched_tokens.unwrap_or(u32::MAX),
                ))
            }
            CudaGraph::Sglang => {
                let (gib, tp) = shape.map_or((0.0, 1), |s| {
                    (s.gpu_memory_bytes as f64 / (1u64 << 30) as f64, s.tp)
                });
                sizes_of(CudaGraph::sglang_default(
                    max_running.unwrap_or(u32::MAX),
                    gib,
                    tp,
                ))
            }
        }
    }

    /// As the profile file and `--overhead cuda_graph=` spell a rule:
    /// `off`, `vllm`, `sglang`; `None` for explicit sizes.
    pub fn rule_name(&self) -> Option<&'static str> {
        match self {
            CudaGraph::Off => Some("off"),
            CudaGraph::Vllm => Some("vllm"),
            CudaGraph::Sglang => Some("sglang"),
            CudaGraph::Sizes(_) => None,
        }
    }
}

fn sizes_of(g: CudaGraph) -> Vec<u32> {
    match g {
        CudaGraph::Sizes(s) => s,
        _ => Vec::new(),
    }
}

/// `cuda_graph_max_bs` as `ServerArgs._handle_gpu_memory_settings` sets it
/// (thresholds in GiB, as SGLang's in MiB: 20, 35, 60, 90, 160).
fn sglang_cuda_graph_max_bs(gpu_memory_gib: f64, tp: u32) -> u32 {
    // (below this many GiB, max at tp < 4, max at tp >= 4).
    const TIERS: [(f64, u32, u32); 5] = [
        (20.0, 8, 8),
        (35.0, 24, 80),
        (60.0, 32, 160),
        (90.0, 256, 512),
        (160.0, 256, 512),
    ];
    if !(gpu_memory_gib.is_finite() && gpu_memory_gib > 0.0) {
        return 160;
    }
    TIERS
        .iter()
        .find(|(below, _, _)| gpu_memory_gib < *below)
        .map_or(512, |&(_, small, large)| if tp < 4 { small } else { large })
}

/// What the terms read of the deployment a profile's tables are for (its
/// file's `deployment` section).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeploymentShape {
    /// Tensor-parallel GPUs.
    pub tp: u32,
    /// Transformer layers.
    pub layers: u32,
    /// Hidden size (the width of the activations each layer all-reduces).
    pub hidden_size: u64,
    /// Memory of one GPU, bytes.
    pub gpu_memory_bytes: u64,
}

/// The step-time terms of a profile (module docs). Every one defaults to
/// off: zero, 1.0, `false`, [`CudaGraph::Off`].
#[derive(Clone, Debug, PartialEq)]
pub struct Overheads {
    /// Multiplies the table time: the kernel database's error on this GPU
    /// and engine version. A scale, not a cause. 1.0 = off; in
    /// [`KERNEL_SCALE_RANGE`].
    pub kernel_scale: f64,
    /// Per pass, work the kernels leave out and the engine does not hide
    /// (input preparation, sampler launch, the exposed part of output
    /// processing), ms; at most [`MAX_STEP_MS`].
    pub step_ms: f64,
    /// Per sequence in the pass (decodes plus prefill chunks): sampling,
    /// stop checks, detokenization, ms; at most [`MAX_PER_SEQ_MS`].
    pub per_seq_ms: f64,
    /// CPU scheduling per pass, ms, hidden behind the GPU when
    /// [`Overheads::async_scheduling`] is on; at most [`MAX_SCHED_MS`].
    pub sched_ms: f64,
    /// On: a pass takes `max(gpu, sched_ms)` (vLLM's
    /// `vllm/v1/engine/core.py` `EngineCore.step_with_batch_queue`, chosen
    /// when `SchedulerConfig.async_scheduling` in `vllm/config/scheduler.py`
    /// is on, which `VllmConfig.__post_init__` makes the default when
    /// unset in recent versions; SGLang's overlap scheduler,
    /// `srt/managers/scheduler.py` `event_loop_overlap`, on by default).
    /// Off: `gpu + sched_ms` (`EngineCore.step`; SGLang's
    /// `event_loop_normal`).
    pub async_scheduling: bool,
    /// Decode batch padding to captured CUDA-graph sizes.
    pub cuda_graph: CudaGraph,
    /// Extra time of one TP all-reduce beyond what the tables hold, µs;
    /// two per layer per pass, only when tp > 1; at most
    /// [`MAX_ALLREDUCE_US`].
    pub allreduce_us: f64,
    /// Extra all-reduce time per MiB all-reduced (tokens × hidden × 2
    /// bytes), µs; at most [`MAX_ALLREDUCE_US_PER_MIB`].
    pub allreduce_us_per_mib: f64,
}

impl Default for Overheads {
    fn default() -> Self {
        Overheads {
            kernel_scale: 1.0,
            step_ms: 0.0,
            per_seq_ms: 0.0,
            sched_ms: 0.0,
            async_scheduling: false,
            cuda_graph: CudaGraph::Off,
            allreduce_us: 0.0,
            allreduce_us_per_mib: 0.0,
        }
    }
}

/// One term of [`Overheads`], as the profile file and `--overhead` name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Term {
    /// [`Overheads::kernel_scale`].
    KernelScale,
    /// [`Overheads::step_ms`].
    StepMs,
    /// [`Overheads::per_seq_ms`].
    PerSeqMs,
    /// [`Overheads::sched_ms`].
    SchedMs,
    /// [`Overheads::async_scheduling`].
    AsyncScheduling,
    /// [`Overheads::cuda_graph`].
    CudaGraph,
    /// [`Overheads::allreduce_us`].
    AllreduceUs,
    /// [`Overheads::allreduce_us_per_mib`].
    AllreduceUsPerMib,
}

impl Term {
    /// Every term, in the order the file lists them.
    pub const ALL: [Term; 8] = [
        Term::KernelScale,
        Term::StepMs,
        Term::PerSeqMs,
        Term::SchedMs,
        Term::AsyncScheduling,
        Term::CudaGraph,
        Term::AllreduceUs,
        Term::AllreduceUsPerMib,
    ];

    /// Its name in the file and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Term::KernelScale => "kernel_scale",
            Term::StepMs => "step_ms",
            Term::PerSeqMs => "per_seq_ms",
            Term::SchedMs => "sched_ms",
            Term::AsyncScheduling => "async_scheduling",
            Term::CudaGraph => "cuda_graph",
            Term::AllreduceUs => "allreduce_us",
            Term::AllreduceUsPerMib => "allreduce_us_per_mib",
        }
    }

    /// The term named `name`.
    pub fn from_name(name: &str) -> Option<Term> {
        Term::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The range a numeric term's value must lie in; `None` for the flag
    /// and the capture list.
    pub fn range(self) -> Option<(f64, f64)> {
        match self {
            Term::KernelScale => Some(KERNEL_SCALE_RANGE),
            Term::StepMs => Some((0.0, MAX_STEP_MS)),
            Term::PerSeqMs => Some((0.0, MAX_PER_SEQ_MS)),
            Term::SchedMs => Some((0.0, MAX_SCHED_MS)),
            Term::AllreduceUs => Some((0.0, MAX_ALLREDUCE_US)),
            Term::AllreduceUsPerMib => Some((0.0, MAX_ALLREDUCE_US_PER_MIB)),
            Term::AsyncScheduling | Term::CudaGraph => None,
        }
    }
}

/// A value for one term.
#[derive(Clone, Debug, PartialEq)]
pub enum TermValue {
    /// A numeric term's value.
    Number(f64),
    /// `async_scheduling`.
    Flag(bool),
    /// `cuda_graph`.
    Graph(CudaGraph),
}

/// What is wrong with a term.
#[derive(Clone, Debug, PartialEq)]
pub enum OverheadErrorKind {
    /// A number outside the term's range (or not finite).
    OutOfRange {
        /// The value given.
        value: f64,
        /// Lowest allowed.
        min: f64,
        /// Highest allowed.
        max: f64,
    },
    /// A value of the wrong kind for the term (what it takes).
    WrongKind(&'static str),
    /// An explicit capture list that is empty, longer than
    /// [`MAX_CUDA_GRAPH_SIZES`], or whose entry `index` is not in
    /// `1..=MAX_CUDA_GRAPH_SIZE` and above the one before.
    Sizes {
        /// The offending entry (the length for an empty or long list).
        index: usize,
    },
    /// The all-reduce terms need the profile's deployment (layers, hidden
    /// size, TP), which it does not record.
    NeedsDeployment,
}

/// A refused term, naming it.
#[derive(Clone, Debug, PartialEq)]
pub enum OverheadError {
    /// No term has this name.
    UnknownTerm(String),
    /// The term's value is refused.
    Invalid {
        /// The term.
        term: Term,
        /// Why.
        kind: OverheadErrorKind,
    },
}

impl std::fmt::Display for OverheadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (term, kind) = match self {
            OverheadError::UnknownTerm(name) => {
                let names: Vec<_> = Term::ALL.iter().map(|t| t.name()).collect();
                return write!(
                    f,
                    "`{name}`: no such term (expected one of {})",
                    names.join(", ")
                );
            }
            OverheadError::Invalid { term, kind } => (term.name(), kind),
        };
        match kind {
            OverheadErrorKind::OutOfRange { value, min, max } => {
                write!(f, "{term}: {value} is not in [{min}, {max}]")
            }
            OverheadErrorKind::WrongKind(what) => write!(f, "{term}: expected {what}"),
            OverheadErrorKind::Sizes { index } => write!(
                f,
                "{term}: sizes must be 1..={MAX_CUDA_GRAPH_SIZES} whole numbers in \
                 1..={MAX_CUDA_GRAPH_SIZE}, strictly increasing (entry {index})"
            ),
            OverheadErrorKind::NeedsDeployment => write!(
                f,
                "{term}: needs the profile's deployment (layers, hidden_size, tp), which it does not record"
            ),
        }
    }
}

impl std::error::Error for OverheadError {}

impl Overheads {
    /// Whether every term is at its default (nothing to report).
    pub fn is_off(&self) -> bool {
        *self == Overheads::default()
    }

    /// Sets `term` to `value`, unchecked ([`Overheads::check`] checks).
    pub fn set(&mut self, term: Term, value: TermValue) -> Result<(), OverheadError> {
        let wrong = |what| OverheadError::Invalid {
            term,
            kind: OverheadErrorKind::WrongKind(what),
        };
        match (term, value) {
            (Term::AsyncScheduling, TermValue::Flag(b)) => self.async_scheduling = b,
            (Term::AsyncScheduling, _) => return Err(wrong("true or false")),
            (Term::CudaGraph, TermValue::Graph(g)) => self.cuda_graph = g,
            (Term::CudaGraph, _) => {
                return Err(wrong(
                    "\"off\", \"vllm\", \"sglang\" or a list of batch sizes",
                ))
            }
            (t, TermValue::Number(v)) => match self.number_mut(t) {
                Some(slot) => *slot = v,
                None => return Err(wrong("a number")),
            },
            (_, _) => return Err(wrong("a number")),
        }
        Ok(())
    }

    fn number_mut(&mut self, term: Term) -> Option<&mut f64> {
        match term {
            Term::KernelScale => Some(&mut self.kernel_scale),
            Term::StepMs => Some(&mut self.step_ms),
            Term::PerSeqMs => Some(&mut self.per_seq_ms),
            Term::SchedMs => Some(&mut self.sched_ms),
            Term::AllreduceUs => Some(&mut self.allreduce_us),
            Term::AllreduceUsPerMib => Some(&mut self.allreduce_us_per_mib),
            Term::AsyncScheduling | Term::CudaGraph => None,
        }
    }

    /// The value of numeric `term` (`None` for the flag and the list).
    pub fn number(&self, term: Term) -> Option<f64> {
        match term {
            Term::KernelScale => Some(self.kernel_scale),
            Term::StepMs => Some(self.step_ms),
            Term::PerSeqMs => Some(self.per_seq_ms),
            Term::SchedMs => Some(self.sched_ms),
            Term::AllreduceUs => Some(self.allreduce_us),
            Term::AllreduceUsPerMib => Some(self.allreduce_us_per_mib),
            Term::AsyncScheduling | Term::CudaGraph => None,
        }
    }

    /// Parses `TERM=VALUE` (`--overhead`): a number, `true`/`false` for
    /// `async_scheduling`, and for `cuda_graph` `off`, `vllm`, `sglang` or
    /// sizes separated by commas. Sets the term, unchecked.
    pub fn assign(&mut self, assignment: &str) -> Result<Term, OverheadError> {
        let (name, text) = assignment.split_once('=').unwrap_or((assignment, ""));
        let term = Term::from_name(name.trim())
            .ok_or_else(|| OverheadError::UnknownTerm(name.trim().to_string()))?;
        let text = text.trim();
        let wrong = |what| OverheadError::Invalid {
            term,
            kind: OverheadErrorKind::WrongKind(what),
        };
        let value = match term {
            Term::AsyncScheduling => match text {
                "true" | "on" => TermValue::Flag(true),
                "false" | "off" => TermValue::Flag(false),
                _ => return Err(wrong("true or false")),
            },
            Term::CudaGraph => match text {
                "off" => TermValue::Graph(CudaGraph::Off),
                "vllm" => TermValue::Graph(CudaGraph::Vllm),
                "sglang" => TermValue::Graph(CudaGraph::Sglang),
                list => TermValue::Graph(CudaGraph::Sizes(parse_sizes(term, list)?)),
            },
            _ => TermValue::Number(text.parse::<f64>().map_err(|_| wrong("a number"))?),
        };
        self.set(term, value)?;
        Ok(term)
    }

    /// Checks every term: numbers in their ranges, an explicit capture list
    /// well formed, and all-reduce terms only on a profile that records its
    /// deployment (`shape`).
    pub fn check(&self, shape: Option<&DeploymentShape>) -> Result<(), OverheadError> {
        for term in Term::ALL {
            let (Some(v), Some((min, max))) = (self.number(term), term.range()) else {
                continue;
            };
            if !(v.is_finite() && (min..=max).contains(&v)) {
                return Err(OverheadError::Invalid {
                    term,
                    kind: OverheadErrorKind::OutOfRange { value: v, min, max },
                });
            }
        }
        if let CudaGraph::Sizes(s) = &self.cuda_graph {
            check_sizes(s).map_err(|index| OverheadError::Invalid {
                term: Term::CudaGraph,
                kind: OverheadErrorKind::Sizes { index },
            })?;
        }
        if shape.is_none() {
            for term in [Term::AllreduceUs, Term::AllreduceUsPerMib] {
                if self.number(term) != Some(0.0) {
                    return Err(OverheadError::Invalid {
                        term,
                        kind: OverheadErrorKind::NeedsDeployment,
                    });
                }
            }
        }
        Ok(())
    }
}

fn parse_sizes(term: Term, list: &str) -> Result<Vec<u32>, OverheadError> {
    let bad = |index| OverheadError::Invalid {
        term,
        kind: OverheadErrorKind::Sizes { index },
    };
    let mut out = Vec::new();
    for (i, part) in list.split(',').enumerate() {
        if i >= MAX_CUDA_GRAPH_SIZES {
            return Err(bad(i));
        }
        out.push(part.trim().parse::<u32>().map_err(|_| bad(i))?);
    }
    Ok(out)
}

/// `Err(index)` of the first bad entry (the length when empty or too long).
pub fn check_sizes(sizes: &[u32]) -> Result<(), usize> {
    if sizes.is_empty() || sizes.len() > MAX_CUDA_GRAPH_SIZES {
        return Err(sizes.len());
    }
    for (i, &s) in sizes.iter().enumerate() {
        if s == 0 || s > MAX_CUDA_GRAPH_SIZE || (i > 0 && s <= sizes[i - 1]) {
            return Err(i);
        }
    }
    Ok(())
}

/// The terms as one model applies them: rules resolved for its engine,
/// all-reduce folded into per-pass and per-token costs. Built only when a
/// term changes some time ([`Applied::new`] is `None` otherwise).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Applied {
    kernel_scale: f64,
    step_ms: f64,
    per_seq_ms: f64,
    sched_ms: f64,
    async_scheduling: bool,
    /// Captured sizes, increasing; empty: no padding.
    sizes: Vec<u32>,
    /// All-reduce ms per pass: 2 × layers × allreduce_us / 1000 (tp > 1).
    allreduce_ms: f64,
    /// All-reduce ms per token: 2 × layers × MiB(hidden × 2 bytes) ×
    /// allreduce_us_per_mib / 1000 (tp > 1).
    allreduce_ms_per_token: f64,
}

impl Applied {
    /// `o` for an engine of `max_running` sequences and
    /// `max_batched_tokens`, on `shape`; `None` when no term changes a
    /// time (then the model takes the table path).
    pub(crate) fn new(
        o: &Overheads,
        shape: Option<&DeploymentShape>,
        max_running: Option<u32>,
        max_batched_tokens: Option<u32>,
    ) -> Option<Box<Applied>> {
        let sizes = o.cuda_graph.resolve(max_running, max_batched_tokens, shape);
        let (allreduce_ms, allreduce_ms_per_token) = match shape {
            Some(s) if s.tp > 1 => {
                let per_pass = 2.0 * f64::from(s.layers);
                let mib_per_token = s.hidden_size as f64 * 2.0 / (1u64 << 20) as f64;
                (
                    per_pass * o.allreduce_us / 1000.0,
                    per_pass * mib_per_token * o.allreduce_us_per_mib / 1000.0,
                )
            }
            _ => (0.0, 0.0),
        };
        let changes = o.kernel_scale != 1.0
            || o.step_ms != 0.0
            || o.per_seq_ms != 0.0
            || o.sched_ms != 0.0
            || !sizes.is_empty()
            || allreduce_ms != 0.0
            || allreduce_ms_per_token != 0.0;
        changes.then(|| {
            Box::new(Applied {
                kernel_scale: o.kernel_scale,
                step_ms: o.step_ms,
                per_seq_ms: o.per_seq_ms,
                sched_ms: o.sched_ms,
                async_scheduling: o.async_scheduling,
                sizes,
                allreduce_ms,
                allreduce_ms_per_token,
            })
        })
    }

    /// The batch a pure decode pass of `batch` runs at: the smallest
    /// captured size `>= batch`, or `batch` past the largest (eager).
    pub(crate) fn padded(&self, batch: u64) -> u64 {
        match self.sizes.last() {
            Some(&max) if batch <= u64::from(max) => {
                let i = self.sizes.partition_point(|&s| u64::from(s) < batch);
                u64::from(self.sizes[i])
            }
            _ => batch,
        }
    }

    /// The pass the tables are looked up at: a pure decode pass at its
    /// padded batch with the same total context (so a per-sequence axis
    /// reads `total / padded`), any other pass as it is.
    pub(crate) fn table_pass(&self, pass: &Pass) -> Pass {
        if pass.prefill_tokens != 0 || pass.decode_batch == 0 || self.sizes.is_empty() {
            return *pass;
        }
        Pass {
            decode_batch: self.padded(pass.decode_batch),
            ..*pass
        }
    }

    /// The pass's time in ms from its table time (looked up at
    /// `looked`, [`Applied::table_pass`]): the module docs' formula.
    /// Non-decreasing in `table_ms` and in the pass's work.
    pub(crate) fn finish(&self, table_ms: f64, pass: &Pass, looked: &Pass) -> f64 {
        // A pass with prefill tokens has at least one chunk, whoever built it.
        let chunks = pass.prefill_seqs.max(u64::from(pass.prefill_tokens > 0));
        let seqs = (pass.decode_batch + chunks) as f64;
        let tokens = (looked.prefill_tokens + looked.decode_batch) as f64;
        let gpu = self.kernel_scale * table_ms
            + self.step_ms
            + self.per_seq_ms * seqs
            + (self.allreduce_ms + self.allreduce_ms_per_token * tokens);
        if self.async_scheduling {
            gpu.max(self.sched_ms)
        } else {
            gpu + self.sched_ms
        }
    }
}

use crate::{scaled_ms, Pass, PerfModel, ProfilePerf};
use handoff_core::Duration;

impl ProfilePerf {
    /// [`PerfModel::pass`] with the terms `t` in force (the table path's
    /// counting, at the padded pass).
    pub(crate) fn time_with(&self, t: &Applied, pass: &Pass, count: bool) -> Duration {
        let looked = t.table_pass(pass);
        let (ms, past) = self.profile.pass_ms_near(&looked, &self.near);
        if count {
            self.count_past(past);
        }
        let ms = t.finish(ms, pass, &looked);
        scaled_ms(ms, self.speedup_ratio).max(Duration::from_micros(1))
    }

    /// [`PerfModel::decode_run`] pass by pass, with the terms `t`.
    pub(crate) fn decode_run_with(
        &self,
        t: &Applied,
        (batch, first_context, pool_tokens): (u64, u64, u64),
        max: u64,
        take: &mut dyn FnMut(Duration) -> bool,
    ) -> u64 {
        let mut k = 0;
        while k < max {
            let pass = Pass::decode(batch, first_context + batch * k, pool_tokens);
            let time = if batch == 0 {
                Duration::ZERO
            } else {
                self.time_with(t, &pass, false)
            };
            if !take(time) {
                break;
            }
            k += 1;
        }
        k
    }

    /// [`PerfModel::stable_decode_floor`] with the terms `t`: the least
    /// table time over the run's contexts at the padded batch, finished
    /// as every pass is (monotone in the table time, the other terms fixed
    /// by the batch), less a nanosecond, `passes` times.
    pub(crate) fn floor_with(
        &self,
        t: &Applied,
        (batch, first_context, passes): (u64, u64, u64),
        pool_tokens: u64,
    ) -> Duration {
        if passes == 0 || batch == 0 {
            return Duration::ZERO;
        }
        let first = Pass::decode(batch, first_context, pool_tokens);
        let looked = t.table_pass(&first);
        let padded = looked.decode_batch;
        let last_context = first_context.saturating_add(batch.saturating_mul(passes - 1));
        let y = |context: u64| match self.profile.decode_axis() {
            crate::DecodeAxis::TotalContext => context as f64,
            crate::DecodeAxis::ContextPerSequence => context as f64 / padded as f64,
        };
        let table = self.profile.decode_table().min_along_y_near(
            padded as f64,
            (y(first_context), y(last_context)),
            self.profile.beyond_grid(),
            &self.near[1],
        );
        let one = scaled_ms(t.finish(table, &first, &looked), self.speedup_ratio)
            .saturating_sub(Duration::from_nanos(1))
            .max(Duration::from_micros(1));
        one.saturating_mul(u32::try_from(passes).unwrap_or(u32::MAX))
    }

    /// [`PerfModel::count_decode_run`] pass by pass, at the padded passes.
    pub(crate) fn count_run_with(
        &self,
        (batch, first_context, pool_tokens, passes): (u64, u64, u64, u64),
    ) {
        for k in 0..passes {
            self.count_pass(&Pass::decode(batch, first_context + batch * k, pool_tokens));
        }
    }
}

#[cfg(test)]
#[path = "overhead_tests.rs"]
mod tests;
