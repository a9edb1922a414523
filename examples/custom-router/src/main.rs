//! Runs a replay with the [`LeastBooked`] routing policy and prints a
//! one-line summary; exits non-zero if a request failed or the policy was
//! never called.

use custom_router_example::{replay, Calls, LeastBooked};
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn main() -> ExitCode {
    let calls = Arc::new(Calls::default());
    let (report, records) = replay(200, LeastBooked::mode(calls.clone()));
    println!(
        "custom-router-example: router={} requests={} completed={} failed={} \
         policy_calls={} (prefill {}, decode {}) ttft_p50={:.1}ms ttft_p99={:.1}ms records={}",
        report.config.router,
        report.num_requests,
        report.completed_requests,
        report.failed_requests,
        calls.total(),
        calls.prefill.load(Ordering::Relaxed),
        calls.decode.load(Ordering::Relaxed),
        report.ttft_ms.p50,
        report.ttft_ms.p99,
        records.len(),
    );
    if report.failed_requests > 0 || report.completed_requests != report.num_requests {
        eprintln!("custom-router-example: some requests did not complete");
        return ExitCode::FAILURE;
    }
    if calls.total() == 0 {
        eprintln!("custom-router-example: the routing policy was never called");
        return ExitCode::FAILURE;
    }
    if report.config.router != "least-booked" {
        eprintln!(
            "custom-router-example: the report names router {}",
            report.config.router
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
