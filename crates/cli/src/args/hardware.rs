//! The deployment flags' hardware side: the profile and KV pool a run
//! imitates (`--model`, `--gpu`, `--tp`; the default model otherwise), each
//! pool at its own TP (`--prefill-tp`, `--decode-tp`), and with `--perf
//! profile:FILE` the model beside the file that times it.

use super::{early_send_cached_prefix, DeployArgs, EARLY_SEND_ENV};
use crate::hardware_args::{HardwareArgs, PoolSide, Selected, DEFAULT_GPU, DEFAULT_MODEL};
use handoff_core::Backend;
use handoff_deployment::{EngineSpec, PerfChoice};

impl DeployArgs {
    /// The prefill (or aggregated) pool's profile and model:
    /// [`DeployArgs::hardware_for`] [`PoolSide::Prefill`].
    pub fn hardware(&self) -> Result<Option<Selected>, String> {
        self.hardware_for(PoolSide::Prefill)
    }

    /// The profiles and models of both pools, prefill then decode: one
    /// selection when they ask for the same TP, else each its own (a TP
    /// with no profile is refused naming the pool's flag and what exists).
    pub fn pool_hardware(&self) -> Result<(Option<Selected>, Option<Selected>), String> {
        let prefill = self.hardware_for(PoolSide::Prefill)?;
        if self.hardware.pools_alike() || self.decode == 0 {
            return Ok((prefill.clone(), prefill));
        }
        Ok((prefill, self.hardware_for(PoolSide::Decode)?))
    }

    /// Whether the `--dp-size` ranks of a worker step together: an MoE
    /// engine's do whenever its MoE layer spans them, with expert
    /// parallelism (`--enable-expert-parallel`, `--ep-size`, a pool's EP
    /// flag) or a profile whose layout has attention DP (its MoE TP across
    /// the ranks). vLLM runs such ranks as `DPEngineCoreProc`s that step
    /// together (`vllm/v1/engine/core.py`); a dense model's ranks are
    /// independent engines.
    pub fn moe_ranks_coupled(&self) -> Result<bool, String> {
        if self.dp_size <= 1 {
            return Ok(false);
        }
        if self.hardware.expert_parallel() {
            return Ok(true);
        }
        let (p, d) = self.pool_hardware()?;
        Ok([p, d]
            .iter()
            .flatten()
            .any(|s| s.model.parallel.is_some_and(|l| l.attention_dp > 1)))
    }

    /// The profile and model `side`'s pool imitates, its TP
    /// `--prefill-tp`/`--decode-tp`, else `--tp`: with `--perf
    /// profile:FILE` and `--model` or a TP flag, the file's deployment or
    /// `--model`'s ([`crate::hardware_args::HardwareArgs::select_with_perf`],
    /// which refuses a TP that is not the file's); else `--model`/`--gpu`'s;
    /// else (no `--perf` either) [`DEFAULT_MODEL`] on [`DEFAULT_GPU`]; else
    /// none.
    pub fn hardware_for(&self, side: PoolSide) -> Result<Option<Selected>, String> {
        let h = &HardwareArgs {
            dp: u32::try_from(self.dp_size).unwrap_or(u32::MAX),
            ..self.hardware.for_pool(side)
        };
        let backend = self.backend();
        let profile = self
            .perf
            .as_deref()
            .and_then(|p| p.strip_prefix("profile:"))
            .filter(|p| !p.is_empty());
        if let (Some((flag, t)), None, None) = (self.hardware.any_tp(), &h.model, profile) {
            return Err(format!(
                "{} {t}: needs --model with --gpu (the profile of the model at that TP), \
                 or --perf profile:FILE to check it against",
                flag.name()
            ));
        }
        if self.hardware.expert_parallel() && h.model.is_none() && profile.is_none() {
            return Err("expert parallelism (--enable-expert-parallel, --ep-size, \
                 --prefill-/--decode-expert-parallel) needs --model with --gpu: it selects \
                 the profile of the model's MoE layout"
                .into());
        }
        if self.decode == 0 && self.hardware.decode_expert_parallel {
            return Err(
                "--decode-expert-parallel: --decode 0 runs aggregated, with no decode \
                 pool; give the workers' expert parallelism with --enable-expert-parallel"
                    .into(),
            );
        }
        if self.decode == 0 {
            if let Some(t) = self.hardware.decode_tp {
                return Err(format!(
                    "--decode-tp {t}: --decode 0 runs aggregated, with no decode pool; \
                     give the workers' TP with --tp or --prefill-tp"
                ));
            }
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

    /// What the report judges and sizes the run by: `--slo`, each pool's TP
    /// (`--model` with `--tp`, `--prefill-tp`, `--decode-tp`; 1 with
    /// `--perf` alone) and `--gpu-hour-usd`;
    /// `None` when neither flag was given, so the report is as before.
    pub fn sizing(&self) -> Result<Option<handoff_deployment::ReportSizing>, String> {
        if self.slo.is_none() && self.gpu_hour_usd.is_none() {
            return Ok(None);
        }
        let price = match self.gpu_hour_usd {
            Some(p) if !(p.is_finite() && p > 0.0 && p <= 1e6) => {
                return Err(format!(
                    "--gpu-hour-usd {p}: must be a positive price of at most 1000000"
                ))
            }
            p => p,
        };
        let (p, d) = self.pool_hardware()?;
        let tp = |s: Option<Selected>| s.map_or(1, |s| s.model.tp);
        let (prefill_tp, decode_tp) = (tp(p), tp(d));
        Ok(Some(handoff_deployment::ReportSizing {
            slo: self.slo.clone(),
            gpus_per_rank: prefill_tp,
            decode_gpus_per_rank: (decode_tp != prefill_tp).then_some(decode_tp),
            gpu_hour_usd: price,
        }))
    }

    /// Engine specs for a prefill and a decode worker (the flags in their
    /// ranges: [`DeployArgs::check_ranges`] first).
    pub fn engines(&self) -> Result<(EngineSpec, EngineSpec), String> {
        let pass_speedup = self.pass_speedup_ratio()?;
        let (hw, decode_hw) = self.pool_hardware()?;
        let perf = self.perf()?;
        // One model for both pools unless their TPs select two profiles.
        let decode_perf = if self.hardware.pools_alike() || self.perf.is_some() {
            perf.clone()
        } else {
            self.perf_for(PoolSide::Decode)?
        };
        let backend = self.backend();
        let block_size = self
            .block_size
            .unwrap_or(if backend == Backend::Sglang { 1 } else { 16 });
        let spec = |kv_tokens: u64,
                    flag: &str,
                    perf: &PerfChoice,
                    hw: Option<&Selected>|
         -> Result<EngineSpec, String> {
            if kv_tokens < u64::from(block_size) {
                return Err(format!("--{flag}: must hold at least one block"));
            }
            Ok(EngineSpec {
                backend,
                kv_tokens,
                block_size,
                max_running: self
                    .max_running
                    .unwrap_or_else(|| EngineSpec::default_max_running(backend, kv_tokens)),
                max_batched_tokens: self.max_batched_tokens,
                speedup_ratio: pass_speedup,
                perf: perf.clone(),
                tp: hw.map_or(1, |s| s.model.tp),
                source_lease_ttl: self.source_lease_ttl(),
                decode_radix_cache: false,
                early_send_cached_prefix: true,
                sessions: Default::default(),
                max_loras: self.max_loras,
                kv_recompute_threshold: self.kv_recompute_threshold(),
            })
        };
        let (early_send, warning) = early_send_cached_prefix(
            self.disagg_prefill_early_send_cached_prefix.as_deref(),
            std::env::var_os(EARLY_SEND_ENV).as_deref(),
        )?;
        if let Some(w) = warning {
            eprintln!("{w}");
        }
        let decode = EngineSpec {
            decode_radix_cache: self.disaggregation_decode_enable_radix_cache,
            early_send_cached_prefix: early_send,
            ..spec(
                self.kv_tokens(true, decode_hw.as_ref())?,
                "decode-kv-tokens",
                &decode_perf,
                decode_hw.as_ref(),
            )?
        };
        let prefill = EngineSpec {
            early_send_cached_prefix: early_send,
            ..spec(
                self.kv_tokens(false, hw.as_ref())?,
                "prefill-kv-tokens",
                &perf,
                hw.as_ref(),
            )?
        };
        Ok((prefill, decode))
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

    /// The report's sizing of `d`.
    fn sizing_of(d: &DeployArgs) -> handoff_deployment::ReportSizing {
        d.sizing().unwrap().unwrap()
    }

    #[test]
    fn each_pool_selects_and_sizes_at_its_own_tp() {
        let base = [
            "--model",
            "qwen3-32b",
            "--gpu",
            "h100",
            "--gpu-hour-usd",
            "2",
        ];
        let with = |more: &[&str]| deploy(&[&base[..], more].concat()).unwrap();
        let d = with(&["--prefill-tp", "2", "--decode-tp", "4"]);
        let (p, dec) = d.engines().unwrap();
        assert_eq!(p.perf.label(), "profile:qwen3-32b-h100-tp2-vllm");
        assert_eq!(dec.perf.label(), "profile:qwen3-32b-h100-tp4-vllm");
        assert_eq!((p.tp, dec.tp), (2, 4));
        let model = |tp| {
            args("qwen3-32b", "h100", Some(tp))
                .select(Backend::Vllm)
                .unwrap()
                .unwrap()
                .model
        };
        let (m2, m4) = (model(2), model(4));
        let pool = |m: &handoff_profiles::hardware::ModelOnGpu| {
            m.pool_tokens(None, 16, 8192, 1024).unwrap()
        };
        assert_eq!((p.kv_tokens, dec.kv_tokens), (pool(&m2), pool(&m4)));
        assert!(dec.kv_tokens > p.kv_tokens);
        // The handoff moves what the decode pool holds: 4 ranks × 2 heads.
        assert_eq!(m4.kv_bytes_per_token_per_rank() * 4, bytes_per_token(&d));
        assert_eq!(bytes_per_token(&d), m2.kv_bytes_per_token());
        // GPUs: 2 prefill workers × TP2 + 2 decode workers × TP4.
        let z = sizing_of(&d);
        assert_eq!((z.gpus_per_rank, z.decode_gpus_per_rank), (2, Some(4)));
        assert_eq!(z.gpus(4, 2), 12);
        let (cfg, specs) = d.deployment(true).unwrap();
        assert_eq!(specs.iter().map(|s| s.tp).collect::<Vec<_>>(), [2, 2, 4, 4]);
        let fan = handoff_deployment::rank_fan(&cfg);
        assert_eq!(
            (fan.prefill_tp(), fan.decode_tp(), fan.transfers()),
            (2, 4, 4)
        );
        assert_eq!(handoff_deployment::engine_config(&cfg).transfer_fan, fan);
        // --decode-tp alone: the prefill pool keeps --tp (here the
        // smallest profile's, TP1).
        let d = with(&["--decode-tp", "2"]);
        let (p, dec) = d.engines().unwrap();
        assert_eq!((p.tp, dec.tp), (1, 2));
        assert_eq!(sizing_of(&d).gpus(4, 2), 2 + 4);
        // Equal TPs, however spelled, are one pool: no decode field, a
        // uniform fan.
        for same in [
            &["--tp", "2"][..],
            &["--prefill-tp", "2", "--decode-tp", "2"],
        ] {
            let d = with(same);
            let (p, dec) = d.engines().unwrap();
            assert_eq!((p.tp, dec.tp, p.kv_tokens), (2, 2, dec.kv_tokens));
            assert_eq!(sizing_of(&d).decode_gpus_per_rank, None);
            let (cfg, _) = d.deployment(true).unwrap();
            assert!(handoff_deployment::rank_fan(&cfg).is_uniform());
        }
        // The default run: TP1 everywhere, no sizing, a uniform fan.
        let d = deploy(&[]).unwrap();
        let (cfg, specs) = d.deployment(true).unwrap();
        assert!(specs.iter().all(|s| s.tp == 1) && cfg.sizing.is_none());
        assert_eq!(
            handoff_deployment::rank_fan(&cfg),
            handoff_engine::RankFan::UNIFORM
        );
    }

    #[test]
    fn a_pool_tp_without_a_profile_or_a_pool_is_refused() {
        let base = ["--model", "qwen3-32b", "--gpu", "h100"];
        let err = |more: &[&str]| {
            deploy(&[&base[..], more].concat())
                .unwrap()
                .deployment(true)
                .unwrap_err()
        };
        let e = err(&["--decode-tp", "3"]);
        assert!(
            e.contains("--decode-tp 3 --backend vllm: no profile")
                && e.contains("--model qwen3-32b --gpu h100 --tp 4 --backend vllm"),
            "{e}"
        );
        let e = err(&["--backend", "sglang", "--prefill-tp", "4"]);
        assert!(
            e.contains("--prefill-tp 4 --backend sglang: no profile"),
            "{e}"
        );
        let e = err(&["--decode", "0", "--decode-tp", "2"]);
        assert!(
            e.starts_with("--decode-tp 2: --decode 0 runs aggregated"),
            "{e}"
        );
        let e = deploy(&["--perf", "dynamo-polynomial", "--decode-tp", "2"])
            .unwrap()
            .engines()
            .unwrap_err();
        assert!(e.starts_with("--decode-tp 2: needs --model"), "{e}");
        // One profile file times both pools: a pool TP not the file's is
        // the file's mismatch.
        let path = std::env::temp_dir().join(format!("pooltp-{}.json", std::process::id()));
        let text = crate::hardware_args::built_in_text("profiles/aic/qwen3-32b-h100-tp2-vllm.json")
            .unwrap();
        std::fs::write(&path, text).unwrap();
        let perf = format!("profile:{}", path.display());
        let e = err(&["--perf", &perf, "--decode-tp", "4"]);
        assert!(e.contains("--decode-tp 4 but the file is for TP 2"), "{e}");
        let d = deploy(&[&base[..], &["--perf", &perf, "--tp", "2"]].concat()).unwrap();
        assert_eq!(d.engines().unwrap().1.tp, 2);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn expert_parallel_flags_select_the_layout_and_size_each_rank_s_pool() {
        let base = ["--model", "qwen3-30b-a3b", "--gpu", "b200", "--tp", "1"];
        let with = |more: &[&str]| deploy(&[&base[..], more].concat()).unwrap();
        let d = with(&["--dp-size", "4", "--enable-expert-parallel"]);
        assert!(d.hardware.expert_parallel());
        let (p, dec) = d.engines().unwrap();
        // The report's config names the layout with the profile.
        assert_eq!(
            p.perf.label(),
            "profile:qwen3-30b-a3b-b200-tp1-dp4-ep4-vllm"
        );
        assert_eq!(dec.perf.label(), p.perf.label());
        let (hw, _) = d.pool_hardware().unwrap();
        let m = hw.unwrap().model;
        assert_eq!(m.parallel.map(|l| l.moe_ep), Some(4));
        // Each DP rank's pool: one GPU less a quarter of the experts.
        assert_eq!(p.kv_tokens, m.pool_tokens(None, 16, 8192, 1024).unwrap());
        let tp1 = with(&[]).engines().unwrap().0;
        assert!(
            p.kv_tokens > tp1.kv_tokens + 400_000,
            "{} vs {}",
            p.kv_tokens,
            tp1.kv_tokens
        );
        // A rank's KV bytes per token are TP1's: its own sequences, whole.
        assert_eq!(bytes_per_token(&d), bytes_per_token(&with(&[])));
        // Four rank schedulers per worker, one GPU each.
        let (cfg, specs) = d.deployment(true).unwrap();
        assert_eq!(cfg.dp.dp_size(), 4);
        assert!(specs
            .iter()
            .all(|s| s.tp == 1 && s.kv_tokens == p.kv_tokens));
        // SGLang's spelling of the same layout.
        let sg = with(&["--dp-size", "4", "--ep-size", "4"]);
        assert_eq!(sg.engines().unwrap().0.perf.label(), p.perf.label());
        let e = with(&["--dp-size", "4", "--ep-size", "8"])
            .engines()
            .unwrap_err();
        assert!(
            e.starts_with("--ep-size 8: must be --tp 1 × --dp-size 4 = 4"),
            "{e}"
        );
    }

    #[test]
    fn each_pool_takes_its_own_expert_parallelism() {
        let d = deploy(&[
            "--model",
            "qwen3-30b-a3b",
            "--gpu",
            "b200",
            "--dp-size",
            "2",
            "--decode-expert-parallel",
        ])
        .unwrap();
        let (p, dec) = d.engines().unwrap();
        assert_eq!(p.perf.label(), "profile:qwen3-30b-a3b-b200-tp1-dp2-vllm");
        assert_eq!(
            dec.perf.label(),
            "profile:qwen3-30b-a3b-b200-tp1-dp2-ep2-vllm"
        );
        // Both shed half the experts (MoE TP 2 or EP 2): equal pools.
        assert_eq!(p.kv_tokens, dec.kv_tokens);
        // No layout profile for DP 4 without EP: refused, naming the EP one.
        let e = deploy(&[
            "--model",
            "qwen3-30b-a3b",
            "--gpu",
            "b200",
            "--dp-size",
            "4",
        ])
        .unwrap()
        .engines()
        .unwrap_err();
        let refused = |flags: &[&str]| deploy(flags).unwrap().engines().unwrap_err();
        let no_model = refused(&["--perf", "dynamo-polynomial", "--enable-expert-parallel"]);
        assert!(no_model.contains("needs --model with --gpu"), "{no_model}");
        let agg = refused(&[
            "--model",
            "qwen3-30b-a3b",
            "--gpu",
            "b200",
            "--decode",
            "0",
            "--decode-expert-parallel",
        ]);
        assert!(
            agg.starts_with("--decode-expert-parallel: --decode 0 runs aggregated"),
            "{agg}"
        );
        assert!(
            e.contains("--dp-size 4 --backend vllm: no profile")
                && e.contains("--tp 1 --dp-size 4 --enable-expert-parallel --backend vllm"),
            "{e}"
        );
    }

    #[test]
    fn a_latent_attention_model_sizes_by_its_recorded_cell() {
        let d = deploy(&[
            "--model",
            "deepseek-v3",
            "--gpu",
            "h200",
            "--dp-size",
            "8",
            "--enable-expert-parallel",
        ])
        .unwrap();
        let (p, _) = d.engines().unwrap();
        assert_eq!(p.perf.label(), "profile:deepseek-v3-h200-tp1-dp8-ep8-vllm");
        // 61 layers × (512 + 64) latent × 1 byte (fp8), whole on the rank.
        assert_eq!(bytes_per_token(&d), 35_136);
        let (hw, _) = d.pool_hardware().unwrap();
        let m = hw.unwrap().model;
        assert_eq!(p.kv_tokens, m.pool_tokens(None, 16, 8192, 1024).unwrap());
        assert!(p.kv_tokens > 100_000, "{}", p.kv_tokens);
    }
}
