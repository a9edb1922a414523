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
use handoff_serving::hardware::ModelOnGpu;
use handoff_serving::profile_file::{self, ProfileFile};
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
    fn select_for(&self, model: &str, gpu: &str, backend: Backend) -> Result<Selected, String> {
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

impl crate::args::DeployArgs {
    /// The profile and model a run imitates: `--model`/`--gpu`'s, else
    /// (no `--perf` either) [`DEFAULT_MODEL`] on [`DEFAULT_GPU`], else none.
    pub(crate) fn hardware(&self) -> Result<Option<Selected>, String> {
        let h = &self.hardware;
        if h.model.is_none() && h.gpu.is_none() && self.perf.is_none() {
            return h
                .select_for(DEFAULT_MODEL, DEFAULT_GPU, self.backend())
                .map(Some);
        }
        h.select(self.backend())
    }

    /// The KV pool of `--prefill-kv-tokens` (`decode`: `--decode-kv-tokens`),
    /// else sized from `--model` on `--gpu`, else 262144 tokens.
    pub(crate) fn kv_tokens(&self, decode: bool, hw: Option<&Selected>) -> Result<u64, String> {
        let given = if decode {
            self.decode_kv_tokens
        } else {
            self.prefill_kv_tokens
        };
        let Some(s) = hw.filter(|_| given.is_none()) else {
            return Ok(given.unwrap_or(262_144));
        };
        let backend = self.backend();
        s.model
            .pool_tokens(
                self.hardware.gpu_memory_utilization,
                self.block_size
                    .unwrap_or(if backend == Backend::Sglang { 1 } else { 16 }),
                self.max_batched_tokens,
                self.max_running
                    .unwrap_or(handoff_sched_vllm::DEFAULT_MAX_NUM_SEQS),
            )
            .map_err(|e| format!("--model {} --gpu {}: {e}", s.model.model, s.model.gpu))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(model: &str, gpu: &str, tp: Option<u32>) -> HardwareArgs {
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

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        deploy: crate::args::DeployArgs,
    }

    fn deploy(flags: &[&str]) -> Result<crate::args::DeployArgs, String> {
        use clap::Parser;
        let argv = std::iter::once("x").chain(flags.iter().copied());
        Cli::try_parse_from(argv)
            .map(|c| c.deploy)
            .map_err(|e| e.to_string())
    }

    fn bytes_per_token(d: &crate::args::DeployArgs) -> u64 {
        match d.transfer().unwrap() {
            handoff_engine::TransferModel::Bytes {
                bytes_per_token, ..
            } => bytes_per_token,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn model_and_gpu_pick_the_profile_and_size_kv_unless_told() {
        // Without --model, --gpu and --perf: the default model's profile,
        // KV bytes and pool.
        let d = deploy(&[]).unwrap();
        let (p, dec) = d.engines().unwrap();
        assert_eq!(p.perf.label(), "profile:qwen3-8b-h100-tp1-vllm");
        let m = args(DEFAULT_MODEL, DEFAULT_GPU, None)
            .select(Backend::Vllm)
            .unwrap()
            .unwrap()
            .model;
        assert_eq!(bytes_per_token(&d), m.kv_bytes_per_token());
        assert_eq!(p.kv_tokens, dec.kv_tokens);
        assert_ne!(p.kv_tokens, 262_144);
        // An explicit --perf without --model: the model-free defaults.
        let d = deploy(&["--perf", "dynamo-polynomial"]).unwrap();
        let (p, dec) = d.engines().unwrap();
        assert_eq!(p.perf.label(), "dynamo-polynomial");
        assert_eq!(
            (p.kv_tokens, dec.kv_tokens, bytes_per_token(&d)),
            (262_144, 262_144, 131_072)
        );
        // With it: the backend's profile, the model's KV bytes, the sized pool.
        let d = deploy(&[
            "--backend",
            "sglang",
            "--model",
            "qwen3-8b",
            "--gpu",
            "h100",
        ])
        .unwrap();
        let (p, dec) = d.engines().unwrap();
        assert_eq!(p.perf.label(), "profile:qwen3-8b-h100-tp1-sglang");
        assert_eq!(bytes_per_token(&d), 147_456);
        let m = args("qwen3-8b", "h100", None)
            .select(Backend::Sglang)
            .unwrap()
            .unwrap()
            .model;
        let want = m.pool_tokens(None, 1, 8192, 1024).unwrap();
        assert_eq!((p.kv_tokens, dec.kv_tokens), (want, want));
        let half = deploy(&[
            "--backend",
            "sglang",
            "--model",
            "qwen3-8b",
            "--gpu",
            "h100",
            "--gpu-memory-utilization",
            "0.5",
        ])
        .unwrap();
        assert!(half.engines().unwrap().0.kv_tokens < want);
        // Explicit flags win, each on its own.
        let d = deploy(&[
            "--model",
            "qwen3-8b",
            "--gpu",
            "h100",
            "--perf",
            "dynamo-polynomial",
            "--prefill-kv-tokens",
            "100000",
            "--bytes-per-token",
            "7",
        ])
        .unwrap();
        let (p, dec) = d.engines().unwrap();
        assert_eq!(p.perf.label(), "dynamo-polynomial");
        assert_eq!(p.kv_tokens, 100_000);
        assert!(dec.kv_tokens > 100_000);
        assert_eq!(bytes_per_token(&d), 7);
        // --model needs --gpu and the other way round; bad values name the flag.
        let e = deploy(&["--model", "qwen3-8b"])
            .unwrap()
            .engines()
            .unwrap_err();
        assert_eq!(e, "--model qwen3-8b: needs --gpu to pick a profile");
        let e = deploy(&["--gpu", "h100"]).unwrap().engines().unwrap_err();
        assert_eq!(e, "--gpu h100: needs --model");
        let e = deploy(&[
            "--model",
            "qwen3-8b",
            "--gpu",
            "h100",
            "--gpu-memory-utilization",
            "1.5",
        ])
        .unwrap()
        .deployment(true)
        .unwrap_err();
        assert!(e.starts_with("--gpu-memory-utilization"), "{e}");
        let e = deploy(&[
            "--model",
            "qwen3-8b",
            "--gpu",
            "h100",
            "--gpu-memory-utilization",
            "0.1",
        ])
        .unwrap()
        .engines()
        .unwrap_err();
        assert!(e.contains("leave") && e.contains("for KV"), "{e}");
    }
}
