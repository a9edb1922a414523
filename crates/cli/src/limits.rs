//! The range every numeric flag of a deployment and a workload must lie
//! in, so that no flag can panic a conversion, overflow model time, loop
//! for ever or size an allocation past what a run on one machine can use.
//! A value outside its range is refused up front, naming the flag, the
//! value and the range.
//!
//! The bounds are generous: each is orders of magnitude past what a real
//! deployment uses (an H200 holds about a million tokens of an 8B model's
//! KV; Dynamo and llm-d benchmarks run tens of workers per pool).

use crate::args::{DeployArgs, WorkloadArgs};

/// Workers per pool. The scheduler cores hold nothing sized by the pool or
/// the batch limit until a request arrives, and a worker keeps a peer's
/// generation only once that peer restarted (`handoff_core::Worker`'s
/// peer table), so an idle worker costs a few kilobytes: 4,096 per pool
/// (8,192 workers) peaks at 56 MB for ten requests
/// (`docs/perf/cluster-scaling-2026-12-06.md`).
pub const MAX_WORKERS: u32 = 4096;
/// KV tokens per worker. Both pools take memory only for what a run
/// touches (vLLM's block entries are made when a block is first allocated,
/// SGLang's pool is counts), so the bound only keeps token arithmetic far
/// from overflow: 10^12 tokens is 6.25e10 blocks of 16.
pub const MAX_KV_TOKENS: u64 = 1_000_000_000_000;
/// Tokens one forward pass may schedule (`--max-batched-tokens`).
pub const MAX_BATCHED_TOKENS: u64 = 1 << 24;
/// Running requests per worker (the cores size per-request slots by it).
pub const MAX_RUNNING: u32 = 1 << 16;
/// Model seconds any lifetime or latency flag may span (about 11.6 days);
/// model time is nanoseconds in a `u64`, which this keeps far from overflow.
pub const MAX_SECONDS: f64 = 1_000_000.0;
/// Slowest and fastest wall-clock speed (model seconds per wall second): a
/// run slower than a thousandth of real time would not end in a session.
pub const MIN_SPEED: f64 = 1e-3;
/// See [`MIN_SPEED`].
pub const MAX_SPEED: f64 = 1e6;
/// Smallest and largest speed-up, bandwidth or rate factor accepted.
const MIN_RATIO: f64 = 1e-6;
const MAX_RATIO: f64 = 1e6;

/// What the sizes a run derives from several flags (schedulers = workers ×
/// ranks, requests = sessions × turns, parallel runs) may cost together,
/// estimated before anything is allocated: a quarter of the 24 GiB the
/// project's machines have, so a refused product names its flags instead
/// of aborting on an allocation (or being killed) midway.
pub const MEMORY_BUDGET_BYTES: u64 = 6 << 30;

/// What one scheduler costs on its own before any request arrives: its
/// core, worker and host, its router and recorder entries. Fitted, with
/// [`PEER_PAIR_BYTES`], to the peak RSS of `replay --requests 50` from 16
/// to 4,096 schedulers (commands and figures in
/// `docs/perf/budgets-2026-12-06.md`).
pub const SCHEDULER_BYTES: u64 = 12 << 10;

/// What each ordered pair of schedulers costs: every worker keeps a
/// peer-generation entry for every other (announced to all at start), so
/// a deployment's memory grows with the square of its schedulers (about
/// 155 KiB per scheduler at 8,192 of them).
pub const PEER_PAIR_BYTES: u64 = 20;

/// What one generated session turn costs an experiment run beyond its
/// prefix hashes (8 bytes per 512-token block of its prompt, counted
/// apart since they grow with `--session-final-tokens`): its trace item,
/// per-request record and engine state. Measured as 1.3 KiB from the peak
/// RSS of `experiment run` at 4,000 and 16,000 turns; rounded up.
pub const TURN_BYTES: u64 = 2 << 10;

/// Most parallel runs `sweep --jobs` may start (each is a thread running a
/// whole deployment).
pub const MAX_JOBS: u64 = 256;

/// `bytes` in the unit a person reads best.
fn show_bytes(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    const MIB: f64 = (1u64 << 20) as f64;
    let b = bytes as f64;
    if b >= GIB {
        format!("{:.1} GiB", b / GIB)
    } else {
        format!("{:.1} MiB", b / MIB)
    }
}

/// `count` things of `unit` bytes each must fit [`MEMORY_BUDGET_BYTES`];
/// the refusal names what was multiplied (`product`), the count, the
/// estimate and `most`, the most that fit.
pub fn budget(product: &str, what: &str, count: u64, unit: u64, most: u64) -> Result<(), String> {
    let estimate = count.saturating_mul(unit);
    if estimate <= MEMORY_BUDGET_BYTES {
        return Ok(());
    }
    Err(format!(
        "{product}: {count} {what}, an estimated {} at about {} each, over the {} budget \
         (at most {} {what})",
        show_bytes(estimate),
        if unit >= 1 << 20 {
            show_bytes(unit)
        } else {
            format!("{} KiB", unit >> 10)
        },
        show_bytes(MEMORY_BUDGET_BYTES),
        most
    ))
}

/// Schedulers of a deployment: (`--prefill` + `--decode`) × `--dp-size`,
/// each [`SCHEDULER_BYTES`] plus [`PEER_PAIR_BYTES`] for each other one,
/// within the budget.
pub fn schedulers(prefill: u32, decode: u32, dp_size: u64) -> Result<u64, String> {
    let n = (u64::from(prefill) + u64::from(decode)).saturating_mul(dp_size);
    budget(
        &format!("--dp-size {dp_size} × (--prefill {prefill} + --decode {decode})"),
        "schedulers",
        n,
        SCHEDULER_BYTES.saturating_add(n.saturating_mul(PEER_PAIR_BYTES)),
        most_schedulers(),
    )?;
    Ok(n)
}

/// The most schedulers whose estimate fits the budget: the root of
/// `n * (SCHEDULER_BYTES + n * PEER_PAIR_BYTES) = MEMORY_BUDGET_BYTES`.
fn most_schedulers() -> u64 {
    let cost = |n: u64| n * (SCHEDULER_BYTES + n * PEER_PAIR_BYTES);
    let (s, p, b) = (
        SCHEDULER_BYTES as f64,
        PEER_PAIR_BYTES as f64,
        MEMORY_BUDGET_BYTES as f64,
    );
    let mut n = ((s * s + 4.0 * p * b).sqrt() - s) / (2.0 * p);
    n = n.max(0.0);
    let mut n = n as u64;
    while n > 0 && cost(n) > MEMORY_BUDGET_BYTES {
        n -= 1;
    }
    while cost(n + 1) <= MEMORY_BUDGET_BYTES {
        n += 1;
    }
    n
}

/// Requests of a generated session workload: `sessions` × at most
/// `max_turns`, each [`TURN_BYTES`] plus its prefix hashes (8 bytes per
/// 512-token block of a prompt that grows to `final_tokens`) in each of
/// `runs` runs, within the budget.
pub fn session_requests(
    sessions: u32,
    max_turns: u32,
    final_tokens: u32,
    turns_flag: &str,
    runs: u64,
) -> Result<u64, String> {
    let n = (u64::from(sessions) * u64::from(max_turns)).saturating_mul(runs.max(1));
    let hashes =
        u64::from(final_tokens).div_ceil(u64::from(handoff_core::request::TRACE_HASH_BLOCK_TOKENS));
    budget(
        &format!("--sessions {sessions} × {turns_flag}"),
        if runs > 1 {
            "session turns (over its runs)"
        } else {
            "session turns"
        },
        n,
        TURN_BYTES + 8 * hashes,
        MEMORY_BUDGET_BYTES / (TURN_BYTES + 8 * hashes),
    )?;
    Ok(n)
}

/// The longest real time one wait that a flag sets may take on the wall
/// clock (a model duration takes duration / `--speed` of real time).
pub const MAX_WALL_WAIT_S: f64 = 60.0;

impl DeployArgs {
    /// `speed` in range, and every fixed model delay of these flags
    /// (`--message-latency-us`, `--transfer-ms`) no longer than
    /// [`MAX_WALL_WAIT_S`] of real time at it, for the wall-clock drivers
    /// (`serve`, wall-clock `live`): there each control message and fixed
    /// transfer really waits. Also refuses a message latency whose round
    /// trip (a fact out and its answer back) is not shorter than the
    /// source's lease or the reservation deadline (`bootstrap`, SGLang's PD
    /// bootstrap timeout in `serve`): every handoff would then fail by
    /// construction, so it is an error at start rather than a 503 per
    /// request.
    pub fn check_wall_clock(&self, speed_x: f64, bootstrap_s: Option<f64>) -> Result<f64, String> {
        let speed_x = speed(speed_x)?;
        let latency_s = self.message_latency_us as f64 / 1e6;
        for (flag, model_s) in [
            ("message-latency-us", latency_s),
            ("transfer-ms", self.transfer_ms / 1e3),
        ] {
            let wall = model_s / speed_x;
            if wall > MAX_WALL_WAIT_S {
                return Err(format!(
                    "--{flag}: {} model seconds take {} s of real time at --speed {}, over the \
                     {MAX_WALL_WAIT_S} s one wall-clock wait may take",
                    show(model_s),
                    show(wall),
                    show(speed_x)
                ));
            }
        }
        let h = self.handoff();
        let secs = |d: handoff_core::Duration| d.as_nanos() as f64 / 1e9;
        let mut deadlines: Vec<(&str, f64)> = Vec::new();
        if h.heartbeat.is_some() {
            let lease = self
                .source_lease_ttl()
                .unwrap_or(handoff_core::Heartbeat::VLLM_LEASE);
            deadlines.push(("the source's KV lease", secs(lease)));
        }
        if h.reservation_expires() {
            deadlines.push(("the reservation deadline", secs(h.reservation_ttl)));
        }
        if let Some(b) = bootstrap_s {
            deadlines.push(("--bootstrap-timeout-s", b));
        }
        if let Some((what, d)) = deadlines
            .into_iter()
            .filter(|(_, d)| *d > 0.0)
            .min_by(|a, b| a.1.total_cmp(&b.1))
        {
            if 2.0 * latency_s >= d {
                return Err(format!(
                    "--message-latency-us {}: a fact and its answer take {} model seconds, not \
                     less than {what} ({} s): every handoff would fail",
                    self.message_latency_us,
                    show(2.0 * latency_s),
                    show(d)
                ));
            }
        }
        Ok(speed_x)
    }
}

/// `sweep --jobs`: 1..=[`MAX_JOBS`].
pub fn jobs(value: usize) -> Result<usize, String> {
    int("jobs", value as u64, 1, MAX_JOBS)?;
    Ok(value)
}

/// `x` as a person would write it: plain digits for ordinary magnitudes,
/// scientific notation for huge or tiny ones.
fn show(x: f64) -> String {
    if x != 0.0 && x.is_finite() && !(1e-3..1e9).contains(&x.abs()) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}

/// A wall-clock `--speed`, in [`MIN_SPEED`]`..=`[`MAX_SPEED`].
pub fn speed(value: f64) -> Result<f64, String> {
    real("speed", value, MIN_SPEED, MAX_SPEED)?;
    Ok(value)
}

/// Shortest SGLang PD bootstrap timeout, in model seconds (a millisecond:
/// a shorter one would time legs out before their partner's request could
/// cross the loopback).
pub const MIN_BOOTSTRAP_TIMEOUT_S: f64 = 1e-3;

/// `serve --bootstrap-timeout-s`, in
/// [`MIN_BOOTSTRAP_TIMEOUT_S`]`..=`[`MAX_SECONDS`].
pub fn bootstrap_timeout(value: f64) -> Result<f64, String> {
    real(
        "bootstrap-timeout-s",
        value,
        MIN_BOOTSTRAP_TIMEOUT_S,
        MAX_SECONDS,
    )?;
    Ok(value)
}

/// `value` must be a finite number in `lo..=hi`.
pub fn real(flag: &str, value: f64, lo: f64, hi: f64) -> Result<(), String> {
    if value.is_finite() && (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(format!(
            "--{flag}: {} is outside {}..={}",
            show(value),
            show(lo),
            show(hi)
        ))
    }
}

/// `value` must be an integer in `lo..=hi`.
pub fn int(flag: &str, value: u64, lo: u64, hi: u64) -> Result<(), String> {
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(format!("--{flag}: {value} is outside {lo}..={hi}"))
    }
}

impl DeployArgs {
    /// Every numeric flag in its range (see the module docs).
    pub fn check_ranges(&self) -> Result<(), String> {
        let secs = MAX_SECONDS as u64;
        int(
            "prefill",
            u64::from(self.prefill),
            0,
            u64::from(MAX_WORKERS),
        )?;
        int("decode", u64::from(self.decode), 0, u64::from(MAX_WORKERS))?;
        schedulers(self.prefill, self.decode, self.dp_size)?;
        if let Some(t) = self.prefill_kv_tokens {
            int("prefill-kv-tokens", t, 0, MAX_KV_TOKENS)?;
        }
        if let Some(t) = self.decode_kv_tokens {
            int("decode-kv-tokens", t, 0, MAX_KV_TOKENS)?;
        }
        if let Some(t) = self.hardware.tp {
            int("tp", u64::from(t), 1, 64)?;
        }
        if let Some(x) = self.hardware.gpu_memory_utilization {
            real("gpu-memory-utilization", x, 0.01, 1.0)?;
        }
        if let Some(b) = self.block_size {
            int("block-size", u64::from(b), 1, 4096)?;
        }
        if let Some(n) = self.max_running {
            int("max-running", u64::from(n), 1, u64::from(MAX_RUNNING))?;
        }
        if let Some(n) = self.max_loras {
            int("max-loras", u64::from(n), 1, u64::from(MAX_RUNNING))?;
        }
        int(
            "max-batched-tokens",
            u64::from(self.max_batched_tokens),
            1,
            MAX_BATCHED_TOKENS,
        )?;
        real(
            "pass-speedup-ratio",
            self.pass_speedup_ratio,
            MIN_RATIO,
            MAX_RATIO,
        )?;
        if let Some(r) = self.speedup_ratio {
            real("speedup-ratio", r, MIN_RATIO, MAX_RATIO)?;
        }
        real("transfer-ms", self.transfer_ms, 0.0, MAX_SECONDS * 1e3)?;
        // Dynamo requires the knobs finite and non-negative
        // (`KvRouterConfig`'s validation); the bound keeps costs finite.
        real(
            "overlap-score-credit",
            self.overlap_score_credit,
            0.0,
            MAX_RATIO,
        )?;
        real(
            "prefill-load-scale",
            self.prefill_load_scale,
            0.0,
            MAX_RATIO,
        )?;
        real(
            "decode-active-request-weight",
            self.decode_active_request_weight,
            0.0,
            MAX_RATIO,
        )?;
        real(
            "router-temperature",
            self.router_temperature,
            0.0,
            MAX_RATIO,
        )?;
        if let Some(b) = self.bytes_per_token {
            int("bytes-per-token", b, 1, 1 << 30)?;
        }
        real("bandwidth-gbps", self.bandwidth_gbps, MIN_RATIO, MAX_RATIO)?;
        int(
            "message-latency-us",
            self.message_latency_us,
            0,
            secs * 1_000_000,
        )?;
        for (flag, v) in [
            ("reservation-ttl-s", self.reservation_ttl_s),
            ("lease-ttl-s", self.lease_ttl_s),
            ("renew-lease-s", self.renew_lease_s),
        ] {
            if let Some(v) = v {
                int(flag, v, 0, secs)?;
            }
        }
        Ok(())
    }
}

impl WorkloadArgs {
    /// Every numeric flag in its range (see the module docs).
    pub fn check_ranges(&self) -> Result<(), String> {
        int(
            "trace-block-size",
            u64::from(self.trace_block_size),
            1,
            1 << 20,
        )?;
        real(
            "arrival-speedup-ratio",
            self.arrival_speedup_ratio,
            MIN_RATIO,
            MAX_RATIO,
        )?;
        if let Some(r) = self.rate {
            real("rate", r, MIN_RATIO, MAX_RATIO)?;
        }
        if let Some(n) = self.requests {
            int("requests", n, 0, 1_000_000_000)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_flag_value_and_range() {
        assert_eq!(
            real("transfer-ms", 1e300, 0.0, 1e9).unwrap_err(),
            "--transfer-ms: 1e300 is outside 0..=1e9"
        );
        assert!(real("bandwidth-gbps", f64::NAN, 1e-6, 1e6).is_err());
        assert!(real("bandwidth-gbps", 1e-300, 1e-6, 1e6).is_err());
        assert!(real("bandwidth-gbps", 25.0, 1e-6, 1e6).is_ok());
        assert_eq!(
            int("max-running", 4_294_967_295, 1, 65_536).unwrap_err(),
            "--max-running: 4294967295 is outside 1..=65536"
        );
        assert!(int("prefill", 64, 0, 1024).is_ok());
        assert_eq!(
            bootstrap_timeout(0.0).unwrap_err(),
            "--bootstrap-timeout-s: 0 is outside 0.001..=1000000"
        );
        assert!(bootstrap_timeout(f64::INFINITY).is_err());
        assert_eq!(bootstrap_timeout(2.0), Ok(2.0));
    }

    /// The products are refused with the flags, the count, the
    /// estimate and the most that fit; ordinary sizes pass.
    #[test]
    fn products_past_the_budget_are_refused_with_the_estimate() {
        assert_eq!(
            schedulers(128, 128, 256).unwrap_err(),
            "--dp-size 256 × (--prefill 128 + --decode 128): 65536 schedulers, an estimated \
             80.8 GiB at about 1.3 MiB each, over the 6.0 GiB budget (at most 17643 schedulers)"
        );
        // The largest pools allowed (4,096 each) fit: about 1.3 GiB.
        assert_eq!(schedulers(4096, 4096, 1), Ok(8192));
        assert_eq!(schedulers(16, 16, 8), Ok(256));
        assert!(schedulers(64, 64, 256).is_err());
        let e = session_requests(1000, 10_000, 50_000, "--session-turns 10000", 1).unwrap_err();
        assert!(
            e.starts_with(
                "--sessions 1000 × --session-turns 10000: 10000000 session turns, an estimated "
            ),
            "{e}"
        );
        assert!(session_requests(500, 24, 50_000, "turns", 4).is_ok());
        assert!(session_requests(1_000_000, 24, 50_000, "turns", 1).is_err());
        assert_eq!(
            jobs(99_999_999_999).unwrap_err(),
            "--jobs: 99999999999 is outside 1..=256"
        );
        assert_eq!(jobs(4), Ok(4));
        assert!(jobs(0).is_err());
    }
}
