use super::recorder::*;
use handoff_core::{Duration, Instant, Request, RequestId, TokenEmission, WorkerEvent, WorkerId};
use handoff_deployment::DeploymentConfig;
use handoff_router::Pool;

fn request(id: u64) -> Request {
    Request {
        id: RequestId(id),
        prompt_tokens: 300,
        max_output_tokens: 3,
        prefix_hashes: vec![],
        hash_block_tokens: 512,
        session: None,
        arrival: Instant::ZERO,
        lora: None,
    }
}

fn step(start_ms: u64, passes_ms: &[u64]) -> WorkerEvent {
    let passes: Vec<Duration> = passes_ms
        .iter()
        .map(|&m| Duration::from_millis(m))
        .collect();
    WorkerEvent::Step {
        start: Instant::ZERO + Duration::from_millis(start_ms),
        steps: passes.len() as u64,
        duration: passes.iter().copied().sum(),
        first_step: passes[0],
        last_step: passes[passes.len() - 1],
        passes: if passes.len() > 1 { passes } else { vec![] },
        prefill_tokens: 0,
    }
}

fn tokens(id: u64, n: u32, first: bool) -> WorkerEvent {
    WorkerEvent::Tokens {
        emissions: vec![TokenEmission {
            request: RequestId(id),
            tokens: n,
            first,
        }],
    }
}

fn recorder() -> Recorder {
    Recorder::new(
        &DeploymentConfig::default(),
        [(WorkerId(0), Pool::Prefill), (WorkerId(1), Pool::Decode)].into_iter(),
    )
}

#[test]
fn a_migrated_request_keeps_its_prompt() {
    let mut rec = recorder();
    rec.arrival(&request(1));
    rec.migrated(RequestId(1));
    let d = WorkerId(1);
    rec.event(d, Pool::Decode, &step(10, &[5]), false);
    rec.event(d, Pool::Decode, &tokens(1, 1, true), false);
    let at = Instant::ZERO + Duration::from_millis(15);
    let done = WorkerEvent::RequestFinished {
        request: RequestId(1),
        at,
    };
    rec.event(d, Pool::Decode, &done, false);
    let report = rec.finish(at, std::iter::empty());
    assert_eq!(report.total_input_tokens, 300);
    assert_eq!(report.completed_requests, 1);
}

/// Token times come from the passes' own times, not a line through the
/// first and last (a prefill first pass, then decodes that slow down).
#[test]
fn multi_pass_token_times_are_the_passes_own() {
    let mut one = recorder();
    let mut many = recorder();
    let d = WorkerId(1);
    for r in [&mut one, &mut many] {
        r.arrival(&request(1));
    }
    let passes = [40u64, 10, 11, 13];
    let mut t = 0;
    for &p in &passes {
        one.event(d, Pool::Decode, &step(t, &[p]), false);
        one.event(d, Pool::Decode, &tokens(1, 1, t == 0), false);
        t += p;
    }
    many.event(d, Pool::Decode, &step(0, &passes), false);
    many.event(d, Pool::Decode, &tokens(1, 4, true), false);
    let at = Instant::ZERO + Duration::from_millis(t);
    let done = WorkerEvent::RequestFinished {
        request: RequestId(1),
        at,
    };
    let a = {
        one.event(d, Pool::Decode, &done, false);
        serde_json::to_string(&one.finish(at, std::iter::empty())).expect("json")
    };
    let b = {
        many.event(d, Pool::Decode, &done, false);
        serde_json::to_string(&many.finish(at, std::iter::empty())).expect("json")
    };
    assert_eq!(a, b);
    assert!(a.contains("\"max_itl_ms\":13.0"), "{a}");
}
