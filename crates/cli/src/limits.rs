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
pub(crate) fn speed(value: f64) -> Result<f64, String> {
    real("speed", value, MIN_SPEED, MAX_SPEED)?;
    Ok(value)
}

/// Shortest SGLang PD bootstrap timeout, in model seconds (a millisecond:
/// a shorter one would time legs out before their partner's request could
/// cross the loopback).
pub const MIN_BOOTSTRAP_TIMEOUT_S: f64 = 1e-3;

/// `serve --bootstrap-timeout-s`, in
/// [`MIN_BOOTSTRAP_TIMEOUT_S`]`..=`[`MAX_SECONDS`].
pub(crate) fn bootstrap_timeout(value: f64) -> Result<f64, String> {
    real(
        "bootstrap-timeout-s",
        value,
        MIN_BOOTSTRAP_TIMEOUT_S,
        MAX_SECONDS,
    )?;
    Ok(value)
}

/// `value` must be a finite number in `lo..=hi`.
pub(crate) fn real(flag: &str, value: f64, lo: f64, hi: f64) -> Result<(), String> {
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
pub(crate) fn int(flag: &str, value: u64, lo: u64, hi: u64) -> Result<(), String> {
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
}
