//! What a replay measured: request latencies in the shape of Dynamo's replay
//! report, plus the lifecycle figures this project exists for (stranding,
//! reservation waits, transfers, held and reserved block-time per worker).

mod details;
mod recorder;
mod records;
mod run;
mod samples;
mod scale_costs;
mod scaling;
mod sections;
mod slo;
mod stale;
mod steady;
#[cfg(test)]
mod tests;
mod units;

pub use details::Details;
pub use recorder::Recorder;
pub use records::{HandoffTimes, RequestRecord, RequestSink};
pub use run::{ModelReport, RunReport, WorkloadReport};
pub use scale_costs::{
    ScaleCosts, SloWindow, StrandedAndWindows, StrandedKv, Unwinds, DEFAULT_SLO_WINDOW,
    MAX_SLO_WINDOWS,
};
pub use scaling::{FleetCountPoint, ScaleEventRow, ScalingReport};
pub use sections::{
    BeyondGridReport, CudaGraphReport, EngineReport, FlatLatencies, Lifecycle, OverheadsReport,
    Report, ReportConfig, TimersReport, TransferReport, WorkerReport,
};
pub use slo::{SizingReport, SloReport, SloSample, SloTargetReport, SloVerdicts};
pub use stale::{StaleKv, StaleReads};
pub use steady::{RunWarning, STEADY_LIFETIMES};
