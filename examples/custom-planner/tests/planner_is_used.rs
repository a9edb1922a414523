//! The downstream planner, not a built-in, sizes the fleet.

use custom_planner_example::{replay, QueuePlanner};
use handoff_core::Duration;
use std::cell::Cell;
use std::rc::Rc;

#[test]
fn the_queue_planner_grows_the_fleet_under_the_burst_and_shrinks_it_after() {
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
    assert_eq!((r.completed_requests, r.failed_requests), (1200, 0));
    assert!(ticks.get() >= 10, "{}", ticks.get());
    let s = r.scaling.as_ref().expect("an elastic run");
    assert_eq!(s.planner.as_deref(), Some("queue"));
    let at = |t: f64| {
        let p = s
            .workers_over_time
            .iter()
            .rev()
            .find(|p| p.t_s <= t)
            .expect("a point");
        p.prefill + p.decode
    };
    let peak = s
        .workers_over_time
        .iter()
        .map(|p| p.prefill + p.decode)
        .max()
        .unwrap();
    assert_eq!(at(1.0), 2);
    assert!(peak > 2, "{:?}", s.workers_over_time);
    let last = s.workers_over_time.last().unwrap();
    assert!(
        last.prefill + last.decode < peak,
        "{:?}",
        s.workers_over_time
    );
}
