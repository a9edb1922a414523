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
//! the binary; `--profiles-dir` reads another folder instead.

use clap::Args;
use handoff_core::Backend;
use handoff_profiles::hardware::ModelOnGpu;
use handoff_profiles::profile_file::{self, ProfileFile};
use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/aic_profiles.rs"));

/// The model a run imitates without `--model`, `--gpu` and `--perf`.
pub const DEFAULT_MODEL: &str = "qwen3-8b";
/// The GPU of [`DEFAULT_MODEL`].
pub const DEFAULT_GPU: &str = "h100";

/// Most profile files a folder may list (bounds the scan).
const MAX_PROFILES: usize = 4096;

/// The model, GPU and parallelism a worker imitates.
#[derive(Args, Debug, Clone, Default)]
pub struct HardwareArgs {
    /// Model to imitate (e.g. qwen3-8b, llama-3.1-8b, qwen3-32b,
    /// qwen3-30b-a3b): with --gpu, picks the AIConfigurator profile for
    /// --backend as the step-time model unless --perf is given, and sizes
    /// KV bytes per token and each worker's pool from the model unless
    /// --bytes-per-token / --*-kv-tokens are given (`serve` without --gpu:
    /// only the name served) [default: qwen3-8b on h100 unless --perf is
    /// given; the profiles are listed in profiles/README.md].
    #[arg(long, value_name = "NAME")]
    pub model: Option<String>,
    /// GPU of every worker (h100, h200, b200, a100), with --model
    /// [default: h100 with the default model].
    #[arg(long, value_name = "NAME")]
    pub gpu: Option<String>,
    /// GPUs per worker, tensor-parallel, with --model [default: the
    /// smallest TP a profile of the model exists for].
    #[arg(long, value_name = "N", requires = "model")]
    pub tp: Option<u32>,
    /// Fraction of each GPU's memory the engine may take, with --model
    /// (vLLM's --gpu-memory-utilization, SGLang's --mem-fraction-static)
    /// [default: vllm 0.9; sglang its own reserve heuristic].
    #[arg(long, value_name = "FRACTION", requires = "model")]
    pub gpu_memory_utilization: Option<f64>,
    /// Folder of exported profiles, with --model [default: the profiles
    /// built in, from profiles/aic].
    #[arg(long, value_name = "DIR", requires = "model")]
    pub profiles_dir: Option<PathBuf>,
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

/// The profiles in `dir`, sorted.
pub fn list_profiles(dir: &Path) -> Result<Vec<ProfileKey>, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("--profiles-dir {}: {e}", dir.display()))?;
    let mut keys = Vec::new();
    for e in entries.take(MAX_PROFILES) {
        let e = e.map_err(|e| format!("--profiles-dir {}: {e}", dir.display()))?;
        if let Some(k) = e.file_name().to_str().and_then(ProfileKey::parse) {
            keys.push(k);
        }
    }
    keys.sort();
    Ok(keys)
}

/// The profile `--model`/`--gpu`/`--tp` pick, and the model it is for.
#[derive(Clone, Debug)]
pub struct Selected {
    /// The profile, read and checked.
    pub file: ProfileFile,
    /// Its deployment.
    pub model: ModelOnGpu,
}

impl HardwareArgs {
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
        let (all, place) = match &self.profiles_dir {
            Some(dir) => (list_profiles(dir)?, dir.display().to_string()),
            None => (embedded_profiles(), "the profiles built in".to_string()),
        };
        let wanted = |k: &&ProfileKey| {
            k.model == model
                && k.gpu == gpu
                && k.backend == backend.name()
                && self.tp.is_none_or(|t| t == k.tp)
        };
        let Some(key) = all.iter().find(wanted) else {
            let have: Vec<String> = all.iter().map(|k| k.to_string()).collect();
            return Err(format!(
                "--model {model} --gpu {gpu}{} --backend {}: no profile in {place}; there are: {}",
                self.tp.map(|t| format!(" --tp {t}")).unwrap_or_default(),
                backend.name(),
                if have.is_empty() {
                    "none".into()
                } else {
                    have.join("; ")
                }
            ));
        };
        let name = key.file_name();
        let (file, path) = match &self.profiles_dir {
            Some(dir) => {
                let path = dir.join(&name);
                handoff_workload::file::check_regular("--profiles-dir", &path)
                    .map_err(|e| format!("--model: {e}"))?;
                let file = profile_file::load_file(&path).map_err(|e| format!("--model: {e}"))?;
                (file, path.display().to_string())
            }
            None => {
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
        Ok(Selected { file, model: m })
    }
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
        let e = args("qwen3-32b", "h100", Some(8))
            .select(Backend::Vllm)
            .unwrap_err();
        assert!(
            e.contains("--tp 8")
                && e.contains("--model qwen3-32b --gpu h100 --tp 2 --backend vllm"),
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
}
