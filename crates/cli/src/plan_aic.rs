//! `plan --check-aic FILE`: AIConfigurator's saved picks, simulated
//! ([`handoff_plan::aic`] reads the file and sets each row beside its
//! simulation; [`crate::plan_run`] replays the rows). This file reads the
//! file, prints the table and writes `aic-check.json`.

use crate::plan_run::{model_and_tps, ReplayRunner};
use handoff_deployment::SloSpec;
use handoff_plan::aic::{self, AicFile};
use handoff_workload::file::FileKind;
use std::path::Path;

/// Simulates every row of `file` (closed loop at its concurrency, its
/// lengths, `--slo`) on `pool`, prints each estimate beside the simulated
/// mean, p50, p90 and p99, and writes `aic-check.json` and the reports to
/// `out`. A row that cannot be simulated (a line that is not a row, a
/// length of 0) is reported on its line with why, counted on stderr, and
/// the others run.
pub fn check(
    file: &Path,
    slo: &SloSpec,
    price: Option<f64>,
    base: &[String],
    out: &Path,
    pool: &rayon::ThreadPool,
) -> Result<(), String> {
    let name = file.display().to_string();
    let text = handoff_workload::file::read_to_string("--check-aic", file, FileKind::AicCsv)
        .map_err(|e| e.to_string())?;
    let parsed: AicFile = aic::parse(&text).map_err(|error| {
        handoff_plan::PlanError::Aic {
            file: name.clone(),
            error,
        }
        .to_string()
    })?;
    std::fs::create_dir_all(out).map_err(|e| format!("--out {}: {e}", out.display()))?;
    let mut flags: Vec<String> = base.to_vec();
    flags.extend(["--slo".into(), slo.to_string()]);
    if let Some(p) = price {
        flags.extend(["--gpu-hour-usd".into(), p.to_string()]);
    }
    let (add, tps) = model_and_tps(&[], &flags)?;
    let runner = ReplayRunner {
        pool,
        out,
        total: parsed.rows.len(),
        flags: add.into_iter().chain(flags).collect(),
        search: None,
    };
    let checked = aic::check(&parsed, slo, &tps, out, &runner);
    for line in checked.table() {
        out!("{line}");
    }
    if checked.refused > 0 {
        eprintln!(
            "--check-aic {name}: {} of {} rows could not be simulated (each on its \
             line above); the others ran",
            checked.refused, checked.lines
        );
    }
    let path = out.join("aic-check.json");
    let text =
        serde_json::to_string_pretty(&checked.summary(&name, slo)).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}
