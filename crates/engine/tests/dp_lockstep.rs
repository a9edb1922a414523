//! Lockstep ranks ([`DpCoupling::Lockstep`]): the ranks of an MoE worker
//! with expert parallelism run every forward pass together, so the slowest
//! rank sets every rank's pace, a rank with nothing to run is busy for the
//! group's pass (a dummy batch), and every rank's outputs come at the
//! group's end. Independent ranks (the default) step on their own.

use handoff_core::testing::FakeCore;
use handoff_core::{
    Backend, DpCoupling, DpLayout, Duration, Generation, HandoffConfig, HandoffPolicy, HostFinal,
    Instant, Request, RequestId, Worker, WorkerEvent, WorkerHost, WorkerId, WorkerRequest,
};
use handoff_engine::fault::FaultCounts;
use handoff_engine::{Director, Engine, EngineConfig, LocalHosts, Route};

/// Requests at fixed instants to fixed ranks; records every event with the
/// instant the engine handed it over.
#[derive(Default)]
struct Script {
    arrivals: Vec<(Instant, WorkerId, Request)>,
    seen: Vec<(WorkerId, Instant, WorkerEvent)>,
}

impl Director for Script {
    fn next_arrival(&mut self) -> Option<Instant> {
        self.arrivals.first().map(|a| a.0)
    }

    fn arrive(&mut self, _now: Instant, out: &mut Vec<Route>) {
        let (_, to, request) = self.arrivals.remove(0);
        out.push(Route {
            to,
            request: WorkerRequest::Ordinary(request),
            delay: Duration::ZERO,
        });
    }

    fn on_event(&mut self, w: WorkerId, e: &WorkerEvent, now: Instant, _out: &mut Vec<Route>) {
        self.seen.push((w, now, e.clone()));
    }

    fn finish(&mut self, _end: Instant, _f: &[HostFinal], _torn: u64, _faults: FaultCounts) {}
}

const MS: Duration = Duration::from_millis(1);

fn request(id: u64, at: Instant, outputs: u32) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: 32,
        max_output_tokens: outputs,
        prefix_hashes: vec![],
        hash_block_tokens: 16,
        session: None,
        arrival: at,
        lora: None,
    }
}

/// One worker of two ranks: rank 0's passes take 10 ms, rank 1's 1 ms.
fn run(
    coupling: DpCoupling,
    arrivals: Vec<(Instant, WorkerId, Request)>,
) -> (Script, Vec<u64>, Vec<u64>) {
    let passes = [10 * MS, MS];
    let hosts = (0..2u32)
        .map(|r| {
            let core = FakeCore::new(Backend::Vllm, 64, 16).with_pass(passes[r as usize]);
            WorkerHost::new(Worker::new(
                WorkerId(r),
                Generation::FIRST,
                HandoffPolicy::Disabled,
                HandoffConfig::default(),
                core,
            ))
        })
        .collect();
    let cfg = EngineConfig {
        dp: DpLayout::new(2).unwrap().with_coupling(coupling),
        ..EngineConfig::default()
    };
    let port = LocalHosts::new(hosts, |_| FakeCore::new(Backend::Vllm, 64, 16));
    let script = Script {
        arrivals,
        ..Script::default()
    };
    let (script, port) = Engine::new(cfg, port, script).run();
    let steps = port.hosts().iter().map(|h| h.final_state().steps).collect();
    let dummies = port.hosts().iter().map(|h| h.dummy_passes()).collect();
    (script, steps, dummies)
}

/// Rank `r`'s passes as (start, duration), and the instants its tokens
/// reached the director.
fn rank(s: &Script, r: u32) -> (Vec<(Instant, Duration)>, Vec<Instant>) {
    let mine = s.seen.iter().filter(|(w, _, _)| *w == WorkerId(r));
    let mut passes = Vec::new();
    let mut tokens = Vec::new();
    for (_, now, e) in mine {
        match e {
            WorkerEvent::Step {
                start, duration, ..
            } => passes.push((*start, *duration)),
            WorkerEvent::Tokens { .. } => tokens.push(*now),
            _ => {}
        }
    }
    (passes, tokens)
}

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// Rank 0 is slow, rank 1 decodes: coupled, rank 1's tokens come every
/// 10 ms, at the group's end, while rank 0 has work, and at its own pace
/// once rank 0 is idle (an idle rank's dummy batch is as fast as the
/// group's slowest real one); on its own, every millisecond.
#[test]
fn the_slowest_rank_sets_every_ranks_pace() {
    let arrivals = vec![
        (at(0), WorkerId(0), request(1, at(0), 3)),
        (at(0), WorkerId(1), request(2, at(0), 8)),
    ];
    let (own, _, dummies) = run(DpCoupling::Independent, arrivals.clone());
    let (_, tokens) = rank(&own, 1);
    assert_eq!(tokens[..4], [at(1), at(2), at(3), at(4)]);
    assert_eq!(dummies, [0, 0]);

    let (coupled, steps, _) = run(DpCoupling::Lockstep, arrivals);
    let (passes, tokens) = rank(&coupled, 1);
    assert_eq!(tokens[..4], [at(10), at(20), at(30), at(40)]);
    // Rank 0's own passes keep their time; rank 1's last as long while
    // rank 0 runs, then their own.
    let (slow, _) = rank(&coupled, 0);
    assert!(slow.iter().all(|&(_, d)| d == 10 * MS), "{slow:?}");
    let n = slow.len();
    assert_eq!(passes[..n], slow[..], "the ranks' passes are the group's");
    assert!(passes[n..].iter().all(|&(_, d)| d == MS), "{passes:?}");
    assert_eq!(passes[n].0, slow[n - 1].0 + 10 * MS);
    assert!(steps.iter().all(|&s| s > 0));
    // Every output of either rank reached the director at the end of a
    // group pass: one of rank 0's while it ran.
    let group_ends: Vec<Instant> = passes.iter().map(|&(s, d)| s + d).collect();
    for (w, now, _) in &coupled.seen {
        assert!(group_ends.contains(now), "{w}: {now:?}");
    }
}

/// A rank with nothing to run is busy for the group's pass: a request
/// reaching it mid-pass starts at the group's end, and the idle passes
/// count as dummies, not steps.
#[test]
fn an_idle_rank_is_busy_until_the_group_end() {
    let arrivals = vec![
        (at(0), WorkerId(0), request(1, at(0), 6)),
        (at(3), WorkerId(1), request(2, at(3), 2)),
    ];
    let (own, _, _) = run(DpCoupling::Independent, arrivals.clone());
    assert_eq!(rank(&own, 1).0[0].0, at(3));

    let (coupled, steps, dummies) = run(DpCoupling::Lockstep, arrivals);
    let (passes, _) = rank(&coupled, 1);
    assert_eq!(passes[0].0, at(10), "rank 1 waits out the group's pass");
    assert!(dummies[1] >= 1, "rank 1 ran dummy batches: {dummies:?}");
    assert_eq!(dummies[0], 0);
    assert_eq!(steps[1], passes.len() as u64, "dummies are not steps");
    // The group stops when neither rank has work: no dummy without a pass.
    let last_end = coupled.seen.iter().map(|(_, now, _)| *now).max().unwrap();
    let (slow, _) = rank(&coupled, 0);
    let (s, d) = *slow.last().unwrap();
    assert!(last_end <= s + d);
}

/// Both ranks idle: nothing steps, nothing is a dummy, and the run ends.
#[test]
fn an_idle_group_does_not_step() {
    let (s, steps, dummies) = run(DpCoupling::Lockstep, Vec::new());
    assert!(s.seen.is_empty());
    assert_eq!((steps, dummies), (vec![0, 0], vec![0, 0]));
}
