//! Schedules drawn from one seed.

use handoff_core::{
    Backend, CancelFrees, DpCoupling, DpLayout, Duration, HandoffConfig, HandoffPolicy, Heartbeat,
    Instant, KvLoadFailurePolicy, Request, RequestId, Rng, StaleReadPolicy,
};
use handoff_deployment::{DeploymentConfig, EngineSpec};
use handoff_engine::fault::{Fault, FaultPlan};
use handoff_engine::TransferModel;
use handoff_router::RouterMode;
use handoff_workload::TraceItem;
use std::collections::BTreeMap;

/// One schedule: a deployment, its engines and a trace (the fault plan is
/// `cfg.faults`).
#[derive(Clone, Debug)]
pub struct Schedule {
    /// The seed it was drawn from.
    pub seed: u64,
    /// The deployment, with the fault plan.
    pub cfg: DeploymentConfig,
    /// Worker `i`'s engine.
    pub specs: Vec<EngineSpec>,
    /// The trace, ids `0..n` in arrival order.
    pub items: Vec<TraceItem>,
}

/// A third of the time: makes `faults` elastic over `prefill` then `decode`
/// workers (each pool's initial count at least one, the rest absent, the
/// counts the ceilings) and adds one to four scale events within `span`,
/// now and then a drain cut short by a removal (a Kubernetes grace period
/// running out).
fn draw_scale_plan(seed: u64, prefill: u32, decode: u32, span: Duration, faults: &mut FaultPlan) {
    use handoff_engine::scale::{Fleet, ScalePool};
    let mut e = Rng::seeded(seed ^ 0x5ca1_ab1e);
    if e.below(3) != 0 || prefill == 0 {
        return;
    }
    let initial_p = 1 + e.below(u64::from(prefill)) as u32;
    let initial_d = if decode == 0 {
        0
    } else {
        1 + e.below(u64::from(decode)) as u32
    };
    let span_ns = span.as_nanos() as u64;
    let delay = [0, 1_000_000, 50_000_000, span_ns / 2][e.below(4) as usize];
    faults.fleet = Fleet::pools(
        prefill,
        initial_p,
        decode,
        initial_d,
        Duration::from_nanos(delay),
    );
    let workers = u64::from(prefill + decode);
    for _ in 0..1 + e.below(4) {
        let at = Instant(e.below(span_ns + 1));
        let worker = handoff_core::WorkerId(e.below(workers) as u32);
        let fault = match e.below(4) {
            0 if decode > 0 => Fault::ScaleUp {
                pool: ScalePool::Decode,
            },
            0 | 1 => Fault::ScaleUp {
                pool: ScalePool::Prefill,
            },
            2 => Fault::Drain { worker },
            _ => Fault::Remove { worker },
        };
        faults.push(at, fault);
        if matches!(fault, Fault::Drain { .. }) && e.below(3) == 0 {
            let grace = Duration::from_millis(1 + e.below(500));
            faults.push(at + grace, Fault::Remove { worker });
        }
    }
}

/// The schedule of `seed`: every choice comes from it. Small enough that one
/// costs a few milliseconds in release.
pub fn schedule(seed: u64) -> (DeploymentConfig, Vec<EngineSpec>, Vec<TraceItem>) {
    let s = Schedule::new(seed);
    (s.cfg, s.specs, s.items)
}

impl Schedule {
    /// See [`schedule`].
    pub fn new(seed: u64) -> Schedule {
        let mut r = Rng::seeded(seed ^ 0xd57_d57_d57);
        let backend = if r.below(2) == 0 {
            Backend::Vllm
        } else {
            Backend::Sglang
        };
        // Mostly the backend's own ordering; a quarter of the time the
        // other, and for vLLM a quarter of the time its push mode (one draw
        // either way, so the rest of a seed's schedule stays as it was).
        let policy = match (backend, r.below(4)) {
            (Backend::Vllm, 1) => HandoffPolicy::Push,
            (Backend::Vllm, 0) | (Backend::Sglang, 1..) => HandoffPolicy::DestinationFirst,
            _ => HandoffPolicy::SourceFirst,
        };
        let prefill = 1 + r.below(3) as u32;
        let decode = 1 + r.below(3) as u32;
        let block_size = if backend == Backend::Sglang {
            [1, 16][r.below(2) as usize]
        } else {
            16
        };
        // Tiny decode pools: reservations wait, fail and expire.
        let decode_kv = [1_024, 2_048, 4_096, 16_384, 65_536][r.below(5) as usize];
        let prefill_kv = [8_192, 16_384, 65_536][r.below(3) as usize];
        let lease =
            Duration::from_millis([20, 100, 500, 2_000, 10_000][r.below(5) as usize] + r.below(50));
        let reservation =
            Duration::from_millis([20, 100, 500, 2_000, 10_000][r.below(5) as usize] + r.below(50));
        let max_running = [2, 4, 16, 64][r.below(4) as usize];
        let max_batched = [256, 1024, 4096][r.below(3) as usize];
        let spec = |kv_tokens: u64| EngineSpec {
            backend,
            kv_tokens,
            block_size,
            max_running,
            max_batched_tokens: max_batched,
            source_lease_ttl: Some(lease),
            ..EngineSpec::default()
        };
        let transfer = match r.below(3) {
            0 => TransferModel::Fixed(Duration::from_millis(1 + r.below(30))),
            1 => TransferModel::Bytes {
                base: Duration::from_millis(r.below(5)),
                bytes_per_token: 131_072,
                bandwidth: 5e9,
            },
            _ => TransferModel::Contention {
                base: Duration::from_millis(r.below(5)),
                bytes_per_token: 131_072,
                bandwidth: 5e9,
            },
        };
        let router = [
            RouterMode::KvAware,
            RouterMode::RoundRobin,
            RouterMode::LeastLoaded,
            RouterMode::PowerOfTwo,
            RouterMode::Random,
        ][r.below(5) as usize];
        // Mean gap from a burst (0) to idle (1 s).
        let gap_ms = [0, 2, 20, 200, 1_000][r.below(5) as usize];
        let most = [4, 16, 48, 128][r.below(4) as usize];
        let n = 1 + r.below(most);
        let families = 1 + r.below(3);
        let mut items = Vec::new();
        let mut t = 0u64;
        for i in 0..n {
            t += r.below(2 * gap_ms + 1);
            let prompt = match r.below(10) {
                // Longer than small decode pools hold.
                0 => 2_000 + r.below(4_000),
                1 | 2 => 500 + r.below(1_500),
                _ => 16 + r.below(500),
            } as u32;
            let chunks = prompt.div_ceil(512) as usize;
            let output = [8, 64, 300][r.below(3) as usize];
            let family = r.below(families);
            let shared = r.below(chunks as u64 + 1) as usize;
            let hashes = (0..chunks)
                .map(|b| {
                    if b < shared {
                        family * 1_000 + b as u64
                    } else {
                        1_000_000 + i * 100 + b as u64
                    }
                })
                .collect();
            items.push(TraceItem {
                request: Request {
                    id: RequestId(i),
                    prompt_tokens: prompt,
                    max_output_tokens: 1 + r.below(output) as u32,
                    prefix_hashes: hashes,
                    hash_block_tokens: 512,
                    session: None,
                    arrival: Instant::from_millis(t),
                    lora: None,
                },
                turn: None,
                delay: None,
            });
        }
        let workers = prefill + decode;
        // Attention-DP ranks a third of the time, two thirds of those in
        // lockstep (an MoE engine's expert parallelism: the ranks step
        // together); drawn apart from the stream above, so every other
        // choice of a seed stays as it was.
        let mut d = Rng::seeded(seed ^ 0x0d9_10c5);
        let dp_size = [1, 1, 1, 1, 2, 3][d.below(6) as usize];
        let coupling = if d.below(3) == 0 {
            DpCoupling::Independent
        } else {
            DpCoupling::Lockstep
        };
        let dp = DpLayout::new(dp_size)
            .unwrap_or_default()
            .with_coupling(coupling);
        let schedulers = workers * u32::from(dp.dp_size());
        // Faults over about the time the work takes.
        let span = Duration::from_millis(t + [50, 300, 2_000][r.below(3) as usize]);
        let intensity = if r.below(5) == 0 { 0.0 } else { r.next_f64() };
        let mut faults = FaultPlan::generate(seed, schedulers, n, span, intensity);
        // Client cancels of small traces round to none in `generate`.
        if intensity > 0.0 && r.below(2) == 0 {
            for _ in 0..1 + r.below(3) {
                let at = Instant(r.below(span.as_nanos() as u64 + 1));
                faults.push(
                    at,
                    Fault::Cancel {
                        request: RequestId(r.below(n)),
                    },
                );
            }
        }
        // An elastic fleet a third of the time the ranks allow it (one per
        // worker): scale-ups, drains and removals at random model times over
        // the faults' span, under the deployment's worker counts as
        // ceilings, so the exactly-once checks cover scaling. Drawn apart
        // from the stream above, so every other choice stays as it was.
        if dp_size == 1 {
            draw_scale_plan(seed, prefill, decode, span, &mut faults);
        }
        let handoff = HandoffConfig {
            reservation_ttl: reservation,
            renew_source_lease: (r.below(4) == 0).then(|| Duration::from_millis(10 + r.below(200))),
            early_fact_ttl: Duration::from_millis([5, 100, 30_000][r.below(3) as usize]),
            tombstones: [4, 1 << 16][r.below(2) as usize],
            kv_load_failure: [KvLoadFailurePolicy::Fail, KvLoadFailurePolicy::Recompute]
                [r.below(2) as usize],
            // The strict stale-read choice now and then, drawn from the
            // seed so that the generator's other draws stay as they were.
            stale_read: if (seed >> 3).is_multiple_of(4) {
                StaleReadPolicy::Fail
            } else {
                StaleReadPolicy::Complete
            },
            // vLLM's lease heartbeat, for the lease the cores hold, at
            // nanosecond resolution: these leases are fractions of seconds,
            // which vLLM's integer seconds cannot hold.
            heartbeat: (backend == Backend::Vllm && r.below(2) == 0)
                .then(|| Heartbeat::scaled(lease)),
            // The earlier free-at-cancel rule now and then, drawn from the
            // seed so that the generator's other draws stay as they were.
            cancel_frees: if (seed >> 5).is_multiple_of(4) {
                CancelFrees::Immediately
            } else {
                CancelFrees::Upstream
            },
        };
        let cfg = DeploymentConfig {
            engines: Vec::new(),
            sizing: None,
            heartbeat: None,
            backend,
            policy,
            prefill_workers: prefill,
            decode_workers: decode,
            dp,
            router,
            router_kv: handoff_router::KvKnobs::default(),
            block_size: spec(1).event_block_tokens(),
            transfer,
            message_latency: Duration::from_micros(50 + r.below(2_000)),
            handoff,
            seed,
            multi_step: r.below(4) != 0,
            transcript: false,
            faults,
        };
        // SGLang decode runs its default chunk cache or, half the time, the
        // radix cache (drawn apart from the stream above, so every other
        // choice of a seed stays as it was).
        let decode_radix =
            backend == Backend::Sglang && Rng::seeded(seed ^ 0x7ad1_c5ac).below(2) == 0;
        // vLLM's pull runs with `kv_recompute_threshold` off, at upstream's
        // 64 or far above most prompts (drawn apart from the stream above);
        // push has no threshold upstream.
        let recompute = if backend == Backend::Vllm && policy != HandoffPolicy::Push {
            [0, 64, 64, 512][Rng::seeded(seed ^ 0x2ec0_4b7e).below(4) as usize]
        } else {
            0
        };
        let ranks = u32::from(dp.dp_size());
        let specs = (0..schedulers)
            .map(|s| {
                if s / ranks < prefill {
                    EngineSpec {
                        kv_recompute_threshold: recompute,
                        ..spec(prefill_kv)
                    }
                } else {
                    EngineSpec {
                        decode_radix_cache: decode_radix,
                        kv_recompute_threshold: recompute,
                        ..spec(decode_kv)
                    }
                }
            })
            .collect();
        Schedule {
            seed,
            cfg,
            specs,
            items,
        }
    }

    /// Renumbers the trace `0..n` in arrival order (as a Mooncake reader
    /// would) and points cancels at the new ids, dropping cancels of
    /// requests no longer in the trace.
    pub(crate) fn normalised(mut self) -> Schedule {
        self.items
            .sort_by_key(|i| (i.request.arrival, i.request.id));
        let mut map = BTreeMap::new();
        for (k, item) in self.items.iter_mut().enumerate() {
            map.insert(item.request.id, RequestId(k as u64));
            item.request.id = RequestId(k as u64);
        }
        let timed = std::mem::take(&mut self.cfg.faults.timed);
        for mut t in timed {
            if let Fault::Cancel { request } = t.fault {
                match map.get(&request) {
                    Some(&r) => t.fault = Fault::Cancel { request: r },
                    None => continue,
                }
            }
            self.cfg.faults.timed.push(t);
        }
        self
    }

    /// The trace as Mooncake JSONL.
    pub fn trace_jsonl(&self) -> String {
        let mut w = handoff_workload::TraceWriter::new(Vec::new());
        for i in &self.items {
            w.write(i)
                .expect("generated requests use 512-token hash blocks");
        }
        String::from_utf8(w.into_inner().unwrap_or_default()).unwrap_or_default()
    }

    /// The deployment as one line of `key=value` words (durations in
    /// nanoseconds), which [`Schedule::from_text`] reads back: a regression
    /// test carries it so that it does not depend on how [`schedule`] draws
    /// deployments. Prefill workers share the first spec, decode workers the
    /// last (as [`schedule`] builds them).
    pub fn deployment(&self) -> String {
        let c = &self.cfg;
        let ns = |d: Duration| d.as_nanos();
        let pre = self.specs.first().cloned().unwrap_or_default();
        let dec = self.specs.last().cloned().unwrap_or_default();
        let transfer = match c.transfer {
            TransferModel::Fixed(d) => format!("fixed:{}", ns(d)),
            TransferModel::Bytes {
                base,
                bytes_per_token,
                bandwidth,
            } => format!("bytes:{}:{bytes_per_token}:{bandwidth:?}", ns(base)),
            TransferModel::Contention {
                base,
                bytes_per_token,
                bandwidth,
            } => format!("contention:{}:{bytes_per_token}:{bandwidth:?}", ns(base)),
        };
        format!(
            "seed={} backend={} policy={} prefill={} decode={} router={} router_block={} \
             page={} prefill_kv={} decode_kv={} max_running={} max_batched={} lease_ns={} \
             reservation_ns={} renew_ns={} early_ns={} tombstones={} transfer={transfer} \
             latency_ns={} multi_step={} decode_radix={} kv_load_failure={} stale_read={} \
             heartbeat={} dp={} dp_lockstep={} cancel_frees={} recompute_threshold={}",
            c.seed,
            c.backend.name(),
            c.policy.name(),
            c.prefill_workers,
            c.decode_workers,
            c.router.name(),
            c.block_size,
            pre.block_size,
            pre.kv_tokens,
            dec.kv_tokens,
            pre.max_running,
            pre.max_batched_tokens,
            pre.source_lease_ttl.map_or(0, ns),
            ns(c.handoff.reservation_ttl),
            c.handoff.renew_source_lease.map_or(0, ns),
            ns(c.handoff.early_fact_ttl),
            c.handoff.tombstones,
            ns(c.message_latency),
            c.multi_step,
            dec.decode_radix_cache,
            c.handoff.kv_load_failure.name(),
            c.handoff.stale_read.name(),
            c.handoff.heartbeat.map_or("none".to_string(), |h| format!(
                "{}:{}",
                ns(h.every),
                ns(h.extend)
            )),
            c.dp.dp_size(),
            c.dp.coupling() == DpCoupling::Lockstep,
            c.handoff.cancel_frees.name(),
            dec.kv_recompute_threshold
        )
    }

    /// A schedule from its [`Schedule::deployment`] line, a fault plan in
    /// its text form and a Mooncake JSONL trace: what a regression test
    /// runs.
    pub fn from_text(deployment: &str, plan: &str, trace: &str) -> Result<Schedule, String> {
        let mut kv = BTreeMap::new();
        for word in deployment.split_whitespace() {
            let (k, v) = word
                .split_once('=')
                .ok_or_else(|| format!("deployment: `{word}` is not key=value"))?;
            kv.insert(k, v);
        }
        let get = |k: &str| {
            kv.get(k)
                .copied()
                .ok_or_else(|| format!("deployment: `{k}` missing"))
        };
        let num = |k: &str| -> Result<u64, String> {
            get(k)?
                .parse()
                .map_err(|_| format!("deployment: `{k}` is not a number"))
        };
        let dur = |k: &str| num(k).map(Duration::from_nanos);
        let backend = [Backend::Vllm, Backend::Sglang, Backend::TrtLlm]
            .into_iter()
            .find(|b| Ok(b.name()) == get("backend"))
            .ok_or("deployment: unknown backend")?;
        let policy = [
            HandoffPolicy::SourceFirst,
            HandoffPolicy::DestinationFirst,
            HandoffPolicy::Push,
            HandoffPolicy::Disabled,
        ]
        .into_iter()
        .find(|p| Ok(p.name()) == get("policy"))
        .ok_or("deployment: unknown policy")?;
        let router = RouterMode::from_name(get("router")?).ok_or("deployment: unknown router")?;
        let t = get("transfer")?;
        let parts: Vec<&str> = t.split(':').collect();
        let bad = || format!("deployment: bad transfer `{t}`");
        let n = |i: usize| -> Result<u64, String> {
            parts.get(i).and_then(|x| x.parse().ok()).ok_or_else(bad)
        };
        let bw =
            || -> Result<f64, String> { parts.get(3).and_then(|x| x.parse().ok()).ok_or_else(bad) };
        let transfer = match parts.first().copied() {
            Some("fixed") => TransferModel::Fixed(Duration::from_nanos(n(1)?)),
            Some("bytes") => TransferModel::Bytes {
                base: Duration::from_nanos(n(1)?),
                bytes_per_token: n(2)?,
                bandwidth: bw()?,
            },
            Some("contention") => TransferModel::Contention {
                base: Duration::from_nanos(n(1)?),
                bytes_per_token: n(2)?,
                bandwidth: bw()?,
            },
            _ => return Err(bad()),
        };
        let lease = num("lease_ns")?;
        let renew = num("renew_ns")?;
        let spec = |kv_tokens: u64| -> Result<EngineSpec, String> {
            Ok(EngineSpec {
                backend,
                kv_tokens,
                block_size: num("page")? as u32,
                max_running: num("max_running")? as u32,
                max_batched_tokens: num("max_batched")? as u32,
                source_lease_ttl: (lease > 0).then(|| Duration::from_nanos(lease)),
                ..EngineSpec::default()
            })
        };
        let prefill = num("prefill")? as u32;
        let decode = num("decode")? as u32;
        // Both absent from lines written before ranks were drawn: one rank.
        let dp = match kv.get("dp") {
            None => DpLayout::SINGLE,
            Some(_) => DpLayout::new(num("dp")?).map_err(|e| format!("deployment: {e}"))?,
        };
        let dp = dp.with_coupling(match kv.get("dp_lockstep") {
            None | Some(&"false") => DpCoupling::Independent,
            Some(&"true") => DpCoupling::Lockstep,
            Some(other) => return Err(format!("deployment: bad dp_lockstep `{other}`")),
        });
        let ranks = u32::from(dp.dp_size());
        let schedulers = (prefill + decode)
            .checked_mul(ranks)
            .ok_or("deployment: too many rank schedulers")?;
        let (mut pre, mut dec) = (spec(num("prefill_kv")?)?, spec(num("decode_kv")?)?);
        // Absent from lines written before the threshold existed, which
        // pulled whatever the count.
        let recompute = match kv.get("recompute_threshold") {
            Some(_) => num("recompute_threshold")?,
            None => 0,
        };
        pre.kv_recompute_threshold = recompute;
        dec.kv_recompute_threshold = recompute;
        // Absent from lines written before the decode chunk cache existed,
        // which ran SGLang's decode with a radix cache.
        dec.decode_radix_cache = match kv.get("decode_radix") {
            Some(v) => *v == "true",
            None => backend == Backend::Sglang,
        };
        let cfg = DeploymentConfig {
            engines: Vec::new(),
            sizing: None,
            heartbeat: None,
            backend,
            policy,
            prefill_workers: prefill,
            decode_workers: decode,
            dp,
            router,
            router_kv: handoff_router::KvKnobs::default(),
            block_size: num("router_block")? as u32,
            transfer,
            message_latency: dur("latency_ns")?,
            handoff: HandoffConfig {
                reservation_ttl: dur("reservation_ns")?,
                renew_source_lease: (renew > 0).then(|| Duration::from_nanos(renew)),
                early_fact_ttl: dur("early_ns")?,
                tombstones: num("tombstones")? as usize,
                // Absent in schedules recorded before the policy existed.
                kv_load_failure: match get("kv_load_failure") {
                    Err(_) | Ok("fail") => KvLoadFailurePolicy::Fail,
                    Ok("recompute") => KvLoadFailurePolicy::Recompute,
                    Ok(other) => {
                        return Err(format!("deployment: unknown kv_load_failure `{other}`"))
                    }
                },
                // Absent in schedules recorded before the choice existed.
                stale_read: match get("stale_read") {
                    Err(_) | Ok("complete") => StaleReadPolicy::Complete,
                    Ok("fail") => StaleReadPolicy::Fail,
                    Ok(other) => return Err(format!("deployment: unknown stale_read `{other}`")),
                },
                // Absent in schedules recorded before the choice existed.
                cancel_frees: match get("cancel_frees") {
                    Err(_) | Ok("upstream") => CancelFrees::Upstream,
                    Ok("immediately") => CancelFrees::Immediately,
                    Ok(other) => return Err(format!("deployment: unknown cancel_frees `{other}`")),
                },
                heartbeat: match get("heartbeat") {
                    Err(_) | Ok("none") => None,
                    Ok(h) => {
                        let (every, extend) = h
                            .split_once(':')
                            .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                            .ok_or_else(|| format!("deployment: bad heartbeat `{h}`"))?;
                        Some(Heartbeat {
                            every: Duration::from_nanos(every),
                            extend: Duration::from_nanos(extend),
                        })
                    }
                },
            },
            seed: num("seed")?,
            multi_step: get("multi_step")? == "true",
            transcript: false,
            faults: FaultPlan::parse(plan).map_err(|e| format!("plan: {e}"))?,
        };
        let reader = handoff_workload::TraceReader::new(
            std::io::BufReader::new(trace.as_bytes()),
            handoff_workload::ReaderOptions::new("regression"),
        );
        let items = reader
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("trace: {e}"))?;
        Ok(Schedule {
            seed: cfg.seed,
            specs: (0..schedulers)
                .map(|s| {
                    if s / ranks < prefill {
                        pre.clone()
                    } else {
                        dec.clone()
                    }
                })
                .collect(),
            cfg,
            items,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Some seeds draw data-parallel ranks, most of those in lockstep; a
    /// lockstep schedule breaks no rule, and its deployment line carries
    /// the layout back.
    #[test]
    fn lockstep_schedules_are_drawn_break_no_rule_and_read_back() {
        let all: Vec<Schedule> = (1..=120).map(Schedule::new).collect();
        let lockstep: Vec<&Schedule> = all.iter().filter(|s| s.cfg.dp.is_lockstep()).collect();
        assert!(
            lockstep.len() >= 10,
            "{} lockstep schedules",
            lockstep.len()
        );
        assert!(all
            .iter()
            .any(|s| s.cfg.dp.is_split() && !s.cfg.dp.is_lockstep()));
        assert!(all.iter().filter(|s| !s.cfg.dp.is_split()).count() > 60);
        for s in lockstep.iter().take(12) {
            let ranks = usize::from(s.cfg.dp.dp_size());
            let workers = (s.cfg.prefill_workers + s.cfg.decode_workers) as usize;
            assert_eq!(s.specs.len(), workers * ranks);
            let o = crate::dst::check(s);
            assert!(
                o.violations.is_empty(),
                "seed {}: {:?}",
                s.seed,
                o.violations
            );
            let back = Schedule::from_text(&s.deployment(), "", &s.trace_jsonl()).unwrap();
            assert_eq!(back.cfg.dp, s.cfg.dp);
            assert_eq!(back.specs.len(), s.specs.len());
        }
        // A line written before ranks were drawn reads as one rank.
        let plain = all.iter().find(|s| !s.cfg.dp.is_split()).unwrap();
        let line: Vec<String> = plain
            .deployment()
            .split_whitespace()
            .filter(|w| !w.starts_with("dp=") && !w.starts_with("dp_lockstep="))
            .map(String::from)
            .collect();
        let line = line.join(" ");
        let back = Schedule::from_text(&line, "", &plain.trace_jsonl()).unwrap();
        assert_eq!(back.cfg.dp, DpLayout::SINGLE);
    }

    /// Some seeds draw an elastic fleet with scale-ups, drains and
    /// removals; such a schedule breaks no rule, and its fault plan's text
    /// carries the fleet and the events back.
    #[test]
    fn elastic_schedules_are_drawn_break_no_rule_and_read_back() {
        use handoff_engine::fault::Fault;
        let all: Vec<Schedule> = (1..=300).map(Schedule::new).collect();
        let elastic: Vec<&Schedule> = all
            .iter()
            .filter(|s| !s.cfg.faults.fleet.is_empty())
            .collect();
        assert!(elastic.len() >= 30, "{} elastic schedules", elastic.len());
        let has = |f: fn(&Fault) -> bool| {
            elastic
                .iter()
                .filter(|s| s.cfg.faults.timed.iter().any(|t| f(&t.fault)))
                .count()
        };
        assert!(has(|f| matches!(f, Fault::ScaleUp { .. })) >= 5);
        assert!(has(|f| matches!(f, Fault::Drain { .. })) >= 5);
        assert!(has(|f| matches!(f, Fault::Remove { .. })) >= 5);
        // A fleet needs one rank per worker.
        assert!(elastic.iter().all(|s| !s.cfg.dp.is_split()));
        for s in elastic.iter().take(40) {
            let o = crate::dst::check(s);
            assert!(
                o.violations.is_empty(),
                "seed {}: {:?}",
                s.seed,
                o.violations
            );
            let plan = s.cfg.faults.to_string();
            let back = Schedule::from_text(&s.deployment(), &plan, &s.trace_jsonl()).unwrap();
            assert_eq!(back.cfg.faults.fleet, s.cfg.faults.fleet, "seed {}", s.seed);
            assert_eq!(back.cfg.faults.timed, s.cfg.faults.timed, "seed {}", s.seed);
        }
    }

    /// vLLM pull schedules draw `kv_recompute_threshold` (off, upstream's
    /// 64, 512); push and SGLang run without it; the line carries it back,
    /// and a line written before it existed reads as off.
    #[test]
    fn recompute_thresholds_are_drawn_break_no_rule_and_read_back() {
        let all: Vec<Schedule> = (1..=80).map(Schedule::new).collect();
        let threshold = |s: &Schedule| s.specs.last().map_or(0, |e| e.kv_recompute_threshold);
        for t in [0, 64, 512] {
            assert!(
                all.iter()
                    .any(|s| s.cfg.policy == HandoffPolicy::SourceFirst && threshold(s) == t),
                "no source-first schedule at {t}"
            );
        }
        assert!(all
            .iter()
            .filter(|s| s.cfg.backend != Backend::Vllm || s.cfg.policy == HandoffPolicy::Push)
            .all(|s| threshold(s) == 0));
        for s in all.iter().filter(|s| threshold(s) > 0).take(6) {
            let o = crate::dst::check(s);
            assert!(
                o.violations.is_empty(),
                "seed {}: {:?}",
                s.seed,
                o.violations
            );
            let back = Schedule::from_text(&s.deployment(), "", &s.trace_jsonl()).unwrap();
            assert!(back
                .specs
                .iter()
                .all(|e| e.kv_recompute_threshold == threshold(s)));
            let line = s.deployment();
            let old: Vec<&str> = line
                .split_whitespace()
                .filter(|w| !w.starts_with("recompute_threshold="))
                .collect();
            let back = Schedule::from_text(&old.join(" "), "", &s.trace_jsonl()).unwrap();
            assert!(back.specs.iter().all(|e| e.kv_recompute_threshold == 0));
        }
    }
}
