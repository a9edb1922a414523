//! The deployment flags' hardware side: the profile and KV pool a run
//! imitates (`--model`, `--gpu`, `--tp`; the default model otherwise), and
//! with `--perf profile:FILE` the model beside the file that times it.

use super::DeployArgs;
use crate::hardware_args::{Selected, DEFAULT_GPU, DEFAULT_MODEL};
use handoff_core::Backend;

impl DeployArgs {
    /// The profile and model a run imitates: with `--perf profile:FILE` and
    /// `--model` or `--tp`, the file's deployment or `--model`'s
    /// ([`crate::hardware_args::HardwareArgs::select_with_perf`]); else
    /// `--model`/`--gpu`'s; else (no `--perf` either) [`DEFAULT_MODEL`] on
    /// [`DEFAULT_GPU`]; else none.
    pub fn hardware(&self) -> Result<Option<Selected>, String> {
        let h = &self.hardware;
        let backend = self.backend();
        let profile = self
            .perf
            .as_deref()
            .and_then(|p| p.strip_prefix("profile:"))
            .filter(|p| !p.is_empty());
        if let (Some(t), None, None) = (h.tp, &h.model, profile) {
            return Err(format!(
                "--tp {t}: needs --model with --gpu (the profile of the model at that TP), \
                 or --perf profile:FILE to check it against"
            ));
        }
        if h.model.is_none() && h.gpu.is_none() && self.perf.is_none() {
            return h.select_for(DEFAULT_MODEL, DEFAULT_GPU, backend).map(Some);
        }
        match profile {
            Some(path) if h.model.is_some() || h.tp.is_some() => {
                // As `perf()` reads it: the reader bounds its size, a FIFO
                // must not block it.
                handoff_workload::file::check_regular("--perf", path.as_ref())
                    .map_err(|e| e.to_string())?;
                let file = handoff_profiles::profile_file::load_file(path.as_ref())
                    .map_err(|e| format!("--perf: {e}"))?;
                h.select_with_perf(backend, path, file).map(Some)
            }
            _ => h.select(backend),
        }
    }

    /// The KV pool of `--prefill-kv-tokens` (`decode`: `--decode-kv-tokens`),
    /// else sized from `--model` on `--gpu`, else 262144 tokens.
    pub fn kv_tokens(&self, decode: bool, hw: Option<&Selected>) -> Result<u64, String> {
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
    use crate::hardware_args::tests::args;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        deploy: DeployArgs,
    }

    fn deploy(flags: &[&str]) -> Result<DeployArgs, String> {
        use clap::Parser;
        let argv = std::iter::once("x").chain(flags.iter().copied());
        Cli::try_parse_from(argv)
            .map(|c| c.deploy)
            .map_err(|e| e.to_string())
    }

    fn bytes_per_token(d: &DeployArgs) -> u64 {
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
