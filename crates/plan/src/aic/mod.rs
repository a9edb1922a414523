//! AIConfigurator's saved picks: the reader of its CSV files, and
//! ([`check`]) each row simulated beside its estimate.
//!
//! AIConfigurator (pinned: 0.11.0, ai-dynamo/aiconfigurator at 095f58a)
//! saves `best_config_topn.csv` and `pareto.csv` under its `--save-dir`
//! (`cli/report_and_save.py` `save_results`, pandas `to_csv`, header line,
//! comma-separated). Their columns are `ColumnsAgg` or `ColumnsDisagg`
//! (`aic-core/.../sdk/common.py`); the ones read here:
//! - `isl`, `osl`: fixed prompt and output lengths; `prefix`: tokens of
//!   the prompt already cached (only 0 is simulated);
//! - `concurrency`: requests in flight for the whole row (disaggregated:
//!   the decode worker's concurrency × `(d)workers`, `sdk/picking.py`
//!   `_build_disagg_summary_dict`);
//! - `model` (a Hugging Face id), `system` (an AIC system such as
//!   `h100_sxm`) and `backend`, disaggregated: `(p)system`, `(d)system`,
//!   `(p)backend`, `(d)backend`;
//! - aggregated rows: `tp`, `pp`, `dp`, `moe_tp`, `moe_ep`, `cp` of the one
//!   replica the row describes; disaggregated rows: `(p)workers`,
//!   `(d)workers` and the same six with `(p)` and `(d)` (AIC writes no
//!   `(d)cp`; a column a file lacks is 1);
//! - its estimates: `ttft` and `tpot` (ms), `request_latency` (ms),
//!   `tokens/s/gpu` (`tokens/s / num_total_gpus`), `tokens/s/user`
//!   (`1000 / tpot`), `num_total_gpus`.
//!
//! Each row runs closed loop at its concurrency on a generated workload of
//! its lengths, as the model, GPU and backend its columns name (a flag
//! given after `--` overrides them; [`Choice`]), each pool at its own TP
//! and every worker at the row's attention DP. A row whose layout the
//! mocker cannot model (expert, context or pipeline parallelism, MoE TP
//! across DP ranks, prefill and decode DP, system or backend that differ,
//! TensorRT-LLM, a prefix, a model/GPU/TP/backend no profile has, a GPU
//! count its layout does not make) is listed as skipped, with why
//! ([`Skip`]); one no engine could run is refused ([`Unsimulable`]).

pub mod check;
mod read;
mod resolve;

pub use check::{check, AicCheck, AicRun, Refusal};
pub use read::{parse, AicBackend, AicError, AicFile, AicRow, Parallel, Unsimulable, MAX_ROWS};
pub use resolve::{
    expert_parallel_skip, gpu_slug, Choice, Engine, PoolProfile, ProfileEntry, Resolved, Side, Skip,
};

#[cfg(test)]
mod tests;
