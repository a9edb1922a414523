//! `dst --schedules N --seed S`: runs DST schedules `S..S+N` on the real
//! cores (see `handoff_tests::dst`), prints progress every 10% and a summary
//! (schedules, wall time, faults injected by kind, lifecycle paths reached,
//! violations), shrinks the first failing schedule of each violation kind
//! and prints its reproduction, and exits non-zero on any violation.
//! `dst --repro FILE` reruns a printed reproduction.
//! `cargo xtask dst` builds and runs it in release.

use handoff_tests::dst::{self, Kind, Schedule};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

fn usage() -> ExitCode {
    eprintln!("usage: dst [--schedules N] [--seed S] [--no-shrink]\n       dst --repro FILE   (a failure as printed: deployment, fault plan and trace sections)");
    ExitCode::from(2)
}

/// Runs the reproduction in `path` (the sections a failure prints) and
/// prints its violations; `DST_TRACE=1` prints its events too.
fn repro(path: &str) -> ExitCode {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut sections: BTreeMap<&str, String> = BTreeMap::new();
    let mut current = "";
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("--- ") {
            current = if name.starts_with("deployment") {
                "deployment"
            } else if name.starts_with("fault plan") {
                "plan"
            } else if name.starts_with("trace") {
                "trace"
            } else {
                ""
            };
            continue;
        }
        if !current.is_empty() {
            let s = sections.entry(current).or_default();
            s.push_str(line);
            s.push('\n');
        }
    }
    let get = |k: &str| sections.get(k).cloned().unwrap_or_default();
    let s = match Schedule::from_text(&get("deployment"), &get("plan"), &get("trace")) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{path}: {e}");
            return ExitCode::from(2);
        }
    };
    let o = dst::check(&s);
    println!("{} engine units; faults: {}", o.units, o.faults);
    for v in &o.violations {
        println!("  {v}");
    }
    if o.violations.is_empty() {
        println!("no violation");
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn main() -> ExitCode {
    let mut n = 1_000u64;
    let mut seed = 1u64;
    let mut shrink = true;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut num = |name: &str| -> Option<u64> {
            let v = args.next().and_then(|v| v.parse().ok());
            if v.is_none() {
                eprintln!("{name} needs a number");
            }
            v
        };
        match a.as_str() {
            "--schedules" => match num("--schedules") {
                Some(v) => n = v,
                None => return usage(),
            },
            "--seed" => match num("--seed") {
                Some(v) => seed = v,
                None => return usage(),
            },
            "--no-shrink" => shrink = false,
            "--repro" => {
                return match args.next() {
                    Some(p) => repro(&p),
                    None => usage(),
                }
            }
            _ => return usage(),
        }
    }
    // Panics are reported as violations; keep their messages off stderr
    // while schedules run (the shrinker reruns them anyway).
    std::panic::set_hook(Box::new(|_| {}));
    let start = Instant::now();
    let step = (n / 10).max(1);
    eprintln!("dst: schedules {seed}..{}", seed.wrapping_add(n));
    let sum = dst::run_many(seed, n, |done, s| {
        if done % step == 0 || done == n {
            eprintln!(
                "dst: {done}/{n} ({}%) in {:.1} s, {} failing",
                done * 100 / n.max(1),
                start.elapsed().as_secs_f64(),
                s.failing.len()
            );
        }
    });
    let wall = start.elapsed().as_secs_f64();
    println!("schedules run: {}", sum.schedules);
    println!(
        "wall time: {wall:.1} s ({:.2} ms per schedule, {} engine units)",
        wall * 1e3 / sum.schedules.max(1) as f64,
        sum.units
    );
    println!(
        "schedules with faults injected: {} of {}",
        sum.faulted, sum.schedules
    );
    println!("faults injected: {}", sum.faults);
    println!("lifecycle paths reached:");
    for (name, count) in sum.paths.rows() {
        println!("  {name:<36} {count}");
    }
    let mut by_kind: BTreeMap<Kind, (u64, u64)> = BTreeMap::new();
    for (s, vs) in &sum.failing {
        let mut kinds: Vec<Kind> = vs.iter().map(|v| v.kind).collect();
        kinds.sort();
        kinds.dedup();
        for k in kinds {
            let e = by_kind.entry(k).or_insert((0, *s));
            e.0 += 1;
        }
    }
    let total: usize = sum.failing.iter().map(|(_, v)| v.len()).sum();
    println!(
        "violations found: {total} in {} schedules",
        sum.failing.len()
    );
    for (k, (count, first)) in &by_kind {
        println!("  {k:?}: {count} schedules, first seed {first}");
    }
    if sum.failing.is_empty() {
        return ExitCode::SUCCESS;
    }
    let seeds: Vec<String> = sum
        .failing
        .iter()
        .take(50)
        .map(|(s, _)| s.to_string())
        .collect();
    println!("failing seeds (first 50): {}", seeds.join(" "));
    if std::env::var_os("DST_LIST").is_some() {
        for (s, vs) in &sum.failing {
            println!("seed {s}: {}", vs[0]);
        }
    }
    if shrink {
        let mut done = std::collections::BTreeSet::new();
        for (s, vs) in &sum.failing {
            let k = vs[0].kind;
            if !done.insert(k) || done.len() > 6 {
                continue;
            }
            let f = dst::shrink(&Schedule::new(*s), vs.clone());
            println!("\n{}", f.render());
            if std::env::var_os("DST_TRACE_SHRUNK").is_some() {
                std::env::set_var("DST_TRACE", "1");
                dst::check(&f.shrunk);
                std::env::remove_var("DST_TRACE");
            }
        }
    }
    ExitCode::FAILURE
}
