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
//! - aggregated rows: `tp`, `pp`, `dp` of the one replica the row
//!   describes; disaggregated rows: `(p)workers`, `(d)workers`, `(p)tp`,
//!   `(d)tp`, `(p)pp`, `(d)pp`, `(p)dp`, `(d)dp`;
//! - its estimates: `ttft` and `tpot` (ms), `request_latency` (ms),
//!   `tokens/s/gpu` (`tokens/s / num_total_gpus`), `tokens/s/user`
//!   (`1000 / tpot`), `num_total_gpus`.
//!
//! Each row runs closed loop at its concurrency on a generated workload of
//! its lengths, with the same TP on both pools (a deployment has one TP):
//! a row whose prefill and decode TP differ, with pipeline parallelism,
//! with a prefix, or with a TP no profile has, is listed as skipped, with
//! why ([`Skip`]); one no engine could run is refused ([`Unsimulable`]).

pub mod check;
mod read;

pub use check::{check, AicCheck, AicRun, Refusal};
pub use read::{parse, AicError, AicFile, AicRow, Skip, Unsimulable, MAX_ROWS};

#[cfg(test)]
mod tests;
