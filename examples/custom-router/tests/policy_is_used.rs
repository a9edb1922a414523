//! The custom policy, not a built-in, routes the replay.

use custom_router_example::{replay, Calls, Last, LeastBooked};
use handoff_router::{CustomPolicy, RouterMode};
use std::sync::atomic::Ordering;
use std::sync::Arc;

#[test]
fn always_last_puts_every_request_on_the_last_worker_of_each_pool() {
    let last = CustomPolicy::new("last", |_| Box::new(Last));
    let (report, records) = replay(40, RouterMode::Custom(last));
    assert_eq!(report.config.router, "last");
    assert_eq!(report.completed_requests, 40);
    assert_eq!(records.len(), 40);
    // Workers 0 and 1 prefill, 2 and 3 decode.
    for r in &records {
        assert_eq!(r.prefill_worker, Some(1), "request {}", r.id);
        assert_eq!(r.decode_worker, Some(3), "request {}", r.id);
    }
}

#[test]
fn least_booked_is_called_once_per_request_and_pool() {
    let calls = Arc::new(Calls::default());
    let (report, records) = replay(40, LeastBooked::mode(calls.clone()));
    assert_eq!(report.config.router, "least-booked");
    assert_eq!((report.completed_requests, report.failed_requests), (40, 0));
    assert_eq!(calls.prefill.load(Ordering::Relaxed), 40);
    assert_eq!(calls.decode.load(Ordering::Relaxed), 40);
    // It spreads load: both decode workers serve.
    for w in [2, 3] {
        assert!(
            records.iter().any(|r| r.decode_worker == Some(w)),
            "w{w} idle"
        );
    }
}
