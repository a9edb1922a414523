//! Synthetic agentic sessions for the session-affine experiment (issue #7).
//!
//! Shaped after the E1/E3/E4 workload of the D→P snapshot-push design (seed
//! 002: 50 agentic sessions whose context reaches ~50K tokens): each session
//! is a chain of turns, and every turn's prompt is the whole conversation so
//! far (previous prompt + previous output) plus new tokens (a tool result or
//! user message). Contexts therefore grow roughly linearly from the first
//! prompt to `final_context_tokens` at the last turn.
//!
//! Hash ids follow the Mooncake convention: one id per 512-token block of
//! the session's append-only context, so turn k+1 repeats turn k's ids for
//! every block that was already full; a partial last block gets a fresh id
//! (its content differs from the longer prompt's). All sessions start with
//! the same `system_prompt_tokens` (shared tool definitions), so their first
//! blocks share ids across sessions.
//!
//! Time: sessions start as a Poisson process; turn k+1 is stamped
//! `assumed_turn_latency + delay` after turn k, where `delay` is the think
//! time (exponential, capped). A closed-loop driver should ignore the
//! stamp for later turns and send each `delay` after the previous turn
//! completes; the stamp is what an open-loop replay uses.

use crate::dist::LengthDist;
use crate::item::TraceItem;
use handoff_core::request::{mix64, TRACE_HASH_BLOCK_TOKENS};
use handoff_core::{Duration, Instant, Request, RequestId, Rng, SessionId};

/// Parameters of [`generate_sessions`].
#[derive(Clone, Debug, PartialEq)]
pub struct SessionConfig {
    /// Everything random derives from this.
    pub seed: u64,
    /// Number of sessions.
    pub sessions: u32,
    /// Turns per session.
    pub turns: LengthDist,
    /// Leading tokens every session shares (system prompt, tool specs).
    pub system_prompt_tokens: u32,
    /// First-turn tokens after the system prompt.
    pub first_user_tokens: LengthDist,
    /// Target prompt length of a session's last turn.
    pub final_context_tokens: u32,
    /// Output tokens per turn.
    pub output_tokens: LengthDist,
    /// Mean think time between a turn's completion and the next turn.
    pub think_time_mean: Duration,
    /// Think-time cap (the exponential's tail is cut here).
    pub think_time_max: Duration,
    /// Mean time between session starts (Poisson).
    pub session_interarrival_mean: Duration,
    /// Turn latency assumed when stamping open-loop arrival times.
    pub assumed_turn_latency: Duration,
    /// Start of the first session.
    pub start: Instant,
    /// Id of the earliest request; ids are consecutive in arrival order.
    pub first_request_id: u64,
    /// `SessionId` of the first session; sessions are consecutive.
    pub first_session_id: u64,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            seed: 7,
            sessions: 50,
            turns: LengthDist::Uniform { min: 16, max: 24 },
            system_prompt_tokens: 2048,
            first_user_tokens: LengthDist::LogNormal {
                median: 3000.0,
                sigma: 0.3,
                min: 256,
                max: 16384,
            },
            final_context_tokens: 50_000,
            output_tokens: LengthDist::LogNormal {
                median: 250.0,
                sigma: 0.5,
                min: 16,
                max: 2048,
            },
            think_time_mean: Duration::from_secs(3),
            think_time_max: Duration::from_secs(30),
            session_interarrival_mean: Duration::from_secs(1),
            assumed_turn_latency: Duration::from_secs(2),
            start: Instant::ZERO,
            first_request_id: 0,
            first_session_id: 0,
        }
    }
}

fn micros(secs: f64) -> Duration {
    let us = (secs * 1e6).round();
    if us.is_finite() && us > 0.0 {
        Duration::from_micros(us as u64)
    } else {
        Duration::ZERO
    }
}

/// Generates every turn of every session, sorted by arrival (ties by
/// session, then turn) with ids assigned in that order. Deterministic by
/// seed. Items carry `request.session`, `turn` and, from the second turn
/// on, `delay` (the think time).
pub fn generate_sessions(config: &SessionConfig) -> Vec<TraceItem> {
    let bs = u64::from(TRACE_HASH_BLOCK_TOKENS);
    let system_full_blocks = u64::from(config.system_prompt_tokens) / bs;
    // Ids below this are the shared system prompt's blocks.
    let mut next_id = system_full_blocks;
    let mut starts = Rng::seeded(mix64(config.seed ^ 0x7374_6172_7473));
    let mut start_secs = 0.0f64;
    let mut items = Vec::new();
    let mut block_ids: Vec<u64> = Vec::new();

    for s in 0..config.sessions {
        if s > 0 {
            start_secs += starts.exponential(config.session_interarrival_mean.as_secs_f64());
        }
        // One stream per session: adding sessions never perturbs earlier ones.
        let mut rng = Rng::seeded(mix64(config.seed ^ mix64(u64::from(s) + 1)));
        let session = SessionId(config.first_session_id.wrapping_add(u64::from(s)));
        let turns = config.turns.sample(&mut rng);
        block_ids.clear();
        block_ids.extend(0..system_full_blocks);

        let first_prompt = u64::from(config.system_prompt_tokens)
            + u64::from(config.first_user_tokens.sample(&mut rng));
        let last_prompt = u64::from(config.final_context_tokens).max(first_prompt);
        let mut context = 0u64; // prompt + output of the previous turn
        let mut arrival = config.start + micros(start_secs);

        for k in 0..turns {
            let prompt = if k == 0 {
                first_prompt
            } else {
                // Aim at a linear ramp to `last_prompt`, with ±30% jitter on
                // each turn's new tokens so turns differ in size.
                let target = first_prompt
                    + (last_prompt - first_prompt) * u64::from(k) / u64::from(turns - 1);
                let growth = target.saturating_sub(context) as f64;
                let jitter = 0.7 + 0.6 * rng.next_f64();
                let new_tokens = ((growth * jitter).round() as u64).max(32);
                context + new_tokens
            };
            let prompt = prompt.min(u64::from(u32::MAX));

            let full = prompt / bs;
            while (block_ids.len() as u64) < full {
                block_ids.push(next_id);
                next_id += 1;
            }
            let mut hashes = Vec::with_capacity(prompt.div_ceil(bs) as usize);
            hashes.extend_from_slice(&block_ids[..full as usize]);
            if prompt % bs != 0 {
                hashes.push(next_id);
                next_id += 1;
            }

            let output = config.output_tokens.sample(&mut rng);
            let delay = if k == 0 {
                None
            } else {
                let think = micros(rng.exponential(config.think_time_mean.as_secs_f64()))
                    .min(config.think_time_max);
                arrival = arrival + config.assumed_turn_latency + think;
                Some(think)
            };
            items.push(TraceItem {
                request: Request {
                    id: RequestId(0),
                    prompt_tokens: prompt as u32,
                    max_output_tokens: output,
                    prefix_hashes: hashes,
                    hash_block_tokens: TRACE_HASH_BLOCK_TOKENS,
                    session: Some(session),
                    arrival,
                    lora: None,
                },
                turn: Some(k),
                delay,
            });
            context = prompt + u64::from(output);
        }
    }

    items.sort_by_key(|it| (it.request.arrival, it.request.session, it.turn));
    for (i, it) in items.iter_mut().enumerate() {
        it.request.id = RequestId(config.first_request_id.wrapping_add(i as u64));
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::{ReaderOptions, TraceReader};
    use crate::writer::write_trace;
    use std::collections::BTreeMap;

    fn by_session(items: &[TraceItem]) -> BTreeMap<SessionId, Vec<&TraceItem>> {
        let mut m: BTreeMap<SessionId, Vec<&TraceItem>> = BTreeMap::new();
        for it in items {
            m.entry(it.request.session.unwrap()).or_default().push(it);
        }
        m
    }

    #[test]
    fn fifty_sessions_growing_to_about_fifty_k() {
        let items = generate_sessions(&SessionConfig::default());
        let sessions = by_session(&items);
        assert_eq!(sessions.len(), 50);
        let mut last_prompts = 0.0;
        for turns in sessions.values() {
            assert!((16..=24).contains(&turns.len()));
            for (k, w) in turns.windows(2).enumerate() {
                let (a, b) = (&w[0].request, &w[1].request);
                assert_eq!(w[0].turn, Some(k as u32));
                // Each prompt contains the previous prompt and its output.
                assert!(b.prompt_tokens >= a.prompt_tokens + a.max_output_tokens);
                let full = (a.prompt_tokens / 512) as usize;
                assert_eq!(a.prefix_hashes[..full], b.prefix_hashes[..full]);
                assert!(b.arrival > a.arrival);
                assert!(w[1].delay.is_some());
            }
            assert_eq!(turns[0].delay, None);
            last_prompts += f64::from(turns.last().unwrap().request.prompt_tokens);
        }
        let mean_last = last_prompts / 50.0;
        assert!((45_000.0..55_000.0).contains(&mean_last), "{mean_last}");
    }

    #[test]
    fn sessions_share_only_the_system_prompt() {
        let items = generate_sessions(&SessionConfig::default());
        let sessions = by_session(&items);
        let firsts: Vec<&Request> = sessions.values().map(|t| &t[0].request).collect();
        for w in firsts.windows(2) {
            let common = w[0]
                .prefix_hashes
                .iter()
                .zip(&w[1].prefix_hashes)
                .take_while(|(a, b)| a == b)
                .count();
            assert_eq!(common, 4, "2048 shared tokens are 4 blocks");
        }
    }

    #[test]
    fn sorted_with_dense_ids_and_deterministic() {
        let cfg = SessionConfig::default();
        let a = generate_sessions(&cfg);
        assert_eq!(a, generate_sessions(&cfg));
        assert_ne!(
            a,
            generate_sessions(&SessionConfig {
                seed: 8,
                ..cfg.clone()
            })
        );
        for (i, w) in a.windows(2).enumerate() {
            assert!(w[0].request.arrival <= w[1].request.arrival);
            assert_eq!(w[0].request.id, RequestId(i as u64));
        }
        for it in &a {
            let r = &it.request;
            assert_eq!(r.prefix_hashes.len() as u32, r.prompt_tokens.div_ceil(512));
            assert!(it.delay.unwrap_or_default() <= cfg.think_time_max);
        }
    }

    #[test]
    fn round_trips_through_jsonl_with_turns() {
        let items = generate_sessions(&SessionConfig::default());
        let mut buf = Vec::new();
        write_trace(&mut buf, &items).unwrap();
        let back: Vec<TraceItem> = TraceReader::new(&buf[..], ReaderOptions::new("sessions"))
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, items);
    }

    #[test]
    fn single_turn_sessions_work() {
        let items = generate_sessions(&SessionConfig {
            turns: LengthDist::Fixed(1),
            sessions: 3,
            ..SessionConfig::default()
        });
        assert_eq!(items.len(), 3);
        assert!(items.iter().all(|i| i.turn == Some(0) && i.delay.is_none()));
    }
}
