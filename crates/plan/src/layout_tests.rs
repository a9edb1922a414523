//! Tests of the enumeration, the budget's checks and the plan's run.

use super::*;
use crate::runner::Runner;

fn lay(tp: u32, dp: u32, prefill: u32, decode: u32) -> Layout {
    Layout::uniform(tp, dp, prefill, decode)
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
        .all(|x| seen.insert((x.prefill_tp, x.dp, x.prefill, x.decode))));
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
        experts: vec![Experts::Off],
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
        b(Some(3), 1, &[1]).layouts(&PoolTps::Same(vec![4]), 3, Kinds::Both),
        Err(PlanError::NoLayout { min: 1, max: 3 })
    );
    let big =
        b(Some(MAX_GPUS), 1, &[1]).layouts(&PoolTps::Same(vec![1]), MAX_GPUS, Kinds::Disaggregated);
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
        axes: Axes::default(),
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

fn space(tps: PoolTps, dps: &[u32], experts: &[Experts], max: u32, which: Kinds) -> Space {
    Space {
        tps,
        dps: dps.to_vec(),
        experts: experts.to_vec(),
        min: 1,
        max,
        which,
    }
}

fn per_pool(prefill: &[u32], decode: &[u32]) -> PoolTps {
    PoolTps::PerPool {
        prefill: prefill.to_vec(),
        decode: decode.to_vec(),
    }
}

#[test]
fn per_pool_tps_pair_every_prefill_tp_with_every_decode_tp() {
    // 6 GPUs, prefill TP 1 or 2, decode TP 2: pairs (1,2) then (2,2).
    let l = enumerate_space(&space(
        per_pool(&[1, 2], &[2]),
        &[1],
        &[Experts::Off],
        6,
        Kinds::Both,
    ));
    let of = |p, d| -> Vec<(u32, u32)> {
        l.iter()
            .filter(|x| (x.prefill_tp, x.decode_tp) == (p, d) && x.decode > 0)
            .map(|x| (x.prefill, x.decode))
            .collect()
    };
    // (1,2): P×1 + D×2 ≤ 6, by total workers then prefill count (1P3D
    // would take 7).
    assert_eq!(of(1, 2), [(1, 1), (1, 2), (2, 1), (2, 2), (3, 1), (4, 1)]);
    // (2,2): as a uniform TP2 plan: 1P1D, 1P2D, 2P1D.
    assert_eq!(of(2, 2), [(1, 1), (1, 2), (2, 1)]);
    // Aggregated only at a TP both lists hold (2), at one TP.
    let agg: Vec<Layout> = l.iter().filter(|x| x.decode == 0).copied().collect();
    assert_eq!(agg, [lay(2, 1, 1, 0), lay(2, 1, 2, 0), lay(2, 1, 3, 0)]);
    // The (1,2) layouts come first, then (2,2)'s aggregated and splits.
    assert_eq!(l[0].prefill_tp, 1);
    assert_eq!(l[6], lay(2, 1, 1, 0));
    assert_eq!(l.len(), 6 + 3 + 3);
    for x in &l {
        assert!(x.gpus() <= 6, "{x:?}");
        assert_eq!(
            x.gpus(),
            x.prefill * x.prefill_tp * x.dp + x.decode * x.decode_tp * x.dp
        );
    }
    // 6 prefill TP2 + 1 decode TP4 (issue 53's Qwen3-32B pick) is 16 GPUs.
    let pick = Layout {
        prefill_tp: 2,
        decode_tp: 4,
        ..lay(2, 1, 6, 1)
    };
    assert_eq!(pick.gpus(), 16);
    assert!(pick.tps_differ() && !lay(2, 1, 3, 0).tps_differ());
    let l = enumerate_space(&space(
        per_pool(&[2], &[4]),
        &[1, 2],
        &[Experts::Off],
        16,
        Kinds::Both,
    ));
    assert!(l.contains(&pick));
    // DP multiplies each pool: 2P TP2 + 1D TP4 at DP2 is (4 + 4) × 2,
    // 3P (6 + 4) × 2 is over the budget.
    assert!(l.iter().all(|x| x.gpus() <= 16 && x.decode > 0));
    assert!(l.contains(&Layout {
        dp: 2,
        prefill: 2,
        ..pick
    }));
    assert!(!l.contains(&Layout {
        dp: 2,
        prefill: 3,
        ..pick
    }));
}

#[test]
fn equal_pool_tps_enumerate_what_one_tp_does() {
    // Per-pool lists of one TP each are the uniform plan, in its order.
    for tp in [1, 2, 4] {
        let one = enumerate(&[tp], &[1, 2], 1, 12, Kinds::Both);
        let pools = enumerate_space(&space(
            per_pool(&[tp], &[tp]),
            &[1, 2],
            &[Experts::Off],
            12,
            Kinds::Both,
        ));
        assert_eq!(one, pools);
    }
    // Square lists hold every uniform layout, plus the mixed pairs.
    let uniform = enumerate(&[1, 2, 4], &[1], 1, 16, Kinds::Both);
    let square = enumerate_space(&space(
        per_pool(&[1, 2, 4], &[1, 2, 4]),
        &[1],
        &[Experts::Off],
        16,
        Kinds::Both,
    ));
    assert!(uniform.iter().all(|u| square.contains(u)));
    let mixed = square.iter().filter(|x| x.tps_differ()).count();
    assert_eq!(square.len(), uniform.len() + mixed);
    assert!(square.len() > 100, "{}", square.len());
    let mut seen = std::collections::BTreeSet::new();
    assert!(square.iter().all(|x| seen.insert((
        x.prefill_tp,
        x.decode_tp,
        x.dp,
        x.prefill,
        x.decode
    ))));
    // Sizes out of range are dropped, not multiplied.
    let l = enumerate_space(&space(
        per_pool(&[0, 1], &[2000, 1]),
        &[1],
        &[Experts::Off],
        2,
        Kinds::Both,
    ));
    assert_eq!(l, enumerate(&[1], &[1], 1, 2, Kinds::Both));
}

#[test]
fn expert_parallel_layouts_need_more_than_one_rank() {
    let both = [Experts::Off, Experts::Parallel];
    let l = enumerate_space(&space(
        PoolTps::Same(vec![1]),
        &[1, 2],
        &both,
        4,
        Kinds::Aggregated,
    ));
    let ep = |x: &Layout| x.experts == Experts::Parallel;
    // TP1 DP1: one rank, no EP; TP1 DP2: each worker's two ranks may.
    assert!(l.iter().filter(|x| x.dp == 1).all(|x| !ep(x)));
    let dp2: Vec<(u32, bool)> = l
        .iter()
        .filter(|x| x.dp == 2)
        .map(|x| (x.prefill, ep(x)))
        .collect();
    assert_eq!(dp2, [(1, false), (2, false), (1, true), (2, true)]);
    // TP2 alone is two ranks; a split counts its widest pool.
    assert!(expert_parallel_fits(&lay(2, 1, 1, 0)));
    assert!(!expert_parallel_fits(&lay(1, 1, 3, 2)));
    let mixed = Layout {
        decode_tp: 2,
        ..lay(1, 1, 2, 1)
    };
    assert!(expert_parallel_fits(&mixed));
    // EP changes no GPU count.
    let on = Layout {
        experts: Experts::Parallel,
        ..lay(1, 4, 1, 0)
    };
    assert_eq!(on.gpus(), 4);
    // Off alone is the plan without expert parallelism.
    let off = enumerate_space(&space(
        PoolTps::Same(vec![1]),
        &[1, 2],
        &[Experts::Off],
        4,
        Kinds::Both,
    ));
    assert_eq!(off, enumerate(&[1], &[1, 2], 1, 4, Kinds::Both));
    // On alone: only the layouts with ranks to spread over.
    let only = enumerate_space(&space(
        PoolTps::Same(vec![1]),
        &[1, 2],
        &[Experts::Parallel],
        4,
        Kinds::Both,
    ));
    assert!(only.iter().all(|x| ep(x) && x.dp == 2));
    assert_eq!(only.len(), 3);
}

#[test]
fn labels_and_grid_follow_the_axes() {
    let mixed = Layout {
        decode_tp: 4,
        experts: Experts::Parallel,
        ..lay(2, 2, 6, 1)
    };
    assert_eq!(Axes::default().keys(), AXES);
    assert_eq!(mixed.labels(Axes::default()), ["2", "2", "6", "1"]);
    let all = Axes {
        per_pool_tp: true,
        experts: true,
    };
    assert_eq!(
        all.keys(),
        ["prefill_tp", "decode_tp", "dp", "prefill", "decode", "ep"]
    );
    assert_eq!(mixed.labels(all), ["2", "4", "2", "6", "1", "on"]);
    let layouts = [mixed, lay(1, 1, 2, 0)];
    let plan = Plan {
        layouts: &layouts,
        shared: &[],
        gpus: (1, 16),
        shard: None,
        axes: all,
    };
    let g = plan.grid_json();
    let keys: Vec<&str> = g["axes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, all.keys());
    assert_eq!(g["axes"][0]["values"], json!(["1", "2"]));
    assert_eq!(g["axes"][1]["values"], json!(["1", "4"]));
    assert_eq!(g["axes"][5]["values"], json!(["off", "on"]));
    // Without the flags the grid is the one plans always wrote.
    let plain = Plan {
        axes: Axes::default(),
        ..plan
    };
    assert_eq!(
        plain.grid_json()["axes"],
        json!([
            {"key": "tp", "values": ["1", "2"]},
            {"key": "dp", "values": ["1", "2"]},
            {"key": "prefill", "values": ["2", "6"]},
            {"key": "decode", "values": ["0", "1"]},
        ])
    );
}

#[test]
fn repeated_sizes_count_once_and_a_huge_budget_is_counted_not_held() {
    let once = enumerate_space(&space(
        per_pool(&[1, 2], &[2]),
        &[1, 2],
        &[Experts::Off],
        8,
        Kinds::Both,
    ));
    let twice = enumerate_space(&space(
        per_pool(&[1, 2, 1, 2], &[2, 2]),
        &[1, 2, 1],
        &[Experts::Off, Experts::Off],
        8,
        Kinds::Both,
    ));
    assert_eq!(once, twice);
    // 1024 GPUs at TP 1, 2, 4 per pool: far more layouts than a plan
    // runs, refused with their count.
    let b = Budget {
        max: Some(MAX_GPUS),
        min: 1,
        dps: vec![1],
        experts: vec![Experts::Off],
    };
    let tps = per_pool(&[1, 2, 4], &[1, 2, 4]);
    match b.layouts(&tps, MAX_GPUS, Kinds::Both) {
        Err(PlanError::TooManyLayouts { found, most }) => {
            assert_eq!(most, MAX_LAYOUTS);
            // (1,1) alone: 1024 aggregated + 1023·1024/2 splits.
            assert!(found > 1024 + 1023 * 512, "{found}");
        }
        other => panic!("{other:?}"),
    }
}
