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
    /// qwen3-30b-a3b): with --gpu, picks the AIConfigurator profile for
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

/// A profile file's name, taken apart: `MODEL-GPU-tpN-BACKEND.json`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct ProfileKey {
    /// Model.
    pub model: String,
    /// GPU.
    pub gpu: String,
    /// Tensor-parallel size.
    pub tp: u32,
    /// Engine.
    pub backend: &'static str,
}

impl ProfileKey {
    /// The key of a file name, if it is a profile's.
    pub fn parse(file: &str) -> Option<ProfileKey> {
        let stem = file.strip_suffix(".json")?;
        let (rest, backend) = stem.rsplit_once('-')?;
        let backend = match backend {
            "vllm" => "vllm",
            "sglang" => "sglang",
            _ => return None,
        };
        let (rest, tp) = rest.rsplit_once("-tp")?;
        let tp: u32 = tp.parse().ok().filter(|t| (1..=64).contains(t))?;
        let (model, gpu) = rest.rsplit_once('-')?;
        (!model.is_empty() && !gpu.is_empty()).then(|| ProfileKey {
            model: model.to_string(),
            gpu: gpu.to_string(),
            tp,
            backend,
        })
    }

    fn file_name(&self) -> String {
        format!(
            "{}-{}-tp{}-{}.json",
            self.model, self.gpu, self.tp, self.backend
        )
    }
}

impl std::fmt::Display for ProfileKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--model {} --gpu {} --tp {} --backend {}",
            self.model, self.gpu, self.tp, self.backend
        )
    }
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
            ..self.clone()
        }
    }

    /// Whether the two pools ask for the same TP (so they select the same
    /// profile).
    pub fn pools_alike(&self) -> bool {
        self.for_pool(PoolSide::Prefill).tp == self.for_pool(PoolSide::Decode).tp
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
        let (all, place) = self.available()?;
        let wanted = |k: &ProfileKey| {
            k.model == model
                && k.gpu == gpu
                && k.backend == backend.name()
                && self.tp.is_none_or(|t| t == k.tp)
        };
        let Some((key, origin)) = all.iter().find(|(k, _)| wanted(k)) else {
            return Err(format!(
                "--model {model} --gpu {gpu}{} --backend {}: no profile in {place}; {}",
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
        let same = m.model == key.model
            && m.gpu == key.gpu
            && m.tp == key.tp
            && m.backend.name() == key.backend;
        if !same {
            return Err(format!(
                "--model: {path}: its deployment ({} on {} TP {} under {}) is not its name's",
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
pub(crate) mod tests {
    use super::*;

    /// `--model MODEL --gpu GPU [--tp TP]` and nothing else.
    pub(crate) fn args(model: &str, gpu: &str, tp: Option<u32>) -> HardwareArgs {
        HardwareArgs {
            model: Some(model.into()),
            gpu: Some(gpu.into()),
            tp,
            ..HardwareArgs::default()
        }
    }

    #[test]
    fn file_names_parse_into_keys() {
        let k = ProfileKey::parse("llama-3.1-8b-h100-tp1-vllm.json").unwrap();
        assert_eq!(
            (k.model.as_str(), k.gpu.as_str(), k.tp, k.backend),
            ("llama-3.1-8b", "h100", 1, "vllm")
        );
        assert_eq!(k.file_name(), "llama-3.1-8b-h100-tp1-vllm.json");
        for bad in [
            "x.json",
            "m-h100-tp1-tgi.json",
            "m-h100-tp0-vllm.json",
            "m-h100-tpx-vllm.json",
            "h100-tp1-vllm.json",
            "m-h100-tp1-vllm.txt",
        ] {
            assert_eq!(ProfileKey::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_shipped_profile_is_built_in_selectable_and_consistent() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../profiles/aic");
        let all = list_profiles(Path::new(dir)).unwrap();
        assert!(all.len() >= 32, "{all:?}");
        assert_eq!(all, embedded_profiles(), "the binary holds every profile");
        for k in &all {
            let backend = if k.backend == "vllm" {
                Backend::Vllm
            } else {
                Backend::Sglang
            };
            let s = args(&k.model, &k.gpu, Some(k.tp))
                .select(backend)
                .unwrap()
                .unwrap();
            assert_eq!(
                s.file.profile.name(),
                k.file_name().trim_end_matches(".json")
            );
            assert!(s.file.profile.source().contains("Apache-2.0"), "{k}");
        }
    }

    #[test]
    fn the_smallest_tp_is_the_default_and_misses_are_explained() {
        let s = args("qwen3-32b", "h100", None)
            .select(Backend::Sglang)
            .unwrap()
            .unwrap();
        assert_eq!(s.model.tp, 2);
        assert_eq!(s.file.profile.name(), "qwen3-32b-h100-tp2-sglang");
        let e = args("qwen3-32b", "h100", Some(3))
            .select(Backend::Vllm)
            .unwrap_err();
        assert!(
            e.contains("--tp 3")
                && e.contains("for qwen3-32b there are: ")
                && e.contains("--model qwen3-32b --gpu h100 --tp 8 --backend vllm")
                && !e.contains("qwen3-8b"),
            "{e}"
        );
        let e = args("qwen9", "h100", None)
            .select(Backend::Vllm)
            .unwrap_err();
        assert!(
            e.contains("no profile is for qwen9; models with one: ") && e.contains("qwen3-32b"),
            "{e}"
        );
        let e = args("qwen3-8b", "h100", None)
            .select(Backend::TrtLlm)
            .unwrap_err();
        assert!(e.contains("no profile"), "{e}");
        assert!(HardwareArgs::default()
            .select(Backend::Vllm)
            .unwrap()
            .is_none());
        let e = HardwareArgs {
            profiles_dir: Some("/nonexistent/profiles".into()),
            ..args("qwen3-8b", "h100", None)
        }
        .select(Backend::Vllm)
        .unwrap_err();
        assert!(e.starts_with("--profiles-dir /nonexistent/profiles"), "{e}");
    }

    #[test]
    fn the_flag_names_the_folder_before_the_environment() {
        let env = Some(OsString::from("/from/env"));
        let flag = HardwareArgs {
            profiles_dir: Some("/from/flag".into()),
            ..HardwareArgs::default()
        };
        let d = flag.profile_dir_with(env.clone()).unwrap();
        assert_eq!(
            (d.path.to_str(), d.named_by),
            (Some("/from/flag"), "--profiles-dir")
        );
        let d = HardwareArgs::default().profile_dir_with(env).unwrap();
        assert_eq!(
            (d.path.to_str(), d.named_by),
            (Some("/from/env"), PROFILES_DIR_ENV)
        );
        let none = HardwareArgs::default();
        assert_eq!(none.profile_dir_with(Some(OsString::new())), None);
        assert_eq!(none.profile_dir_with(None), None);
    }

    /// The built-in file `name` as `--perf profile:` reads it.
    fn built_in(name: &str) -> ProfileFile {
        let text = EMBEDDED.iter().find(|(n, _)| *n == name).unwrap().1;
        profile_file::parse_file(text, name).unwrap()
    }

    #[test]
    fn a_perf_file_with_a_deployment_is_the_model_and_is_checked() {
        let name = "qwen3-8b-h100-tp1-vllm.json";
        let only_model = HardwareArgs {
            model: Some("qwen3-8b".into()),
            ..HardwareArgs::default()
        };
        let s = only_model
            .select_with_perf(Backend::Vllm, name, built_in(name))
            .unwrap();
        assert_eq!(
            (s.model.model.as_str(), s.model.gpu.as_str()),
            ("qwen3-8b", "h100")
        );
        let hf = HardwareArgs {
            model: Some("Qwen/Qwen3-8B".into()),
            ..HardwareArgs::default()
        };
        assert!(hf
            .select_with_perf(Backend::Vllm, name, built_in(name))
            .is_ok());
        let cases = [
            (
                args("llama-3.1-8b", "h100", None),
                Backend::Vllm,
                "--model llama-3.1-8b but the file is for model qwen3-8b",
            ),
            (
                args("qwen3-8b", "a100", None),
                Backend::Vllm,
                "--gpu a100 but the file is for GPU h100",
            ),
            (
                args("qwen3-8b", "h100", Some(2)),
                Backend::Vllm,
                "--tp 2 but the file is for TP 1",
            ),
            (
                args("qwen3-8b", "h100", None),
                Backend::Sglang,
                "--backend sglang but the file times vllm",
            ),
        ];
        for (a, backend, want) in cases {
            let e = a
                .select_with_perf(backend, name, built_in(name))
                .unwrap_err();
            assert!(
                e.starts_with("--perf profile:qwen3-8b-h100-tp1-vllm.json: its deployment")
                    && e.contains(want),
                "{e}"
            );
        }
    }

    #[test]
    fn a_perf_file_without_a_deployment_needs_the_gpu() {
        let text = EMBEDDED[0].1;
        let mut file = profile_file::parse_file(text, "x").unwrap();
        file.deployment = None;
        let s = args("qwen3-8b", "h100", None)
            .select_with_perf(Backend::Vllm, "x.json", file.clone())
            .unwrap();
        assert_eq!(s.model.gpu, "h100");
        let no_gpu = HardwareArgs {
            model: Some("qwen3-8b".into()),
            ..HardwareArgs::default()
        };
        let e = no_gpu
            .select_with_perf(Backend::Vllm, "x.json", file.clone())
            .unwrap_err();
        assert!(
            e.contains("--gpu must name") && e.contains("--gpu h100"),
            "{e}"
        );
        let tp_only = HardwareArgs {
            tp: Some(2),
            ..HardwareArgs::default()
        };
        let e = tp_only
            .select_with_perf(Backend::Vllm, "x.json", file)
            .unwrap_err();
        assert!(
            e.starts_with("--tp 2: --perf profile:x.json has no deployment"),
            "{e}"
        );
    }
}
