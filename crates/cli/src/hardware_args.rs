//! `--model`, `--gpu`, `--tp`, `--gpu-memory-utilization`: a served model
//! on a GPU, which picks the AIConfigurator profile of the backend and
//! sizes KV per token and the pool from the model.
//!
//! Without `--model`, `--gpu` and `--perf` a run imitates
//! [`DEFAULT_MODEL`] on [`DEFAULT_GPU`]: a measured profile, not a fitted
//! curve, and an 8B dense model on an H100 is the most common single-GPU
//! disaggregated deployment in the vLLM, SGLang and Dynamo examples. An
//! explicit `--perf` without `--model` keeps the model-free defaults
//! (262144-token pools, 131072 bytes per token), so comparisons with
//! Dynamo's mocker (`--perf dynamo-polynomial`) run as they always have.
//!
//! Profiles are `MODEL-GPU-tpN-BACKEND.json` (written by
//! `profiles/derive_from_aic.py`): those of `profiles/aic/` are built into
//! the binary; `--profiles-dir DIR`, else the environment variable
//! [`PROFILES_DIR_ENV`], names a folder whose profiles are added to them (a
//! file there wins over a built-in one of the same name).
//!
//! `--prefill-tp` and `--decode-tp` give each pool its own TP (default:
//! `--tp`): each pool then selects its own profile, which times its passes
//! and sizes its pool ([`HardwareArgs::for_pool`]).
//!
//! A mixture of experts at attention DP (`--dp-size D`) or with expert
//! parallelism (`--enable-expert-parallel`, vLLM's flag; `--ep-size N`,
//! SGLang's, N = TP × D; per pool `--prefill-expert-parallel`,
//! `--decode-expert-parallel`) selects the profile of that layout,
//! `MODEL-GPU-tpN-dpD-epE-BACKEND.json` ([`ProfileKey`]): its tables are one
//! rank's passes and its pool one rank's (each DP rank its own KV, the
//! experts split by EP). `--dp-size D` without EP takes the `-dpD` profile
//! (experts tensor-parallel over the DP ranks) when there is one, else the
//! TP profile (a dense model's DP ranks are independent engines), unless
//! the model has layout profiles on that GPU, which a miss then lists.
//!
//! With `--perf profile:FILE` and `--model` or `--tp`, FILE times the passes
//! and the model sizes KV: the file's own `deployment` section when it has
//! one (checked against `--model`, `--gpu`, `--tp` and `--backend`), else
//! the profile of `--model` on `--gpu` ([`HardwareArgs::select_with_perf`]).

use clap::Args;
use handoff_core::Backend;
use handoff_profiles::hardware::ModelOnGpu;
use handoff_profiles::profile_file::{self, ProfileFile};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/aic_profiles.rs"));

mod key;
pub use key::ProfileKey;

/// The model a run imitates without `--model`, `--gpu` and `--perf`.
pub const DEFAULT_MODEL: &str = "qwen3-8b";
/// The GPU of [`DEFAULT_MODEL`].
pub const DEFAULT_GPU: &str = "h100";

/// Most profile files a folder may list (bounds the scan).
const MAX_PROFILES: usize = 4096;

/// The environment variable naming a folder of profiles when
/// `--profiles-dir` is not given (the flag wins).
pub const PROFILES_DIR_ENV: &str = "HANDOFF_PROFILES_DIR";

/// The model, GPU and parallelism a worker imitates.
#[derive(Args, Debug, Clone, Default)]
pub struct HardwareArgs {
    /// Model to imitate (e.g. qwen3-8b, llama-3.1-8b, qwen3-32b,
    /// qwen3-30b-a3b; qwen3-235b-a22b and deepseek-v3 on h200 with
    /// --dp-size 8 --enable-expert-parallel): with --gpu, picks the AIConfigurator profile for
    /// --backend as the step-time model unless --perf is given, and sizes
    /// KV bytes per token and each worker's pool from the model unless
    /// --bytes-per-token / --*-kv-tokens are given; with --perf
    /// profile:FILE, checked against the file's deployment, which then
    /// sizes KV (`serve` without --gpu: only the name served) [default: qwen3-8b on h100 unless --perf is
    /// given; the profiles are listed in profiles/README.md].
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// GPU of every worker, with --model: any GPU a profile exists for
    /// (built in: h100, h200, b200, a100, rtxpro6000, l40s; more from
    /// --profiles-dir) [default: h100 with the default model].
    #[arg(long, value_name = "NAME")]
    pub gpu: Option<String>,
    /// GPUs per worker, tensor-parallel, with --model or --perf
    /// profile:FILE (checked against the file's deployment) [default: the
    /// smallest TP a profile of the model exists for].
    #[arg(long, value_name = "N")]
    pub tp: Option<u32>,
    /// GPUs per prefill (or aggregated) worker, tensor-parallel: the prefill
    /// pool's own profile and KV pool [default: --tp].
    #[arg(long, value_name = "N")]
    pub prefill_tp: Option<u32>,
    /// GPUs per decode worker, tensor-parallel: the decode pool's own
    /// profile and KV pool; the handoff then moves KV between different
    /// TPs as the engines do (docs/profiles.md) [default: --tp].
    #[arg(long, value_name = "N")]
    pub decode_tp: Option<u32>,
    /// The flag `tp` came from, for errors ([`HardwareArgs::for_pool`]).
    #[arg(skip)]
    pub tp_flag: TpFlag,
    /// Expert parallelism in both pools, vLLM's --enable-expert-parallel:
    /// a mixture of experts spreads its experts over every TP × --dp-size
    /// GPU of a worker (no expert TP), selecting the profile of that
    /// layout (`MODEL-GPU-tpN-dpD-epE-BACKEND.json`).
    #[arg(long)]
    pub enable_expert_parallel: bool,
    /// Expert parallelism in the prefill (or aggregated) pool only.
    #[arg(long)]
    pub prefill_expert_parallel: bool,
    /// Expert parallelism in the decode pool only.
    #[arg(long)]
    pub decode_expert_parallel: bool,
    /// SGLang's --ep-size: expert parallelism over N GPUs; N must be TP ×
    /// --dp-size (DP attention with EP over every GPU), the same layout as
    /// --enable-expert-parallel.
    #[arg(long, value_name = "N")]
    pub ep_size: Option<u32>,
    /// Attention DP ranks per worker (`--dp-size`, set by the deployment's
    /// flags; 0 or 1: none).
    #[arg(skip)]
    pub dp: u32,
    /// The flag that asked for expert parallelism, if one did, for errors
    /// ([`HardwareArgs::for_pool`]).
    #[arg(skip)]
    pub ep_flag: Option<&'static str>,
    /// Fraction of each GPU's memory the engine may take, with --model
    /// (vLLM's --gpu-memory-utilization, SGLang's --mem-fraction-static)
    /// [default: vllm 0.9; sglang its own reserve heuristic].
    #[arg(long, value_name = "FRACTION", requires = "model")]
    pub gpu_memory_utilization: Option<f64>,
    /// Folder of exported profiles (`cargo xtask profiles build` writes
    /// them), added to the ones built in [default:
    /// $HANDOFF_PROFILES_DIR, else only the profiles built in, from
    /// profiles/aic].
    #[arg(long, value_name = "DIR")]
    pub profiles_dir: Option<PathBuf>,
}

/// The flag a selection's TP came from, as its errors name it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TpFlag {
    /// `--tp` (or no TP given).
    #[default]
    Tp,
    /// `--prefill-tp`.
    PrefillTp,
    /// `--decode-tp`.
    DecodeTp,
}

impl TpFlag {
    /// The flag as typed.
    pub fn name(self) -> &'static str {
        match self {
            TpFlag::Tp => "--tp",
            TpFlag::PrefillTp => "--prefill-tp",
            TpFlag::DecodeTp => "--decode-tp",
        }
    }
}

/// A pool of a deployment, for its own TP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolSide {
    /// Prefill (or aggregated) workers.
    Prefill,
    /// Decode workers.
    Decode,
}

/// The profiles built in, sorted.
pub fn embedded_profiles() -> Vec<ProfileKey> {
    let mut keys: Vec<ProfileKey> = EMBEDDED
        .iter()
        .filter_map(|(n, _)| ProfileKey::parse(n))
        .collect();
    keys.sort();
    keys
}

/// The profiles in `dir`, sorted (errors name `--profiles-dir`).
pub fn list_profiles(dir: &Path) -> Result<Vec<ProfileKey>, String> {
    list_in(dir, "--profiles-dir")
}

/// The profiles in `dir`, sorted; `label` names where `dir` came from.
fn list_in(dir: &Path, label: &str) -> Result<Vec<ProfileKey>, String> {
    let fail = |e: std::io::Error| format!("{label} {}: {e}", dir.display());
    let entries = std::fs::read_dir(dir).map_err(fail)?;
    let mut keys = Vec::new();
    for e in entries.take(MAX_PROFILES) {
        let e = e.map_err(fail)?;
        if let Some(k) = e.file_name().to_str().and_then(ProfileKey::parse) {
            keys.push(k);
        }
    }
    keys.sort();
    Ok(keys)
}

/// A folder of profiles and what named it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProfileDir {
    /// The folder.
    pub path: PathBuf,
    /// `--profiles-dir` or [`PROFILES_DIR_ENV`].
    pub named_by: &'static str,
}

/// Where a selectable profile is read from.
#[derive(Clone, Debug)]
enum Origin {
    Dir(PathBuf),
    BuiltIn,
}

/// The profile `--model`/`--gpu`/`--tp` pick, and the model it is for.
#[derive(Clone, Debug)]
pub struct Selected {
    /// The profile, read and checked.
    pub file: ProfileFile,
    /// Its deployment.
    pub model: ModelOnGpu,
    /// Where it was read: a file's path, or `profiles/aic/NAME` for a
    /// built-in one ([`built_in_text`]).
    pub origin: String,
}

/// The text of the built-in profile `origin` names (`profiles/aic/NAME`).
pub fn built_in_text(origin: &str) -> Option<&'static str> {
    let name = origin.strip_prefix("profiles/aic/")?;
    EMBEDDED.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

impl HardwareArgs {
    /// The folder of profiles besides the built-in ones: `--profiles-dir`,
    /// else `env` (the value of [`PROFILES_DIR_ENV`]) when set and not empty.
    pub fn profile_dir_with(&self, env: Option<OsString>) -> Option<ProfileDir> {
        match (&self.profiles_dir, env.filter(|v| !v.is_empty())) {
            (Some(p), _) => Some(ProfileDir {
                path: p.clone(),
                named_by: "--profiles-dir",
            }),
            (None, Some(v)) => Some(ProfileDir {
                path: PathBuf::from(v),
                named_by: PROFILES_DIR_ENV,
            }),
            (None, None) => None,
        }
    }

    /// The arguments of `side`'s pool: its `--prefill-tp`/`--decode-tp` in
    /// place of `--tp` when given (errors then name that flag).
    pub fn for_pool(&self, side: PoolSide) -> HardwareArgs {
        let (own, flag) = match side {
            PoolSide::Prefill => (self.prefill_tp, TpFlag::PrefillTp),
            PoolSide::Decode => (self.decode_tp, TpFlag::DecodeTp),
        };
        let (tp, tp_flag) = match own {
            Some(t) => (Some(t), flag),
            None => (self.tp, TpFlag::Tp),
        };
        HardwareArgs {
            tp,
            tp_flag,
            ep_flag: self.ep_flag_for(side),
            ..self.clone()
        }
    }

    /// The flag asking `side`'s pool for expert parallelism, if any:
    /// `--ep-size`, `--enable-expert-parallel`, or the pool's own.
    fn ep_flag_for(&self, side: PoolSide) -> Option<&'static str> {
        let own = match side {
            PoolSide::Prefill => self
                .prefill_expert_parallel
                .then_some("--prefill-expert-parallel"),
            PoolSide::Decode => self
                .decode_expert_parallel
                .then_some("--decode-expert-parallel"),
        };
        if self.ep_size.is_some() {
            Some("--ep-size")
        } else if self.enable_expert_parallel {
            Some("--enable-expert-parallel")
        } else {
            own
        }
    }

    /// Whether any pool runs expert parallelism (an EP flag was given): the
    /// MoE layer then couples a worker's DP ranks, which step together.
    pub fn expert_parallel(&self) -> bool {
        [PoolSide::Prefill, PoolSide::Decode]
            .into_iter()
            .any(|side| self.expert_parallel_for(side))
    }

    /// Whether `side`'s pool runs expert parallelism.
    pub fn expert_parallel_for(&self, side: PoolSide) -> bool {
        self.ep_flag_for(side).is_some()
    }

    /// Whether the two pools ask for the same TP and expert parallelism (so
    /// they select the same profile).
    pub fn pools_alike(&self) -> bool {
        let (p, d) = (
            self.for_pool(PoolSide::Prefill),
            self.for_pool(PoolSide::Decode),
        );
        p.tp == d.tp && p.ep_flag.is_some() == d.ep_flag.is_some()
    }

    /// The DP ranks a worker has (at least 1).
    fn dp_ranks(&self) -> u32 {
        self.dp.max(1)
    }

    /// Whether `k` is the layout these flags ask for: its TP (`--tp` or the
    /// smallest), its DP ranks `dp` and, with an EP flag, experts over all
    /// `tp × dp` GPUs (one GPU: no EP); without one, no EP.
    fn layout_matches(&self, k: &ProfileKey, dp: u32) -> bool {
        let ep = match self.ep_flag {
            Some(_) => (k.tp * dp).max(1),
            None => 1,
        };
        self.tp.is_none_or(|t| t == k.tp)
            && k.dp == dp
            && k.ep == ep
            && self.ep_size.is_none_or(|n| n == k.ep)
    }

    /// `--ep-size N` checked against TP × `--dp-size` when the TP is given.
    fn check_ep_size(&self) -> Result<(), String> {
        match (self.ep_size, self.tp) {
            (Some(0), _) => Err("--ep-size 0: must be TP × --dp-size".into()),
            (Some(n), Some(t)) if n != t.saturating_mul(self.dp_ranks()) => Err(format!(
                "--ep-size {n}: must be {} {t} × --dp-size {} = {} (SGLang's EP with DP \
                 attention spans every GPU of the worker)",
                self.tp_flag.name(),
                self.dp_ranks(),
                t.saturating_mul(self.dp_ranks())
            )),
            _ => Ok(()),
        }
    }

    /// The first TP flag given, with its value (`--tp`, then the pools').
    pub fn any_tp(&self) -> Option<(TpFlag, u32)> {
        [
            (TpFlag::Tp, self.tp),
            (TpFlag::PrefillTp, self.prefill_tp),
            (TpFlag::DecodeTp, self.decode_tp),
        ]
        .into_iter()
        .find_map(|(f, t)| t.map(|t| (f, t)))
    }

    /// [`HardwareArgs::profile_dir_with`] the process's environment.
    pub fn profile_dir(&self) -> Option<ProfileDir> {
        self.profile_dir_with(std::env::var_os(PROFILES_DIR_ENV))
    }

    /// Every selectable profile, sorted by key (so the smallest TP of a
    /// model on a GPU comes first), a folder's before a built-in one of the
    /// same name; and a description of where they were looked for.
    fn available(&self) -> Result<(Vec<(ProfileKey, Origin)>, String), String> {
        let mut all: Vec<(ProfileKey, Origin)> = Vec::new();
        let mut place = "the profiles built in".to_string();
        if let Some(d) = self.profile_dir() {
            for k in list_in(&d.path, d.named_by)? {
                all.push((k, Origin::Dir(d.path.clone())));
            }
            place = format!("{} {} or {place}", d.named_by, d.path.display());
        }
        for k in embedded_profiles() {
            if !all.iter().any(|(have, _)| *have == k) {
                all.push((k, Origin::BuiltIn));
            }
        }
        all.sort_by(|a, b| a.0.cmp(&b.0));
        Ok((all, place))
    }

    /// Every selectable profile's key, sorted: the built-in ones and those
    /// of the folder `--profiles-dir` (or [`PROFILES_DIR_ENV`]) names, as
    /// selection sees them.
    pub fn profile_keys(&self) -> Result<Vec<ProfileKey>, String> {
        Ok(self.available()?.0.into_iter().map(|(k, _)| k).collect())
    }

    /// The selected profile for `backend`, or `None` without `--model`.
    pub fn select(&self, backend: Backend) -> Result<Option<Selected>, String> {
        let (model, gpu) = match (&self.model, &self.gpu) {
            (None, None) => return Ok(None),
            (Some(m), Some(g)) => (m.as_str(), g.as_str()),
            (Some(m), None) => return Err(format!("--model {m}: needs --gpu to pick a profile")),
            (None, Some(g)) => return Err(format!("--gpu {g}: needs --model")),
        };
        self.select_for(model, gpu, backend).map(Some)
    }

    /// The profile of `model` on `gpu` (and `--tp`) for `backend`.
    pub fn select_for(&self, model: &str, gpu: &str, backend: Backend) -> Result<Selected, String> {
        self.check_ep_size()?;
        let (all, place) = self.available()?;
        let here = |k: &ProfileKey| k.model == model && k.gpu == gpu && k.backend == backend.name();
        let dp = self.dp_ranks();
        let found = all
            .iter()
            .find(|(k, _)| here(k) && self.layout_matches(k, dp))
            .or_else(|| {
                // A dense model's DP ranks are independent engines: its TP
                // profile times each, unless the model has layouts here.
                let moe = all.iter().any(|(k, _)| here(k) && k.is_moe_layout());
                (dp > 1 && self.ep_flag.is_none() && !moe)
                    .then(|| {
                        all.iter()
                            .find(|(k, _)| here(k) && self.layout_matches(k, 1))
                    })
                    .flatten()
            });
        let Some((key, origin)) = found else {
            let layout = match (dp, self.ep_flag) {
                (1, None) => String::new(),
                (d, None) => format!(" --dp-size {d}"),
                (1, Some(f)) => format!(" {f}"),
                (d, Some(f)) => format!(" --dp-size {d} {f}"),
            };
            return Err(format!(
                "--model {model} --gpu {gpu}{}{layout} --backend {}: no profile in {place}; {}",
                self.tp
                    .map(|t| format!(" {} {t}", self.tp_flag.name()))
                    .unwrap_or_default(),
                backend.name(),
                what_exists(&all, model)
            ));
        };
        let name = key.file_name();
        let (file, path) = match origin {
            Origin::Dir(dir) => {
                let path = dir.join(&name);
                handoff_workload::file::check_regular("--profiles-dir", &path)
                    .map_err(|e| format!("--model: {e}"))?;
                let file = profile_file::load_file(&path).map_err(|e| format!("--model: {e}"))?;
                (file, path.display().to_string())
            }
            Origin::BuiltIn => {
                let text = EMBEDDED
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map_or("", |(_, t)| *t);
                let origin = format!("profiles/aic/{name}");
                let file =
                    profile_file::parse_file(text, &origin).map_err(|e| format!("--model: {e}"))?;
                (file, origin)
            }
        };
        let Some(m) = file.deployment.clone() else {
            return Err(format!("--model: {path}: has no deployment section"));
        };
        let (dp, ep) = m.parallel.map_or((1, 1), |p| (p.attention_dp, p.moe_ep));
        let same = m.model == key.model
            && m.gpu == key.gpu
            && m.tp == key.tp
            && (dp, ep) == (key.dp, key.ep)
            && m.backend.name() == key.backend;
        if !same {
            return Err(format!(
                "--model: {path}: its deployment ({} on {} TP {} DP {dp} EP {ep} under {}) is not \
                 its name's",
                m.model,
                m.gpu,
                m.tp,
                m.backend.name()
            ));
        }
        Ok(Selected {
            file,
            model: m,
            origin: path,
        })
    }

    /// The model of a run timed by `--perf profile:PATH` (`file`, read) with
    /// `--model` or `--tp`: the file's `deployment` when it has one, after
    /// checking `--model` (its slug or Hugging Face id), `--gpu`, `--tp` and
    /// `backend` against it; else the profile of `--model` on `--gpu`.
    pub fn select_with_perf(
        &self,
        backend: Backend,
        path: &str,
        file: ProfileFile,
    ) -> Result<Selected, String> {
        if let Some(d) = file.deployment.clone() {
            self.check_deployment(backend, path, &d)?;
            return Ok(Selected {
                file,
                model: d,
                origin: path.to_string(),
            });
        }
        match (&self.model, &self.gpu) {
            (Some(m), Some(g)) => self.select_for(m, g, backend),
            (Some(m), None) => {
                let (all, _) = self.available()?;
                Err(format!(
                    "--model {m} --perf profile:{path}: the file has no deployment section, so \
                     --gpu must name the GPU that sizes the pool; {}",
                    what_exists(&all, m)
                ))
            }
            (None, _) => Err(format!(
                "{} {}: --perf profile:{path} has no deployment section to check it against; \
                 give --model and --gpu",
                self.tp_flag.name(),
                self.tp.unwrap_or(1)
            )),
        }
    }

    /// Every flag that contradicts the deployment `d` of `--perf
    /// profile:PATH`, each naming the flag's value and the file's.
    fn check_deployment(&self, backend: Backend, path: &str, d: &ModelOnGpu) -> Result<(), String> {
        let mut bad = Vec::new();
        if let Some(m) = self
            .model
            .as_ref()
            .filter(|m| **m != d.model && **m != d.hf_id)
        {
            bad.push(format!("--model {m} but the file is for model {}", d.model));
        }
        if let Some(g) = self.gpu.as_ref().filter(|g| **g != d.gpu) {
            bad.push(format!("--gpu {g} but the file is for GPU {}", d.gpu));
        }
        if let Some(t) = self.tp.filter(|t| *t != d.tp) {
            bad.push(format!(
                "{} {t} but the file is for TP {}",
                self.tp_flag.name(),
                d.tp
            ));
        }
        let file_ep = d.parallel.is_some_and(|p| p.moe_ep > 1);
        match self.ep_flag {
            Some(f) if !d.parallel.is_some_and(|p| p.expert_parallel()) => bad.push(format!(
                "{f} but the file times {}",
                d.parallel
                    .map_or_else(|| "no MoE layout".to_string(), |p| p.to_string())
            )),
            None if file_ep => bad.push(format!(
                "no expert-parallel flag but the file times {}",
                d.parallel.map(|p| p.to_string()).unwrap_or_default()
            )),
            _ => {}
        }
        if let Some(p) = d.parallel.filter(|p| p.attention_dp != self.dp_ranks()) {
            bad.push(format!(
                "--dp-size {} but the file is for {} DP ranks",
                self.dp_ranks(),
                p.attention_dp
            ));
        }
        if backend != d.backend {
            bad.push(format!(
                "--backend {} but the file times {}",
                backend.name(),
                d.backend.name()
            ));
        }
        if bad.is_empty() {
            return Ok(());
        }
        Err(format!(
            "--perf profile:{path}: its deployment section does not match the flags: {}",
            bad.join("; ")
        ))
    }
}

/// The profiles of `model` among `all` as flags, else the models that have
/// profiles: what a miss can choose from.
fn what_exists(all: &[(ProfileKey, Origin)], model: &str) -> String {
    let of_model: Vec<String> = all
        .iter()
        .filter(|(k, _)| k.model == model)
        .map(|(k, _)| k.to_string())
        .collect();
    if !of_model.is_empty() {
        return format!("for {model} there are: {}", of_model.join("; "));
    }
    let mut models: Vec<&str> = all.iter().map(|(k, _)| k.model.as_str()).collect();
    models.dedup();
    if models.is_empty() {
        return "there are none".into();
    }
    format!(
        "no profile is for {model}; models with one: {}",
        models.join(", ")
    )
}

#[cfg(test)]
pub(crate) mod tests;
