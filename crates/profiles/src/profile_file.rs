//! Step-time profile files (`--perf profile:FILE`): JSON read into a checked
//! [`handoff_perf::PerfProfile`].
//!
//! The format (times in ms; `ms[i][j]` is the time at the first axis's
//! `i`-th point and the second axis's `j`-th; `profiles/README.md` has an
//! annotated example):
//!
//! ```json
//! {
//!   "name": "qwen3-4b-a100-sglang",
//!   "description": "what ran (optional)",
//!   "source": "where the measurements come from",
//!   "derivation": "how the tables were made from them (optional)",
//!   "pass_overhead_ms": 7.2,
//!   "prefill": { "new_tokens": [1, 1024], "cached_tokens": [0, 4096],
//!                "ms": [[11.4, 11.5], [40.9, 51.6]] },
//!   "decode": { "batch": [1, 64], "context_tokens": [1024, 65536],
//!               "ms": [[7.9, 12.0], [8.4, 16.3]] }
//! }
//! ```
//!
//! Profiles exported from AIConfigurator (`profiles/aic/`) add optional
//! keys: `license`; `beyond_grid` (`"extrapolate"`, the default, or
//! `"clamp"`: lookups past the grid hold its edge and are counted);
//! `non_decreasing` (default `true`; `false` keeps the tables as given,
//! and needs `"clamp"`); decode's `context_per_sequence` axis instead of
//! `context_tokens`; `deployment` (the model, GPU, TP and engine the tables
//! are for: [`ModelOnGpu`]; a mixture of experts at attention DP or expert
//! parallelism adds its `parallel` layout, `kv_bytes_per_token_per_rank`
//! and `expert_weight_bytes`: [`ParallelLayout`]); and `checks`, the exporter's own predictions
//! at probe shapes (`[new, cached, ms]` prefills, `[batch, context per
//! sequence, ms]` decodes) that tests compare the lookups against.
//!
//! Any profile may carry `overheads`, the step-time terms the tables leave
//! out ([`handoff_perf::Overheads`], docs/step-time-terms.md): an object
//! with any of `kernel_scale`, `step_ms`, `per_seq_ms`, `sched_ms`,
//! `allreduce_us`, `allreduce_us_per_mib` (numbers, range-checked),
//! `async_scheduling` (a boolean) and `cuda_graph` (`"off"`, `"vllm"`,
//! `"sglang"` or an array of batch sizes). Absent, every term is off.
//! [`overheads_json`] writes the section and [`with_overheads`] adds it to
//! a profile's text (what `calibrate` writes).
//!
//! Unknown keys are refused. Syntax errors name the line and column;
//! table errors name the table, field and cell ([`ProfileError`]).

use crate::hardware::{ModelOnGpu, ParallelLayout};
use handoff_core::Backend;
use handoff_perf::PerfTable;
use handoff_perf::ProfileError;
use handoff_perf::TableKind;
use handoff_perf::{DecodeAxis, TableShape};
use handoff_perf::{Overheads, PerfProfile};
use serde::Deserialize;
use std::io::Read;
use std::path::Path;

mod overheads;
use overheads::{e_term, overheads, term_key};
pub use overheads::{overheads_json, shape_of, with_overheads, OVERHEADS_DECIMALS};

/// Largest profile file read (checked before reading).
pub const MAX_PROFILE_BYTES: u64 = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    name: String,
    #[serde(default)]
    #[allow(dead_code)]
    description: String,
    source: String,
    #[serde(default)]
    #[allow(dead_code)]
    derivation: String,
    #[serde(default)]
    #[allow(dead_code)]
    license: String,
    #[serde(default)]
    deployment: Option<DeploymentFile>,
    #[serde(default)]
    beyond_grid: BeyondGridFile,
    #[serde(default = "yes")]
    non_decreasing: bool,
    pass_overhead_ms: f64,
    prefill: PrefillFile,
    decode: DecodeFile,
    #[serde(default)]
    checks: ChecksFile,
    #[serde(default)]
    overheads: Option<serde_json::Map<String, serde_json::Value>>,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum BeyondGridFile {
    #[default]
    Extrapolate,
    Clamp,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum BackendFile {
    Vllm,
    Sglang,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeploymentFile {
    backend: BackendFile,
    backend_version: String,
    gpu: String,
    gpu_memory_bytes: u64,
    tp: u32,
    model: String,
    hf_id: String,
    layers: u32,
    kv_heads: u32,
    head_dim: u32,
    kv_dtype_bytes: u32,
    weight_bytes: u64,
    max_context: u64,
    hidden_size: u64,
    active_intermediate_size: u64,
    vocab_size: u64,
    #[serde(default)]
    parallel: Option<ParallelFile>,
    #[serde(default)]
    kv_bytes_per_token_per_rank: Option<u64>,
    #[serde(default)]
    expert_weight_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ParallelFile {
    tp: u32,
    attention_dp: u32,
    moe_tp: u32,
    moe_ep: u32,
}

/// Largest KV cell (bytes of one token on one rank) a file may record.
pub const MAX_KV_BYTES_PER_TOKEN_PER_RANK: u64 = 1 << 26;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ChecksFile {
    #[serde(default)]
    prefill: Vec<[f64; 3]>,
    #[serde(default)]
    decode: Vec<[f64; 3]>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PrefillFile {
    new_tokens: Vec<f64>,
    cached_tokens: Vec<f64>,
    ms: Vec<Vec<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DecodeFile {
    batch: Vec<f64>,
    #[serde(default)]
    context_tokens: Option<Vec<f64>>,
    #[serde(default)]
    context_per_sequence: Option<Vec<f64>>,
    ms: Vec<Vec<f64>>,
}

/// Most probe checks a profile may carry, per table.
pub const MAX_CHECKS: usize = 256;

/// One probe: the exporter's prediction at a shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Check {
    /// Prefill: new tokens; decode: batch.
    pub x: u64,
    /// Prefill: cached tokens; decode: context tokens per sequence.
    pub y: u64,
    /// The predicted time, ms.
    pub ms: f64,
}

/// A profile with what the file says beside its tables.
#[derive(Clone, Debug)]
pub struct ProfileFile {
    /// The checked tables.
    pub profile: PerfProfile,
    /// The model, GPU, TP and engine the tables are for, if recorded.
    pub deployment: Option<ModelOnGpu>,
    /// Prefill probes (`x` new after `y` cached tokens).
    pub prefill_checks: Vec<Check>,
    /// Decode probes (`x` sequences at `y` context tokens each).
    pub decode_checks: Vec<Check>,
    /// The file's `overheads` section, if it has one (also in force in
    /// [`ProfileFile::profile`]).
    pub overheads: Option<Overheads>,
}

/// Why a profile file was refused.
#[derive(Debug)]
pub enum ProfileFileErrorKind {
    /// The file could not be read.
    Io(std::io::Error),
    /// The file is larger than [`MAX_PROFILE_BYTES`].
    TooLarge {
        /// Its size in bytes.
        bytes: u64,
    },
    /// Not JSON of the documented shape, at a 1-based line and column.
    Syntax {
        /// Line.
        line: usize,
        /// Column.
        column: usize,
        /// serde_json's description.
        message: String,
    },
    /// Well-formed, but a table or field is invalid.
    Invalid(ProfileError),
    /// A field outside the tables is out of range or contradicts another.
    Field {
        /// The field, as the file spells it.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

/// A refused profile file, with its path.
#[derive(Debug)]
pub struct ProfileFileError {
    /// The file, as given.
    pub path: String,
    /// What is wrong.
    pub kind: ProfileFileErrorKind,
}

impl std::fmt::Display for ProfileFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            ProfileFileErrorKind::Io(e) => write!(f, "{}: {e}", self.path),
            ProfileFileErrorKind::TooLarge { bytes } => write!(
                f,
                "{}: {bytes} bytes, more than the {MAX_PROFILE_BYTES} a profile may have",
                self.path
            ),
            ProfileFileErrorKind::Syntax {
                line,
                column,
                message,
            } => write!(f, "{}:{line}:{column}: {message}", self.path),
            ProfileFileErrorKind::Invalid(e) => write!(f, "{}: {e}", self.path),
            ProfileFileErrorKind::Field { field, message } => {
                write!(f, "{}: {field}: {message}", self.path)
            }
        }
    }
}

impl std::error::Error for ProfileFileError {}

/// Reads and checks the profile at `path`.
pub fn load(path: &Path) -> Result<PerfProfile, ProfileFileError> {
    load_file(path).map(|f| f.profile)
}

/// Reads and checks the profile at `path`, with its deployment and checks.
pub fn load_file(path: &Path) -> Result<ProfileFile, ProfileFileError> {
    let shown = path.display().to_string();
    let err = |kind| ProfileFileError {
        path: shown.clone(),
        kind,
    };
    let file = std::fs::File::open(path).map_err(|e| err(ProfileFileErrorKind::Io(e)))?;
    let bytes = file
        .metadata()
        .map_err(|e| err(ProfileFileErrorKind::Io(e)))?
        .len();
    if bytes > MAX_PROFILE_BYTES {
        return Err(err(ProfileFileErrorKind::TooLarge { bytes }));
    }
    let mut text = String::new();
    file.take(MAX_PROFILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| err(ProfileFileErrorKind::Io(e)))?;
    if text.len() as u64 > MAX_PROFILE_BYTES {
        return Err(err(ProfileFileErrorKind::TooLarge {
            bytes: text.len() as u64,
        }));
    }
    parse_file(&text, &shown)
}

/// Parses and checks a profile's text; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<PerfProfile, ProfileFileError> {
    parse_file(text, origin).map(|f| f.profile)
}

/// [`parse`], keeping the deployment and checks.
pub fn parse_file(text: &str, origin: &str) -> Result<ProfileFile, ProfileFileError> {
    let err = |kind| ProfileFileError {
        path: origin.to_string(),
        kind,
    };
    if text.len() as u64 > MAX_PROFILE_BYTES {
        return Err(err(ProfileFileErrorKind::TooLarge {
            bytes: text.len() as u64,
        }));
    }
    let f: File = serde_json::from_str(text).map_err(|e| {
        err(ProfileFileErrorKind::Syntax {
            line: e.line(),
            column: e.column(),
            message: e.to_string(),
        })
    })?;
    let invalid = |e| err(ProfileFileErrorKind::Invalid(e));
    let field = |field, message: String| err(ProfileFileErrorKind::Field { field, message });
    let shape = if f.non_decreasing {
        TableShape::NonDecreasing
    } else {
        TableShape::AsGiven
    };
    let prefill = PerfTable::with_shape(
        TableKind::Prefill,
        ("new_tokens", "cached_tokens"),
        f.prefill.new_tokens,
        f.prefill.cached_tokens,
        &f.prefill.ms,
        shape,
    )
    .map_err(invalid)?;
    let (axis, context) = match (f.decode.context_tokens, f.decode.context_per_sequence) {
        (Some(c), None) => (DecodeAxis::TotalContext, c),
        (None, Some(c)) => (DecodeAxis::ContextPerSequence, c),
        _ => {
            return Err(field(
                "decode",
                "needs exactly one of context_tokens and context_per_sequence".into(),
            ))
        }
    };
    let decode = PerfTable::with_shape(
        TableKind::Decode,
        ("batch", axis.name()),
        f.decode.batch,
        context,
        &f.decode.ms,
        shape,
    )
    .map_err(invalid)?;
    let build = match f.beyond_grid {
        BeyondGridFile::Extrapolate => PerfProfile::new,
        BeyondGridFile::Clamp => PerfProfile::clamped,
    };
    let mut profile = build(f.name, f.source, prefill, decode, f.pass_overhead_ms)
        .map_err(invalid)?
        .with_decode_axis(axis);
    let deployment = f
        .deployment
        .map(deployment)
        .transpose()
        .map_err(|(k, m)| field(k, m))?;
    if let Some(d) = &deployment {
        profile = profile.with_shape(shape_of(d));
    }
    let section = match &f.overheads {
        Some(section) => {
            let o = overheads(section).map_err(|(k, m)| field(k, m))?;
            profile = profile
                .with_overheads(o.clone())
                .map_err(|e| field(term_key(e_term(&e)), e.to_string()))?;
            Some(o)
        }
        None => None,
    };
    let prefill_checks =
        checks(&f.checks.prefill, "checks.prefill").map_err(|(k, m)| field(k, m))?;
    let decode_checks = checks(&f.checks.decode, "checks.decode").map_err(|(k, m)| field(k, m))?;
    Ok(ProfileFile {
        profile,
        deployment,
        prefill_checks,
        decode_checks,
        overheads: section,
    })
}

/// The deployment section, range-checked (every count positive, the TP a
/// GPU count a node holds, the weights smaller than the GPUs).
fn deployment(d: DeploymentFile) -> Result<ModelOnGpu, (&'static str, String)> {
    let positive = [
        ("deployment.gpu_memory_bytes", d.gpu_memory_bytes),
        ("deployment.layers", u64::from(d.layers)),
        ("deployment.kv_heads", u64::from(d.kv_heads)),
        ("deployment.head_dim", u64::from(d.head_dim)),
        ("deployment.weight_bytes", d.weight_bytes),
        ("deployment.max_context", d.max_context),
        ("deployment.hidden_size", d.hidden_size),
        (
            "deployment.active_intermediate_size",
            d.active_intermediate_size,
        ),
        ("deployment.vocab_size", d.vocab_size),
    ];
    if let Some((k, _)) = positive.iter().find(|(_, v)| *v == 0) {
        return Err((k, "must be positive".into()));
    }
    if !(1..=64).contains(&d.tp) {
        return Err(("deployment.tp", format!("{}: must be 1..=64", d.tp)));
    }
    if !(1..=8).contains(&d.kv_dtype_bytes) {
        return Err((
            "deployment.kv_dtype_bytes",
            format!("{}: must be 1..=8", d.kv_dtype_bytes),
        ));
    }
    if d.head_dim > 4096 || d.layers > 4096 || d.kv_heads > 4096 {
        return Err((
            "deployment",
            "layers, kv_heads and head_dim must be at most 4096".into(),
        ));
    }
    if d.model.is_empty() || d.gpu.is_empty() {
        return Err(("deployment", "model and gpu must be named".into()));
    }
    let parallel = d.parallel.map(|p| ParallelLayout {
        tp: p.tp,
        attention_dp: p.attention_dp,
        moe_tp: p.moe_tp,
        moe_ep: p.moe_ep,
    });
    if let Some(p) = parallel {
        p.check().map_err(|m| ("deployment.parallel", m))?;
        if p.tp != d.tp {
            return Err((
                "deployment.parallel.tp",
                format!("{} but deployment.tp is {}", p.tp, d.tp),
            ));
        }
    }
    if let Some(b) = d
        .kv_bytes_per_token_per_rank
        .filter(|b| !(1..=MAX_KV_BYTES_PER_TOKEN_PER_RANK).contains(b))
    {
        return Err((
            "deployment.kv_bytes_per_token_per_rank",
            format!("{b}: must be 1..={MAX_KV_BYTES_PER_TOKEN_PER_RANK}"),
        ));
    }
    let experts = d.expert_weight_bytes.unwrap_or(0);
    if experts > d.weight_bytes {
        return Err((
            "deployment.expert_weight_bytes",
            format!("{experts}: more than weight_bytes {}", d.weight_bytes),
        ));
    }
    Ok(ModelOnGpu {
        backend: match d.backend {
            BackendFile::Vllm => Backend::Vllm,
            BackendFile::Sglang => Backend::Sglang,
        },
        backend_version: d.backend_version,
        model: d.model,
        hf_id: d.hf_id,
        gpu: d.gpu,
        gpu_memory_bytes: d.gpu_memory_bytes,
        tp: d.tp,
        layers: d.layers,
        kv_heads: d.kv_heads,
        head_dim: d.head_dim,
        kv_dtype_bytes: d.kv_dtype_bytes,
        weight_bytes: d.weight_bytes,
        max_context: d.max_context,
        hidden_size: d.hidden_size,
        active_intermediate_size: d.active_intermediate_size,
        vocab_size: d.vocab_size,
        parallel,
        recorded_kv_bytes_per_rank: d.kv_bytes_per_token_per_rank,
        expert_weight_bytes: experts,
    })
}

/// Probe rows `[x, y, ms]`: x a positive whole count, y a whole count, ms a
/// positive finite time; at most [`MAX_CHECKS`].
fn checks(rows: &[[f64; 3]], name: &'static str) -> Result<Vec<Check>, (&'static str, String)> {
    if rows.len() > MAX_CHECKS {
        return Err((name, format!("{} rows, at most {MAX_CHECKS}", rows.len())));
    }
    let count = |v: f64| (v.fract() == 0.0 && (0.0..=1e12).contains(&v)).then_some(v as u64);
    rows.iter()
        .enumerate()
        .map(|(i, &[x, y, ms])| match (count(x), count(y)) {
            (Some(x), Some(y)) if x > 0 && ms.is_finite() && ms > 0.0 => Ok(Check { x, y, ms }),
            _ => Err((
                name,
                format!("row {i}: needs [count >= 1, count >= 0, time > 0]"),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use handoff_perf::{BeyondGrid, ProfileErrorKind};

    pub(super) const OK: &str = r#"{
  "name": "t", "source": "s", "pass_overhead_ms": 5,
  "prefill": {"new_tokens": [1, 100], "cached_tokens": [0], "ms": [[10], [20]]},
  "decode": {"batch": [1], "context_tokens": [0, 1000], "ms": [[6, 9]]}
}"#;

    #[test]
    fn parses_the_documented_shape() {
        let p = parse(OK, "t.json").unwrap();
        assert_eq!(p.name(), "t");
        assert_eq!(p.prefill_table().at(50.5, 0.0), 15.0);
        assert_eq!(p.pass_overhead_ms(), 5.0);
    }

    #[test]
    fn errors_are_located() {
        let bad = OK.replace("\"ms\": [[10], [20]]", "\"ms\": [[10], [20,]]");
        let e = parse(&bad, "t.json").unwrap_err();
        assert!(
            matches!(e.kind, ProfileFileErrorKind::Syntax { line: 3, .. }),
            "{e}"
        );
        assert!(e.to_string().starts_with("t.json:3:"), "{e}");
        let e = parse(&OK.replace("\"source\"", "\"sauce\""), "t.json").unwrap_err();
        assert!(e.to_string().contains("sauce"), "{e}");
        let e = parse(&OK.replace("[[6, 9]]", "[[6, 4]]"), "t.json").unwrap_err();
        match &e.kind {
            ProfileFileErrorKind::Invalid(p) => {
                assert_eq!(p.table, Some(TableKind::Decode));
                assert_eq!(p.kind, ProfileErrorKind::Decreasing { row: 0, col: 1 });
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            e.to_string(),
            "t.json: decode.ms: [0][1] is below the value before it (tables must be non-decreasing)"
        );
        let e = parse(
            &OK.replace("\"pass_overhead_ms\": 5", "\"pass_overhead_ms\": 7"),
            "t.json",
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "t.json: pass_overhead_ms: must be a finite time between 0 and the smallest table value"
        );
    }

    pub(super) const AIC: &str = r#"{
  "name": "a", "source": "s", "license": "Apache-2.0", "beyond_grid": "clamp",
  "non_decreasing": false, "pass_overhead_ms": 1,
  "deployment": {"backend": "vllm", "backend_version": "0.24.0", "gpu": "h100",
    "gpu_memory_bytes": 85899345920, "tp": 1, "model": "m", "hf_id": "o/m",
    "layers": 36, "kv_heads": 8, "head_dim": 128, "kv_dtype_bytes": 2,
    "weight_bytes": 16381452288, "max_context": 40960, "hidden_size": 4096,
    "active_intermediate_size": 12288, "vocab_size": 151936},
  "prefill": {"new_tokens": [1, 100], "cached_tokens": [0], "ms": [[10], [20]]},
  "decode": {"batch": [1, 2], "context_per_sequence": [16, 1000], "ms": [[6, 9], [7, 8]]},
  "checks": {"prefill": [[50, 0, 15.0]], "decode": [[2, 1000, 8.0]]}
}"#;

    #[test]
    fn parses_an_exported_profile_with_its_deployment_and_checks() {
        let f = parse_file(AIC, "a.json").unwrap();
        assert_eq!(f.profile.beyond_grid(), BeyondGrid::Clamp);
        assert_eq!(f.profile.decode_axis(), DecodeAxis::ContextPerSequence);
        let d = f.deployment.unwrap();
        assert_eq!((d.backend, d.tp, d.layers), (Backend::Vllm, 1, 36));
        assert_eq!(
            f.prefill_checks,
            vec![Check {
                x: 50,
                y: 0,
                ms: 15.0
            }]
        );
        assert_eq!(f.decode_checks[0].y, 1000);
        // The dip (8 < 9) is kept only because the profile clamps.
        let e = parse(&AIC.replace("\"clamp\"", "\"extrapolate\""), "a.json").unwrap_err();
        assert!(e.to_string().contains("beyond_grid"), "{e}");
        let e = parse(
            &AIC.replace("\"non_decreasing\": false", "\"non_decreasing\": true"),
            "a",
        )
        .unwrap_err();
        assert!(e.to_string().contains("decode.ms: [1][1]"), "{e}");
    }

    #[test]
    fn exported_fields_are_range_checked_by_name() {
        let cases = [
            ("\"tp\": 1", "\"tp\": 0", "deployment.tp"),
            ("\"layers\": 36", "\"layers\": 0", "deployment.layers"),
            (
                "\"kv_dtype_bytes\": 2",
                "\"kv_dtype_bytes\": 9",
                "deployment.kv_dtype_bytes",
            ),
            (
                "[[50, 0, 15.0]]",
                "[[50.5, 0, 15.0]]",
                "checks.prefill: row 0",
            ),
            (
                "[[2, 1000, 8.0]]",
                "[[2, 1000, -1]]",
                "checks.decode: row 0",
            ),
            (
                "\"context_per_sequence\"",
                "\"context_tokens\": [1], \"context_per_sequence\"",
                "decode: needs exactly one",
            ),
            (
                "\"backend\": \"vllm\"",
                "\"backend\": \"tgi\"",
                "unknown variant",
            ),
            ("\"clamp\"", "\"wrap\"", "unknown variant"),
        ];
        for (from, to, want) in cases {
            let text = AIC.replace(from, to);
            assert_ne!(text, AIC, "{from}");
            let e = parse_file(&text, "a.json").unwrap_err().to_string();
            assert!(e.contains(want), "{to}: {e}");
        }
    }

    /// [`AIC`] at TP 1 × DP 4 with EP 4, its cell size and experts recorded.
    fn ep4() -> String {
        AIC.replace(
            "\"vocab_size\": 151936}",
            "\"vocab_size\": 151936, \"parallel\": {\"tp\": 1, \"attention_dp\": 4, \
             \"moe_tp\": 1, \"moe_ep\": 4}, \"kv_bytes_per_token_per_rank\": 147456, \
             \"expert_weight_bytes\": 8000000000}",
        )
    }

    #[test]
    fn a_moe_layout_is_read_and_checked_by_name() {
        let d = parse_file(&ep4(), "a.json").unwrap().deployment.unwrap();
        let p = d.parallel.unwrap();
        assert_eq!((p.tp, p.attention_dp, p.moe_tp, p.moe_ep), (1, 4, 1, 4));
        assert_eq!(d.recorded_kv_bytes_per_rank, Some(147_456));
        assert_eq!(d.expert_weight_bytes, 8_000_000_000);
        assert_eq!(d.engine_gpus(), 4);
        // A file without them: TP only, nothing recorded.
        let plain = parse_file(AIC, "a.json").unwrap().deployment.unwrap();
        assert_eq!(
            (
                plain.parallel,
                plain.recorded_kv_bytes_per_rank,
                plain.expert_weight_bytes
            ),
            (None, None, 0)
        );
        let cases = [
            (
                "\"moe_ep\": 4",
                "\"moe_ep\": 2",
                "deployment.parallel: moe_tp 1 × moe_ep 2",
            ),
            (
                "\"attention_dp\": 4",
                "\"attention_dp\": 0",
                "deployment.parallel: attention_dp 0",
            ),
            (
                "\"parallel\": {\"tp\": 1",
                "\"parallel\": {\"tp\": 2",
                "deployment.parallel",
            ),
            (
                "\"moe_ep\": 4}",
                "\"moe_ep\": 4, \"cp\": 1}",
                "unknown field `cp`",
            ),
            (
                "\"kv_bytes_per_token_per_rank\": 147456",
                "\"kv_bytes_per_token_per_rank\": 0",
                "deployment.kv_bytes_per_token_per_rank: 0",
            ),
            (
                "\"expert_weight_bytes\": 8000000000",
                "\"expert_weight_bytes\": 99999999999",
                "deployment.expert_weight_bytes: 99999999999: more than weight_bytes",
            ),
        ];
        for (from, to, want) in cases {
            let text = ep4().replace(from, to);
            assert_ne!(text, ep4(), "{from}");
            let e = parse_file(&text, "a.json").unwrap_err().to_string();
            assert!(e.contains(want), "{to}: {e}");
        }
        // TP 2 in both places but DP 4 × TP 2 needs moe 8.
        let e = parse_file(&ep4().replace("\"tp\": 1", "\"tp\": 2"), "a.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("must equal tp × attention_dp = 8"), "{e}");
    }

    proptest::proptest! {
        /// Any text, and any single-byte change of an exported profile, is
        /// read or refused with an error, never a panic.
        #[test]
        fn never_panics(text in ".{0,400}", at in 0usize..2000, byte in 0u8..128) {
            let _ = parse_file(&text, "p");
            let mut b = AIC.as_bytes().to_vec();
            let i = at % b.len();
            b[i] = byte;
            if let Ok(t) = std::str::from_utf8(&b) {
                let _ = parse_file(t, "p");
            }
        }
    }

    #[test]
    fn oversized_text_is_refused_before_parsing() {
        let big = " ".repeat(MAX_PROFILE_BYTES as usize + 1);
        assert!(matches!(
            parse(&big, "big").unwrap_err().kind,
            ProfileFileErrorKind::TooLarge { .. }
        ));
    }
}
