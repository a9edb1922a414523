//! A model served on a GPU (`--model`, `--gpu`, `--tp`): what one token of
//! its KV weighs, and how large a KV pool the engine carves out of the GPU's
//! memory.
//!
//! The facts come from the `deployment` section of a profile exported by
//! `profiles/derive_from_aic.py` (the model's Hugging Face config as
//! AIConfigurator ships it, the GPU's memory from AIConfigurator's system
//! file). The sizing follows each engine:
//!
//! - **vLLM** (`vllm/v1/worker/gpu_worker.py`, `Worker.determine_available_memory`;
//!   `vllm/v1/core/kv_cache_utils.py`, `get_num_blocks`): the KV cache gets
//!   `gpu_memory_utilization` × the GPU's memory minus what is not KV
//!   (weights, the peak activation of a profiling pass of
//!   `max_num_batched_tokens`, memory outside torch), cut into whole blocks
//!   of `block_size` tokens of every layer;
//! - **SGLang** (`srt/model_executor/model_runner.py`,
//!   `ModelRunner.profile_max_num_token`; `srt/server_args.py`,
//!   `_handle_gpu_memory_settings`): the free memory after loading weights,
//!   less `(1 - mem_fraction_static)` of the GPU, divided by the cell size
//!   (KV bytes of one token on one rank); `mem_fraction_static` defaults to
//!   the GPU's memory less a reserve for activations and CUDA graphs.
//!
//! The peak activation vLLM measures is estimated here (the MLP's gate and
//! up projections of a full batch of tokens, and fp32 logits for a full
//! batch of sequences), so pools are close to, not equal to, a real
//! engine's log line; `--prefill-kv-tokens`/`--decode-kv-tokens` given
//! explicitly win.

use handoff_core::Backend;

/// Memory a rank uses outside torch's allocator (CUDA context, NCCL
/// buffers): what vLLM's `non_torch_increase` and SGLang's free-memory
/// probe see before the first KV byte; an estimate.
pub const NON_TORCH_BYTES: u64 = 512 << 20;

/// vLLM's default `gpu_memory_utilization` (`vllm/config/cache.py`).
pub const VLLM_GPU_MEMORY_UTILIZATION: f64 = 0.9;

/// SGLang's `cuda_graph_max_bs` assumed for its memory reserve (its
/// `_handle_gpu_memory_settings` picks 256 on 80 GiB-class GPUs at TP below
/// 4; every further graph batch adds 2 MiB to the reserve).
pub const SGLANG_CUDA_GRAPH_MAX_BS: u64 = 256;

/// Most GPUs one engine's layout spans (`tp × attention_dp`).
pub const MAX_LAYOUT_GPUS: u32 = 64;

/// A mixture-of-experts engine's parallel layout as AIConfigurator models
/// it (`sdk/config.py`, `ModelConfig`: `tp_size`, `attention_dp_size`,
/// `moe_tp_size`, `moe_ep_size`): attention runs at `tp` within each of
/// `attention_dp` data-parallel ranks, each rank with its own scheduler and
/// KV pool; the experts span all `tp × attention_dp` GPUs as `moe_tp ×
/// moe_ep` (`ModelConfig.resolve_moe_parallelism` requires the two widths
/// equal). vLLM's `--enable-expert-parallel` (`FusedMoEParallelConfig.make`)
/// and SGLang's `--ep-size` = TP × DP with DP attention are `moe_ep = tp ×
/// attention_dp`, `moe_tp = 1`; vLLM's DP without EP shards each expert
/// over all of them (`moe_tp = tp × attention_dp`). Either way the MoE
/// layer couples the DP ranks' passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParallelLayout {
    /// Attention tensor-parallel GPUs of one DP rank.
    pub tp: u32,
    /// Attention data-parallel ranks.
    pub attention_dp: u32,
    /// Expert tensor parallelism.
    pub moe_tp: u32,
    /// Expert parallelism.
    pub moe_ep: u32,
}

impl ParallelLayout {
    /// GPUs the layout spans: `tp × attention_dp`.
    pub fn gpus(&self) -> u32 {
        self.tp.saturating_mul(self.attention_dp)
    }

    /// Whether the experts are spread over every rank (vLLM's
    /// `--enable-expert-parallel`, SGLang's `--ep-size` = TP × DP).
    pub fn expert_parallel(&self) -> bool {
        self.moe_ep > 1 && self.moe_ep == self.gpus() && self.moe_tp == 1
    }

    /// Why the layout is impossible, if it is: a size outside
    /// 1..=[`MAX_LAYOUT_GPUS`], more GPUs than that, or experts that do
    /// not span the attention width.
    pub fn check(&self) -> Result<(), String> {
        let sizes = [
            ("tp", self.tp),
            ("attention_dp", self.attention_dp),
            ("moe_tp", self.moe_tp),
            ("moe_ep", self.moe_ep),
        ];
        if let Some((k, v)) = sizes
            .iter()
            .find(|(_, v)| !(1..=MAX_LAYOUT_GPUS).contains(v))
        {
            return Err(format!("{k} {v}: must be 1..={MAX_LAYOUT_GPUS}"));
        }
        if self.gpus() > MAX_LAYOUT_GPUS {
            return Err(format!(
                "tp {} × attention_dp {} = {} GPUs: at most {MAX_LAYOUT_GPUS}",
                self.tp,
                self.attention_dp,
                self.gpus()
            ));
        }
        if self.moe_tp * self.moe_ep != self.gpus() {
            return Err(format!(
                "moe_tp {} × moe_ep {} must equal tp × attention_dp = {}",
                self.moe_tp,
                self.moe_ep,
                self.gpus()
            ));
        }
        Ok(())
    }
}

impl std::fmt::Display for ParallelLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TP {} × DP {}, MoE TP {} × EP {}",
            self.tp, self.attention_dp, self.moe_tp, self.moe_ep
        )
    }
}

/// A model on a GPU, as a profile's `deployment` section records it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelOnGpu {
    /// The engine the profile times.
    pub backend: Backend,
    /// The engine's version in AIConfigurator's database.
    pub backend_version: String,
    /// The model's short name (`--model`).
    pub model: String,
    /// Its Hugging Face id.
    pub hf_id: String,
    /// The GPU's short name (`--gpu`).
    pub gpu: String,
    /// Memory of one GPU, bytes.
    pub gpu_memory_bytes: u64,
    /// Tensor-parallel ranks (`--tp`), one GPU each.
    pub tp: u32,
    /// Transformer layers.
    pub layers: u32,
    /// Key/value heads of one layer.
    pub kv_heads: u32,
    /// Dimension of one head.
    pub head_dim: u32,
    /// Bytes of one KV element (2: bf16).
    pub kv_dtype_bytes: u32,
    /// Bytes of the weights, all ranks together.
    pub weight_bytes: u64,
    /// The model's context length (`max_position_embeddings`).
    pub max_context: u64,
    /// Hidden size.
    pub hidden_size: u64,
    /// MLP width a token passes through (the experts it is routed to, for
    /// a mixture of experts).
    pub active_intermediate_size: u64,
    /// Vocabulary size.
    pub vocab_size: u64,
    /// The MoE layout the tables time, if the file records one (`None`:
    /// TP only, the DP ranks, if any, independent engines).
    pub parallel: Option<ParallelLayout>,
    /// KV bytes of one token on one rank as the file records them (the
    /// engine's cell size; a latent-attention model's latent, whole on
    /// every rank), else `None`: computed from the heads.
    pub recorded_kv_bytes_per_rank: Option<u64>,
    /// Bytes of the routed experts, all ranks together, when recorded (0:
    /// not recorded, every weight split over TP).
    pub expert_weight_bytes: u64,
}

/// Why a pool could not be sized.
#[derive(Clone, Debug, PartialEq)]
pub enum SizingError {
    /// The memory fraction is not in (0, 1].
    Fraction(f64),
    /// Weights and reserves leave no room for KV: the bytes that remain.
    NoRoom {
        /// Bytes per rank left for KV (zero or negative).
        left: i128,
    },
}

impl std::fmt::Display for SizingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SizingError::Fraction(x) => {
                write!(f, "--gpu-memory-utilization {x}: must be in (0, 1]")
            }
            SizingError::NoRoom { left } => write!(
                f,
                "the model's weights and the engine's reserves leave {left} bytes per GPU for KV"
            ),
        }
    }
}

impl std::error::Error for SizingError {}

impl ModelOnGpu {
    /// KV heads one rank holds: the heads split over the ranks, at least one
    /// (both engines replicate KV heads when TP exceeds them: vLLM's
    /// `ModelConfig.get_num_kv_heads`, SGLang's `get_num_kv_heads`).
    pub fn kv_heads_per_rank(&self) -> u64 {
        (u64::from(self.kv_heads) / u64::from(self.tp.max(1))).max(1)
    }

    /// KV bytes one token occupies on one rank: the file's recorded value,
    /// else K and V of every layer (SGLang's `cell_size`; vLLM's page size
    /// over the block size, times the layers). An attention DP rank holds
    /// the KV of its own sequences only, so this is per rank of one DP
    /// rank's TP group whatever the DP size.
    pub fn kv_bytes_per_token_per_rank(&self) -> u64 {
        if let Some(b) = self.recorded_kv_bytes_per_rank {
            return b;
        }
        (2 * u64::from(self.layers))
            .saturating_mul(self.kv_heads_per_rank())
            .saturating_mul(u64::from(self.head_dim))
            .saturating_mul(u64::from(self.kv_dtype_bytes))
    }

    /// KV bytes one token occupies over all ranks: what a prefill-to-decode
    /// handoff moves per token (`--bytes-per-token`).
    pub fn kv_bytes_per_token(&self) -> u64 {
        self.kv_bytes_per_token_per_rank()
            .saturating_mul(u64::from(self.tp.max(1)))
    }

    /// Weight bytes one GPU holds: with a recorded layout and experts, the
    /// rest split over TP (every DP rank holds its attention) and the
    /// experts over all `moe_tp × moe_ep` GPUs (vLLM's and SGLang's EP
    /// place `experts / ep` on a rank); else all of them split over TP.
    pub fn weights_per_rank(&self) -> u64 {
        let tp = u64::from(self.tp.max(1));
        match self.parallel {
            Some(p) if self.expert_weight_bytes > 0 => {
                let experts = self.expert_weight_bytes.min(self.weight_bytes);
                let spread = u64::from(p.moe_tp.max(1)).saturating_mul(u64::from(p.moe_ep.max(1)));
                (self.weight_bytes - experts) / tp + experts / spread
            }
            _ => self.weight_bytes / tp,
        }
    }

    /// GPUs of one engine: `tp × attention_dp` with a recorded layout, else
    /// TP.
    pub fn engine_gpus(&self) -> u32 {
        self.parallel.map_or(self.tp, |p| p.gpus())
    }

    /// vLLM's estimated peak activation of its profiling pass: the gate and
    /// up projections of `max_batched_tokens` tokens (bf16, split over the
    /// ranks) and fp32 logits of `max_seqs` sampled sequences.
    fn vllm_activation_bytes(&self, max_batched_tokens: u64, max_seqs: u64) -> u64 {
        let mlp = max_batched_tokens
            .saturating_mul(4)
            .saturating_mul(self.active_intermediate_size)
            / u64::from(self.tp.max(1));
        let logits = max_seqs.saturating_mul(self.vocab_size).saturating_mul(4);
        mlp.saturating_add(logits)
    }

    /// SGLang's default `mem_fraction_static` for a chunk of
    /// `chunked_prefill` tokens: the GPU's memory less a reserve (MiB) of
    /// 512, 1.5 per chunk token (at least 2048 tokens), 2 per CUDA-graph
    /// batch and 1024 per 8 ranks (SGLang's `tp_size`, which with DP
    /// attention is every GPU of the engine), at least 10 GiB on GPUs over
    /// 60 GiB;
    /// rounded to 3 decimals as SGLang does.
    pub fn sglang_mem_fraction_static(&self, chunked_prefill: u64) -> f64 {
        let gpu_mib = self.gpu_memory_bytes as f64 / f64::from(1u32 << 20);
        let mut reserved = 512.0
            + chunked_prefill.max(2048) as f64 * 1.5
            + SGLANG_CUDA_GRAPH_MAX_BS as f64 * 2.0
            + f64::from(self.engine_gpus()) / 8.0 * 1024.0;
        if gpu_mib > 60.0 * 1024.0 {
            reserved = reserved.max(10.0 * 1024.0);
        }
        ((gpu_mib - reserved) / gpu_mib * 1000.0).round() / 1000.0
    }

    /// The KV pool of one worker, in tokens, as its engine would size it:
    /// `fraction` is `--gpu-memory-utilization` (vLLM's
    /// `gpu_memory_utilization`, SGLang's `mem_fraction_static`; `None`:
    /// the engine's default), rounded down to whole `block_size` blocks.
    pub fn pool_tokens(
        &self,
        fraction: Option<f64>,
        block_size: u32,
        max_batched_tokens: u32,
        max_seqs: u32,
    ) -> Result<u64, SizingError> {
        if let Some(x) = fraction.filter(|x| !(x.is_finite() && *x > 0.0 && *x <= 1.0)) {
            return Err(SizingError::Fraction(x));
        }
        let total = i128::from(self.gpu_memory_bytes);
        let loaded = total - i128::from(self.weights_per_rank()) - i128::from(NON_TORCH_BYTES);
        let left = match self.backend {
            Backend::Sglang => {
                let frac = fraction.unwrap_or_else(|| {
                    self.sglang_mem_fraction_static(u64::from(max_batched_tokens))
                });
                loaded - (total as f64 * (1.0 - frac)) as i128
            }
            Backend::Vllm | Backend::TrtLlm => {
                let frac = fraction.unwrap_or(VLLM_GPU_MEMORY_UTILIZATION);
                let activation =
                    self.vllm_activation_bytes(u64::from(max_batched_tokens), u64::from(max_seqs));
                (total as f64 * frac) as i128 - (total - loaded) - i128::from(activation)
            }
        };
        let per_token = i128::from(self.kv_bytes_per_token_per_rank().max(1));
        let block = u64::from(block_size.max(1));
        let tokens = u64::try_from(left / per_token).unwrap_or(0) / block * block;
        if left <= 0 || tokens == 0 {
            return Err(SizingError::NoRoom { left });
        }
        Ok(tokens)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Qwen3-8B on one H100 as `profiles/aic/qwen3-8b-h100-tp1-*.json`
    /// record it.
    fn qwen3_8b(backend: Backend, tp: u32) -> ModelOnGpu {
        ModelOnGpu {
            backend,
            backend_version: "test".into(),
            model: "qwen3-8b".into(),
            hf_id: "Qwen/Qwen3-8B".into(),
            gpu: "h100".into(),
            gpu_memory_bytes: 80 << 30,
            tp,
            layers: 36,
            kv_heads: 8,
            head_dim: 128,
            kv_dtype_bytes: 2,
            weight_bytes: 16_381_452_288,
            max_context: 40_960,
            hidden_size: 4096,
            active_intermediate_size: 12_288,
            vocab_size: 151_936,
            parallel: None,
            recorded_kv_bytes_per_rank: None,
            expert_weight_bytes: 0,
        }
    }

    #[test]
    fn kv_bytes_follow_the_config() {
        let m = qwen3_8b(Backend::Vllm, 1);
        // 2 × 36 layers × 8 heads × 128 × 2 bytes = 144 KiB.
        assert_eq!(m.kv_bytes_per_token(), 147_456);
        let tp2 = qwen3_8b(Backend::Vllm, 2);
        assert_eq!(tp2.kv_bytes_per_token_per_rank(), 73_728);
        assert_eq!(tp2.kv_bytes_per_token(), 147_456);
        // More ranks than KV heads: each rank keeps one head.
        let tp16 = qwen3_8b(Backend::Vllm, 16);
        assert_eq!(tp16.kv_heads_per_rank(), 1);
        assert_eq!(tp16.kv_bytes_per_token(), 16 * 18_432);
    }

    #[test]
    fn vllm_sizes_the_pool_from_the_utilization() {
        let m = qwen3_8b(Backend::Vllm, 1);
        let t = m.pool_tokens(None, 16, 8192, 1024).unwrap();
        // 0.9 × 80 GiB − 15.26 GiB weights − 0.5 GiB − (8192 × 2 × 12288 × 2
        // + 1024 × 151936 × 4) bytes of activation = 55.7 GiB.
        let left = (0.9 * (80u64 << 30) as f64) as i128
            - 16_381_452_288
            - (512 << 20)
            - (8192 * 2 * 12_288 * 2 + 1024 * 151_936 * 4);
        assert_eq!(t, (left / 147_456) as u64 / 16 * 16);
        assert_eq!(t % 16, 0);
        assert!((380_000..410_000).contains(&t), "{t}");
        // A lower utilization, a smaller pool; more ranks, a larger one.
        assert!(m.pool_tokens(Some(0.5), 16, 8192, 1024).unwrap() < t);
        let tp2 = qwen3_8b(Backend::Vllm, 2);
        assert!(tp2.pool_tokens(None, 16, 8192, 1024).unwrap() > 2 * t);
    }

    #[test]
    fn sglang_reserves_by_its_heuristic() {
        let m = qwen3_8b(Backend::Sglang, 1);
        // 512 + 8192 × 1.5 + 256 × 2 + 128 = 13440 MiB of 81920: 0.836.
        assert_eq!(m.sglang_mem_fraction_static(8192), 0.836);
        // A small chunk: the 10 GiB floor of large GPUs.
        assert_eq!(m.sglang_mem_fraction_static(1024), 0.875);
        let t = m.pool_tokens(None, 1, 8192, 1024).unwrap();
        let total = (80u64 << 30) as f64;
        let left = ((80u64 << 30) - 16_381_452_288 - (512 << 20)) as i128
            - (total * (1.0 - 0.836)) as i128;
        assert_eq!(t, (left / 147_456) as u64);
        assert_eq!(m.pool_tokens(Some(0.836), 1, 8192, 1024), Ok(t));
    }

    #[test]
    fn impossible_sizes_are_refused() {
        let m = qwen3_8b(Backend::Vllm, 1);
        for bad in [0.0, -0.1, 1.5, f64::NAN] {
            assert!(matches!(
                m.pool_tokens(Some(bad), 16, 8192, 1024),
                Err(SizingError::Fraction(_))
            ));
        }
        // 20% of 80 GiB does not hold 15 GiB of weights and the reserves.
        let e = m.pool_tokens(Some(0.2), 16, 8192, 1024).unwrap_err();
        assert!(matches!(e, SizingError::NoRoom { left } if left < 0), "{e}");
        let small = ModelOnGpu {
            gpu_memory_bytes: 16 << 30,
            ..qwen3_8b(Backend::Sglang, 1)
        };
        assert!(small.pool_tokens(None, 1, 8192, 1024).is_err());
    }

    /// Qwen3-30B-A3B on a B200 as `qwen3-30b-a3b-b200-tp1*-vllm.json`
    /// record it, at `layout`.
    fn qwen3_30b(layout: Option<ParallelLayout>) -> ModelOnGpu {
        ModelOnGpu {
            model: "qwen3-30b-a3b".into(),
            gpu: "b200".into(),
            gpu_memory_bytes: 193_273_528_320,
            layers: 48,
            kv_heads: 4,
            weight_bytes: 61_064_220_672,
            hidden_size: 2048,
            active_intermediate_size: 6144,
            parallel: layout,
            expert_weight_bytes: if layout.is_some() { 57_982_058_496 } else { 0 },
            ..qwen3_8b(Backend::Vllm, 1)
        }
    }

    const EP4: ParallelLayout = ParallelLayout {
        tp: 1,
        attention_dp: 4,
        moe_tp: 1,
        moe_ep: 4,
    };

    #[test]
    fn expert_parallel_ranks_hold_a_share_of_the_experts_and_their_own_kv() {
        let tp1 = qwen3_30b(None);
        let ep4 = qwen3_30b(Some(EP4));
        // Each DP rank holds the KV of its own sequences: the cell size is
        // TP1's, 2 × 48 layers × 4 heads × 128 × 2 bytes.
        assert_eq!(ep4.kv_bytes_per_token_per_rank(), 98_304);
        assert_eq!(ep4.kv_bytes_per_token(), tp1.kv_bytes_per_token());
        // Weights: the non-expert 3.08 GB whole, a quarter of the experts.
        assert_eq!(
            ep4.weights_per_rank(),
            (61_064_220_672 - 57_982_058_496) + 57_982_058_496 / 4
        );
        assert_eq!(tp1.weights_per_rank(), 61_064_220_672);
        // So each rank's pool is larger by the expert bytes it sheds.
        let pool = |m: &ModelOnGpu| m.pool_tokens(None, 16, 8192, 1024).unwrap();
        let gained = (pool(&ep4) - pool(&tp1)) as f64 * 98_304.0;
        let shed = (57_982_058_496u64 - 57_982_058_496 / 4) as f64;
        assert!(
            (gained - shed).abs() < 16.0 * 98_304.0,
            "{gained} vs {shed}"
        );
        assert_eq!(ep4.engine_gpus(), 4);
        assert!(EP4.expert_parallel());
        // MoE TP over the DP ranks (vLLM's DP without EP) sheds as much.
        let etp = ParallelLayout {
            moe_tp: 4,
            moe_ep: 1,
            ..EP4
        };
        assert!(!etp.expert_parallel());
        assert_eq!(
            qwen3_30b(Some(etp)).weights_per_rank(),
            ep4.weights_per_rank()
        );
    }

    #[test]
    fn a_recorded_cell_size_wins_and_sglang_reserves_for_every_gpu() {
        // DeepSeek-V3's latent: 61 layers × 576 × 1 byte on every rank.
        let mla = ModelOnGpu {
            recorded_kv_bytes_per_rank: Some(35_136),
            ..qwen3_8b(Backend::Vllm, 1)
        };
        assert_eq!(mla.kv_bytes_per_token_per_rank(), 35_136);
        let sg = |layout| ModelOnGpu {
            backend: Backend::Sglang,
            ..qwen3_30b(layout)
        };
        // SGLang's tp_size with DP attention is every GPU: 4/8 GiB more.
        let mib = 193_273_528_320.0 / f64::from(1u32 << 20);
        let want = |gpus: f64| {
            let reserved = (512.0 + 8192.0 * 1.5 + 512.0 + gpus / 8.0 * 1024.0).max(10240.0);
            ((mib - reserved) / mib * 1000.0).round() / 1000.0
        };
        assert_eq!(sg(None).sglang_mem_fraction_static(8192), want(1.0));
        assert_eq!(sg(Some(EP4)).sglang_mem_fraction_static(8192), want(4.0));
    }

    #[test]
    fn impossible_layouts_are_named() {
        assert_eq!(EP4.check(), Ok(()));
        let cases = [
            (ParallelLayout { tp: 0, ..EP4 }, "tp 0: must be 1..=64"),
            (
                ParallelLayout {
                    attention_dp: 65,
                    ..EP4
                },
                "attention_dp 65",
            ),
            (
                ParallelLayout {
                    tp: 16,
                    attention_dp: 8,
                    moe_ep: 64,
                    moe_tp: 2,
                },
                "= 128 GPUs: at most 64",
            ),
            (
                ParallelLayout { moe_ep: 2, ..EP4 },
                "moe_tp 1 × moe_ep 2 must equal tp × attention_dp = 4",
            ),
        ];
        for (bad, want) in cases {
            let e = bad.check().unwrap_err();
            assert!(e.contains(want), "{e}");
        }
        assert_eq!(EP4.to_string(), "TP 1 × DP 4, MoE TP 1 × EP 4");
    }

    proptest::proptest! {
        /// Any model and GPU, however absurd, is sized or refused with an
        /// error, never a panic, and a pool is whole blocks.
        #[test]
        fn sizing_never_panics(
            mem in 0u64..u64::MAX, weights in 0u64..u64::MAX, tp in 0u32..100,
            layers in 0u32..5000, heads in 0u32..5000, dim in 0u32..5000,
            inter in 0u64..u64::MAX, vocab in 0u64..u64::MAX, frac in -1.0f64..2.0,
            block in 0u32..5000, batched in 0u32..u32::MAX, seqs in 0u32..u32::MAX,
            sglang in proptest::bool::ANY,
        ) {
            let m = ModelOnGpu {
                backend: if sglang { Backend::Sglang } else { Backend::Vllm },
                gpu_memory_bytes: mem,
                weight_bytes: weights,
                tp,
                layers,
                kv_heads: heads,
                head_dim: dim,
                active_intermediate_size: inter,
                vocab_size: vocab,
                ..qwen3_8b(Backend::Vllm, 1)
            };
            let _ = m.kv_bytes_per_token();
            for f in [None, Some(frac)] {
                if let Ok(t) = m.pool_tokens(f, block, batched, seqs) {
                    proptest::prop_assert!(t > 0 && t % u64::from(block.max(1)) == 0);
                }
            }
        }
    }
}
