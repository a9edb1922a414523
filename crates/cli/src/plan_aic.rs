//! `plan --check-aic FILE`: AIConfigurator's saved picks, simulated
//! ([`handoff_plan::aic`] reads the file and sets each row beside its
//! simulation; [`crate::plan_run`] replays the rows). This file reads the
//! file, prints the table and writes `aic-check.json`.

use crate::plan_run::{aic_choice, AicRunner, ReplayRunner};
use handoff_deployment::SloSpec;
use handoff_plan::aic::{self, AicFile, Choice};
use handoff_workload::file::FileKind;
use std::path::Path;

/// Simulates every row of `file` (closed loop at its concurrency, its
/// lengths, `--slo`; the model, GPU and backend of its columns unless
/// `base`, the flags after `--`, names them, which is noted once) on
/// `pool`, prints each estimate beside the simulated mean, p50, p90 and
/// p99, and writes `aic-check.json` and the reports (named by CSV line) to
/// `out`. A row whose layout the mocker cannot model is skipped with why
/// and counted by reason; one that cannot be simulated (a line that is not
/// a row, a length of 0) is reported on its line with why, counted on
/// stderr; the others run.
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
    let (choice, given, catalogue) = aic_choice(base)?;
    let mut flags: Vec<String> = base.to_vec();
    flags.extend(["--slo".into(), slo.to_string()]);
    if let Some(p) = price {
        flags.extend(["--gpu-hour-usd".into(), p.to_string()]);
    }
    let overrides = overrides(&parsed, &choice);
    let total = parsed
        .rows
        .iter()
        .map(|r| r.line)
        .chain(parsed.bad.iter().map(|e| e.line()))
        .max()
        .unwrap_or(0)
        + 1;
    let runner = AicRunner {
        inner: ReplayRunner {
            pool,
            out,
            total,
            flags,
            search: None,
            axes: Default::default(),
        },
        given,
    };
    let checked = aic::check(&parsed, slo, &choice, &catalogue, out, &runner);
    for note in &overrides {
        out!("{note}");
    }
    for line in checked.table() {
        out!("{line}");
    }
    if let Some(line) = checked.skipped_line() {
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
    let summary = checked.summary(&name, slo, &overrides);
    let text = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
    std::fs::write(&path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))
}

/// One note per flag after `--` that overrides a column the file fills.
fn overrides(file: &AicFile, choice: &Choice) -> Vec<String> {
    let has = |f: &dyn Fn(&aic::AicRow) -> bool| file.rows.iter().any(f);
    let mut notes = Vec::new();
    if let Some(m) = choice
        .model
        .as_ref()
        .filter(|_| has(&|r| r.model.is_some()))
    {
        notes.push(format!(
            "--model {m} (after `--`) overrides the file's `model` column"
        ));
    }
    if let Some(g) = choice
        .gpu
        .as_ref()
        .filter(|_| has(&|r| r.system.iter().any(Option::is_some)))
    {
        notes.push(format!(
            "--gpu {g} (after `--`) overrides the file's `system` column"
        ));
    }
    if let Some(b) = choice
        .backend
        .filter(|_| has(&|r| r.backend.iter().any(Option::is_some)))
    {
        notes.push(format!(
            "--backend {} (after `--`) overrides the file's `backend` column",
            b.name()
        ));
    }
    notes
}
