//! A seeded synthetic workload: Poisson arrivals, log-normal lengths and
//! groups of requests that share a prompt prefix.
//!
//! This is the embedded default of `handoff-mocker replay`. Its defaults aim
//! at a disaggregated run with 2 prefill and 2 decode workers under the
//! default polynomial perf model (a 4K-token prefill costs ~86 ms, ~50 ms
//! when half of it is a cached prefix): 16 requests/s keeps two prefill
//! workers roughly half busy with prefix reuse, and ~200-token outputs keep
//! a few dozen requests decoding per worker. 2000 requests span ~125 s of
//! virtual time.
//!
//! Shape, in Mooncake terms: every request belongs to one of
//! `prefix_groups` groups (uniformly); a group owns a fixed run of
//! `prefix_blocks` hash ids (its "system prompt"), which its requests carry
//! as their leading ids; the rest of a request's ids are fresh. A request
//! shorter than its group's prefix shares only its own full blocks, and a
//! partial last block is always fresh, as in Mooncake traces where a partial
//! block's content differs from any longer prompt's.

use crate::dist::LengthDist;
use crate::item::TraceItem;
use crate::rate_curve::RateCurve;
use handoff_core::request::{mix64, TRACE_HASH_BLOCK_TOKENS};
use handoff_core::{Instant, Request, RequestId, Rng};

/// Parameters of a [`SyntheticWorkload`].
#[derive(Clone, Debug, PartialEq)]
pub struct SyntheticConfig {
    /// Everything random derives from this.
    pub seed: u64,
    /// Requests to generate.
    pub requests: u64,
    /// Mean arrivals per second (Poisson); `<= 0` sends all at `start`.
    /// Ignored when `rate_curve` is set.
    pub rate_per_sec: f64,
    /// A time-varying rate (`--rate-curve`): arrivals by a non-homogeneous
    /// Poisson process ([`crate::rate_curve`]); `None` keeps the constant
    /// `rate_per_sec`, its arrivals unchanged.
    pub rate_curve: Option<RateCurve>,
    /// Prompt tokens.
    pub input_tokens: LengthDist,
    /// Output tokens.
    pub output_tokens: LengthDist,
    /// Number of shared-prefix groups; 0 disables sharing.
    pub prefix_groups: u32,
    /// Length of each group's shared prefix, in 512-token blocks (drawn once
    /// per group).
    pub prefix_blocks: LengthDist,
    /// Arrival of the first possible request.
    pub start: Instant,
    /// Id of the first request; ids are consecutive.
    pub first_request_id: u64,
}

impl Default for SyntheticConfig {
    fn default() -> Self {
        SyntheticConfig {
            seed: 42,
            requests: 2000,
            rate_per_sec: 16.0,
            rate_curve: None,
            // median 3800, mean ~4.1K tokens
            input_tokens: LengthDist::LogNormal {
                median: 3800.0,
                sigma: 0.4,
                min: 256,
                max: 16384,
            },
            // median 190, mean ~200 tokens
            output_tokens: LengthDist::LogNormal {
                median: 190.0,
                sigma: 0.35,
                min: 8,
                max: 1024,
            },
            prefix_groups: 40,
            // 1-3K tokens of shared system prompt per group
            prefix_blocks: LengthDist::Uniform { min: 2, max: 6 },
            start: Instant::ZERO,
            first_request_id: 0,
        }
    }
}

/// Independent streams so that, e.g., changing the rate leaves every
/// request's lengths and prefix group unchanged.
fn stream(seed: u64, salt: u64) -> Rng {
    Rng::seeded(mix64(seed ^ salt))
}

/// The generator: an iterator of [`TraceItem`]s in arrival order,
/// deterministic by seed. Memory is O(prefix groups), not O(requests).
#[derive(Clone, Debug)]
pub struct SyntheticWorkload {
    config: SyntheticConfig,
    arrivals: Rng,
    lengths: Rng,
    /// (first hash id, blocks) per group.
    groups: Vec<(u64, u32)>,
    next_fresh_id: u64,
    emitted: u64,
    elapsed_secs: f64,
    /// `Λ` of the last arrival under a rate curve (unit-rate time).
    unit_time: f64,
}

impl SyntheticWorkload {
    /// A generator for `config`.
    pub fn new(config: SyntheticConfig) -> Self {
        let mut group_rng = stream(config.seed, 0x6772_6f75_7073);
        let mut next_id = 0u64;
        let groups = (0..config.prefix_groups)
            .map(|_| {
                let blocks = config.prefix_blocks.sample(&mut group_rng);
                let first = next_id;
                next_id += u64::from(blocks);
                (first, blocks)
            })
            .collect();
        SyntheticWorkload {
            arrivals: stream(config.seed, 0x6172_7269_7661_6c73),
            lengths: stream(config.seed, 0x006c_656e_6774_6873),
            groups,
            next_fresh_id: next_id,
            emitted: 0,
            elapsed_secs: 0.0,
            unit_time: 0.0,
            config,
        }
    }

    /// The configuration this generator runs.
    pub fn config(&self) -> &SyntheticConfig {
        &self.config
    }
}

impl Iterator for SyntheticWorkload {
    type Item = TraceItem;

    fn next(&mut self) -> Option<TraceItem> {
        if self.emitted >= self.config.requests {
            return None;
        }
        if let Some(curve) = &self.config.rate_curve {
            // Time rescaling: unit-rate Poisson in Λ, mapped back by Λ⁻¹.
            self.unit_time += self.arrivals.exponential(1.0);
            self.elapsed_secs = curve.invert(self.elapsed_secs, self.unit_time);
        } else {
            let rate = self.config.rate_per_sec;
            if rate > 0.0 && rate.is_finite() && self.emitted > 0 {
                self.elapsed_secs += self.arrivals.exponential(1.0 / rate);
            }
        }
        // Whole microseconds: exact through the JSONL writer and reader.
        let micros = (self.elapsed_secs * 1e6).round();
        let arrival = self.config.start
            + handoff_core::Duration::from_micros(if micros.is_finite() && micros > 0.0 {
                micros as u64
            } else {
                0
            });

        let group = if self.groups.is_empty() {
            None
        } else {
            let g = self.lengths.below(self.groups.len() as u64) as usize;
            self.groups.get(g).copied()
        };
        let input = self.config.input_tokens.sample(&mut self.lengths);
        let output = self.config.output_tokens.sample(&mut self.lengths);

        let blocks = u64::from(input).div_ceil(u64::from(TRACE_HASH_BLOCK_TOKENS));
        let full_blocks = u64::from(input / TRACE_HASH_BLOCK_TOKENS);
        let mut hashes = Vec::with_capacity(blocks as usize);
        if let Some((first, group_blocks)) = group {
            let shared = u64::from(group_blocks).min(full_blocks);
            hashes.extend(first..first + shared);
        }
        while (hashes.len() as u64) < blocks {
            hashes.push(self.next_fresh_id);
            self.next_fresh_id += 1;
        }

        let id = RequestId(self.config.first_request_id.wrapping_add(self.emitted));
        self.emitted += 1;
        Some(TraceItem {
            request: Request {
                id,
                prompt_tokens: input,
                max_output_tokens: output,
                prefix_hashes: hashes,
                hash_block_tokens: TRACE_HASH_BLOCK_TOKENS,
                session: None,
                arrival,
                lora: None,
            },
            turn: None,
            delay: None,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = usize::try_from(self.config.requests - self.emitted).unwrap_or(usize::MAX);
        (left, Some(left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::{ReaderOptions, TraceReader};
    use crate::writer::write_trace;
    use std::collections::BTreeMap;

    fn all(config: SyntheticConfig) -> Vec<TraceItem> {
        SyntheticWorkload::new(config).collect()
    }

    #[test]
    fn deterministic_by_seed() {
        let a = all(SyntheticConfig::default());
        let b = all(SyntheticConfig::default());
        assert_eq!(a, b);
        let c = all(SyntheticConfig {
            seed: 43,
            ..SyntheticConfig::default()
        });
        assert_ne!(a, c);
    }

    #[test]
    fn defaults_have_the_documented_shape() {
        let items = all(SyntheticConfig::default());
        assert_eq!(items.len(), 2000);
        let n = items.len() as f64;
        let mean_in = items
            .iter()
            .map(|i| f64::from(i.request.prompt_tokens))
            .sum::<f64>()
            / n;
        let mean_out = items
            .iter()
            .map(|i| f64::from(i.request.max_output_tokens))
            .sum::<f64>()
            / n;
        assert!((3800.0..4400.0).contains(&mean_in), "{mean_in}");
        assert!((180.0..220.0).contains(&mean_out), "{mean_out}");
        let span = items.last().unwrap().request.arrival.as_nanos() as f64 / 1e9;
        let rate = (n - 1.0) / span;
        assert!((14.5..17.5).contains(&rate), "{rate}");
        for (i, w) in items.windows(2).enumerate() {
            assert!(w[0].request.arrival <= w[1].request.arrival, "at {i}");
            assert_eq!(w[1].request.id.0, w[0].request.id.0 + 1);
        }
        // Ids cover every 512-token block, as in Mooncake traces.
        for it in &items {
            let r = &it.request;
            assert_eq!(r.prefix_hashes.len() as u32, r.prompt_tokens.div_ceil(512));
        }
    }

    #[test]
    fn groups_share_leading_ids_and_nothing_else() {
        let items = all(SyntheticConfig::default());
        // Requests whose first id is equal belong to one group; their
        // common prefix is the group's prefix, at most 6 blocks.
        let mut by_first: BTreeMap<u64, Vec<&Request>> = BTreeMap::new();
        for it in &items {
            if let Some(&h) = it.request.prefix_hashes.first() {
                by_first.entry(h).or_default().push(&it.request);
            }
        }
        let shared_groups = by_first.values().filter(|v| v.len() > 1).count();
        assert!((35..=40).contains(&shared_groups), "{shared_groups}");
        let mut seen_fresh = std::collections::HashSet::new();
        for reqs in by_first.values() {
            let first = reqs[0];
            for r in &reqs[1..] {
                let common = first
                    .prefix_hashes
                    .iter()
                    .zip(&r.prefix_hashes)
                    .take_while(|(a, b)| a == b)
                    .count();
                assert!(common <= 6);
            }
        }
        // Ids past a group's prefix are unique across the workload.
        for it in &items {
            for &h in &it.request.prefix_hashes {
                if h >= 6 * 40 {
                    assert!(seen_fresh.insert(h), "fresh id {h} reused");
                }
            }
        }
    }

    #[test]
    fn no_groups_means_no_sharing() {
        let items = all(SyntheticConfig {
            prefix_groups: 0,
            requests: 200,
            ..SyntheticConfig::default()
        });
        let mut seen = std::collections::HashSet::new();
        for it in &items {
            for &h in &it.request.prefix_hashes {
                assert!(seen.insert(h));
            }
        }
    }

    #[test]
    fn zero_rate_sends_everything_at_start() {
        let items = all(SyntheticConfig {
            rate_per_sec: 0.0,
            requests: 10,
            start: Instant::from_millis(5),
            ..SyntheticConfig::default()
        });
        assert!(items
            .iter()
            .all(|i| i.request.arrival == Instant::from_millis(5)));
    }

    /// Arrivals per `window` seconds over the first `horizon` seconds.
    fn counts(items: &[TraceItem], window: f64, horizon: f64) -> Vec<u64> {
        let mut c = vec![0u64; (horizon / window) as usize];
        for it in items {
            let t = it.request.arrival.as_nanos() as f64 / 1e9;
            if let Some(slot) = c.get_mut((t / window) as usize) {
                *slot += 1;
            }
        }
        c
    }

    fn curved(spec: &str, requests: u64) -> Vec<TraceItem> {
        all(SyntheticConfig {
            rate_curve: Some(RateCurve::parse(spec).unwrap()),
            requests,
            ..SyntheticConfig::default()
        })
    }

    #[test]
    fn step_curve_arrivals_follow_each_step() {
        // 10/s for 100 s, 40/s for 100 s, 5/s after.
        let items = curved("step:0=10,100=40,200=5", 6000);
        let c = counts(&items, 100.0, 300.0);
        // Poisson counts: mean ± 4 standard deviations.
        for (got, mean) in c.iter().zip([1000.0, 4000.0, 500.0]) {
            let sd = f64::sqrt(mean);
            assert!((*got as f64 - mean).abs() < 4.0 * sd, "{c:?}");
        }
        for w in items.windows(2) {
            assert!(w[0].request.arrival <= w[1].request.arrival);
        }
    }

    #[test]
    fn ramp_sine_and_bursts_follow_their_curves() {
        for spec in ["ramp:2..30/200", "sine:20,15,100", "bursts:5,50,20,5"] {
            let curve = RateCurve::parse(spec).unwrap();
            let items = curved(spec, 20_000);
            let c = counts(&items, 5.0, 200.0);
            for (i, got) in c.iter().enumerate() {
                let a = i as f64 * 5.0;
                let mean = curve.cumulative(a + 5.0) - curve.cumulative(a);
                let sd = mean.sqrt().max(1.0);
                assert!(
                    (*got as f64 - mean).abs() < 5.0 * sd,
                    "{spec}: window {i}: {got} vs {mean}"
                );
            }
        }
    }

    #[test]
    fn a_curve_is_deterministic_and_leaves_lengths_alone() {
        let a = curved("sine:16,8,60", 500);
        let b = curved("sine:16,8,60", 500);
        assert_eq!(a, b);
        let flat = all(SyntheticConfig {
            requests: 500,
            ..SyntheticConfig::default()
        });
        for (x, y) in a.iter().zip(&flat) {
            assert_eq!(x.request.prompt_tokens, y.request.prompt_tokens);
            assert_eq!(x.request.prefix_hashes, y.request.prefix_hashes);
        }
    }

    #[test]
    fn round_trips_through_jsonl() {
        let items = all(SyntheticConfig::default());
        let mut buf = Vec::new();
        write_trace(&mut buf, &items).unwrap();
        let back: Vec<TraceItem> = TraceReader::new(&buf[..], ReaderOptions::new("synthetic"))
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, items);
    }
}
