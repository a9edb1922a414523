//! Runs an elastic replay driven by the [`QueuePlanner`] and prints a
//! one-line summary; exits non-zero if a request failed, the planner never
//! ran or the fleet never changed.

use custom_planner_example::{replay, QueuePlanner};
use handoff_core::Duration;
use std::cell::Cell;
use std::process::ExitCode;
use std::rc::Rc;

fn main() -> ExitCode {
    let ticks = Rc::new(Cell::new(0));
    let out = replay(
        1200,
        QueuePlanner {
            high: 8.0,
            low: 2.0,
            interval: Duration::from_secs(5),
            ticks: ticks.clone(),
        },
    );
    let r = &out.report;
    let Some(s) = r.scaling.as_ref() else {
        eprintln!("custom-planner-example: the report has no scaling section");
        return ExitCode::FAILURE;
    };
    let peak = s
        .workers_over_time
        .iter()
        .map(|p| p.prefill + p.decode)
        .max()
        .unwrap_or(0);
    println!(
        "custom-planner-example: planner={} requests={} completed={} failed={} ticks={} \
         scale_events={} peak_workers={} gpu_hours={:.4}",
        s.planner.as_deref().unwrap_or("-"),
        r.num_requests,
        r.completed_requests,
        r.failed_requests,
        ticks.get(),
        s.events.len(),
        peak,
        s.gpu_hours,
    );
    if r.failed_requests > 0 || r.completed_requests != r.num_requests {
        eprintln!("custom-planner-example: some requests did not complete");
        return ExitCode::FAILURE;
    }
    if ticks.get() == 0 || s.events.is_empty() || peak <= 2 {
        eprintln!("custom-planner-example: the planner never changed the fleet");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
