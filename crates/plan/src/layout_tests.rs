//! Tests of the enumeration, the budget's checks and the plan's run.

use super::*;
use crate::runner::Runner;

fn lay(tp: u32, dp: u32, prefill: u32, decode: u32) -> Layout {
    Layout {
        tp,
        dp,
        prefill,
        decode,
    }
}

#[test]
fn enumeration_counts_and_order() {
    // 4 GPUs at TP1: aggregated 1..=4, splits with 2..=4 workers:
    // 1+2+3 = 6; at TP2: aggregated 1..=2, one split (1P1D).
    let l = enumerate(&[1, 2], &[1], 1, 4, Kinds::Both);
    assert_eq!(l.len(), 4 + 6 + 2 + 1);
    assert_eq!(l[0], lay(1, 1, 1, 0));
    assert_eq!(l[4], lay(1, 1, 1, 1));
    assert_eq!(l[5], lay(1, 1, 1, 2));
    assert_eq!(l[9], lay(1, 1, 3, 1));
    assert_eq!(l[12], lay(2, 1, 1, 1));
    assert!(l.iter().all(|x| x.gpus() <= 4));
    // Every split appears once.
    let mut seen = std::collections::BTreeSet::new();
    assert!(l
        .iter()
        .all(|x| seen.insert((x.tp, x.dp, x.prefill, x.decode))));
}

#[test]
fn dp_multiplies_the_gpus_and_respects_the_budget() {
    assert_eq!(lay(2, 2, 3, 1).gpus(), 16);
    assert_eq!(lay(1, 4, 1, 0).gpus(), 4);
    // 4 GPUs, TP1, DP 1 then 2: DP1 as above (4 + 6), then at DP2 a
    // worker takes 2 GPUs: aggregated 1..=2 and one 1P1D split.
    let l = enumerate(&[1], &[1, 2], 1, 4, Kinds::Both);
    assert_eq!(l.len(), 4 + 6 + 2 + 1);
    assert!(l[..10].iter().all(|x| x.dp == 1));
    assert_eq!(l[10], lay(1, 2, 1, 0));
    assert_eq!(l[11], lay(1, 2, 2, 0));
    assert_eq!(l[12], lay(1, 2, 1, 1));
    // The DP1 layouts are those of a plan without --dp, in its order.
    assert_eq!(l[..10], enumerate(&[1], &[1], 1, 4, Kinds::Both)[..]);
    for (min, max) in [(1, 1), (3, 7), (4, 16)] {
        let l = enumerate(&[1, 2], &[1, 2, 4], min, max, Kinds::Both);
        for x in &l {
            assert!((min..=max).contains(&x.gpus()), "{x:?}");
        }
        // Nothing within the budget is missed.
        for dp in [1, 2, 4] {
            for tp in [1, 2] {
                let per = tp * dp;
                for n in 1..=max / per {
                    if (min..=max).contains(&(n * per)) {
                        assert!(l.contains(&lay(tp, dp, n, 0)), "{tp} {dp} {n}");
                    }
                }
            }
        }
    }
    // A DP whose one worker exceeds the budget adds nothing.
    assert_eq!(
        enumerate(&[2], &[1, 4], 1, 6, Kinds::Aggregated),
        enumerate(&[2], &[1], 1, 6, Kinds::Aggregated)
    );
    assert!(enumerate(&[1], &[0], 1, 4, Kinds::Both).is_empty());
}

#[test]
fn enumeration_respects_the_bounds_and_the_kind() {
    let agg = enumerate(&[1], &[1], 3, 5, Kinds::Aggregated);
    assert_eq!(agg.iter().map(|l| l.prefill).collect::<Vec<_>>(), [3, 4, 5]);
    let dis = enumerate(&[1], &[1], 1, 8, Kinds::Disaggregated);
    // n workers give n-1 splits: 1+2+...+7 = 28.
    assert_eq!(dis.len(), 28);
    assert!(dis.iter().all(|l| l.decode > 0 && l.prefill > 0));
    assert!(enumerate(&[4], &[1], 1, 3, Kinds::Both).is_empty());
    assert!(enumerate(&[0], &[1], 1, 3, Kinds::Both).is_empty());
    for (min, max) in [(1, 1), (2, 7), (5, 12)] {
        for l in enumerate(&[1, 2, 4], &[1], min, max, Kinds::Both) {
            assert!((min..=max).contains(&l.gpus()), "{l:?}");
        }
    }
}

#[test]
fn the_budget_is_checked_before_anything_is_enumerated() {
    let b = |max, min, dps: &[u32]| Budget {
        max,
        min,
        dps: dps.to_vec(),
    };
    assert_eq!(
        b(None, 1, &[1]).check(),
        Err(PlanError::Budget { most: MAX_GPUS })
    );
    assert_eq!(
        b(Some(0), 1, &[1]).check(),
        Err(PlanError::Budget { most: MAX_GPUS })
    );
    assert_eq!(
        b(Some(MAX_GPUS + 1), 1, &[1]).check(),
        Err(PlanError::Budget { most: MAX_GPUS })
    );
    assert_eq!(b(Some(4), 1, &[1, 257]).check(), Err(PlanError::Dp(257)));
    assert_eq!(
        b(Some(4), 5, &[1]).check(),
        Err(PlanError::MinAboveMax { min: 5, max: 4 })
    );
    assert_eq!(b(Some(4), 1, &[1]).check(), Ok(4));
    assert_eq!(
        b(Some(3), 1, &[1]).layouts(&[4], 3, Kinds::Both),
        Err(PlanError::NoLayout { min: 1, max: 3 })
    );
    let big = b(Some(MAX_GPUS), 1, &[1]).layouts(&[1], MAX_GPUS, Kinds::Disaggregated);
    assert!(
        matches!(big, Err(PlanError::TooManyLayouts { found, most: MAX_LAYOUTS }) if found > MAX_LAYOUTS)
    );
    assert_eq!(
        PlanError::Budget { most: MAX_GPUS }.to_string(),
        "plan: give --gpus N (1..=1024), the GPU budget"
    );
}

/// A runner that records what it was asked and answers a row per layout.
struct Echo {
    refuse: Option<usize>,
}

impl Runner<Layout> for Echo {
    type Config = (usize, Layout);
    fn prepare(&self, index: usize, job: &Layout) -> Result<(usize, Layout), String> {
        if self.refuse == Some(index) {
            return Err("no such profile".into());
        }
        Ok((index, *job))
    }
    fn run_all(&self, configs: &[(usize, Layout)]) -> Vec<serde_json::Value> {
        configs
            .iter()
            .map(|(i, l)| json!({"index": i, "gpus": l.gpus()}))
            .collect()
    }
}

#[test]
fn a_plan_runs_its_shard_and_stops_at_a_refused_layout() {
    let layouts = enumerate(&[1], &[1], 1, 3, Kinds::Both);
    let shared = vec!["--slo".to_string(), "ttft:p90=1s".to_string()];
    let mut plan = Plan {
        layouts: &layouts,
        shared: &shared,
        gpus: (1, 3),
        shard: None,
    };
    let all = run_plan(&plan, &Echo { refuse: None }).unwrap();
    assert_eq!(all["rows"].as_array().unwrap().len(), 6);
    assert_eq!(all["grid"]["kind"], "plan");
    assert_eq!(all["grid"]["axes"][2]["values"], json!(["1", "2", "3"]));
    assert!(all["shard"].is_null());
    plan.shard = Some((1, 2));
    let half = run_plan(&plan, &Echo { refuse: None }).unwrap();
    let idx: Vec<u64> = half["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    assert_eq!(idx, [1, 3, 5]);
    assert_eq!(half["shard"], "1/2");
    assert_eq!(plan.stem(), "summary-shard-1-of-2");
    // A refused layout outside the shard still stops the plan.
    let e = run_plan(&plan, &Echo { refuse: Some(2) }).unwrap_err();
    assert_eq!(e.to_string(), "layout 2: no such profile");
}
