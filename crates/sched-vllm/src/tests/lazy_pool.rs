//! A pool's memory follows the blocks a workload touches, not its size.

use super::{content, fixed_perf, req};
use crate::core::VllmCore;
use crate::VllmConfig;
use handoff_core::{Instant, SchedulerCommand, SchedulerCore, StepOutput};

/// A worker with 10^11 tokens of KV (6.25e9 blocks of 16) serves a few
/// requests; the pool reports its whole size, every block but the touched
/// ones is still free, and only the touched ones have entries.
#[test]
fn a_pool_of_10_to_the_11_tokens_runs_in_the_memory_its_requests_touch() {
    let cfg = VllmConfig::with_blocks(100_000_000_000 / 16);
    let mut core = VllmCore::with_perf(cfg, fixed_perf());
    for id in 1..=4u64 {
        let r = req(id, 1000, 20, &content(id % 2, 40));
        core.apply(SchedulerCommand::Submit(r), Instant::ZERO);
    }
    let mut out = StepOutput::default();
    let mut now = Instant::ZERO;
    let mut finished = 0;
    for _ in 0..200 {
        core.step(now, now, &mut out);
        finished += out.finished.len();
        now = now + out.duration;
        core.audit().unwrap();
        if core.is_drained() {
            break;
        }
    }
    assert_eq!(finished, 4);
    let cap = core.capacity();
    assert_eq!(cap.total_blocks, 6_250_000_000);
    assert_eq!(cap.active_blocks, 0);
    assert_eq!(core.free_blocks(), Some(6_250_000_000 - cap.cached_blocks));
    // Four prompts of 63 blocks plus their outputs, two pairs sharing a
    // prefix: no more than that was ever materialised.
    let touched = core.pool.materialised();
    assert!((64..=4 * 65).contains(&touched), "{touched} blocks touched");
}
