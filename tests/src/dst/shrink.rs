//! Shrinking a failing schedule and rendering it as a regression test.

use super::running::*;
use super::schedule::*;
use super::violations::*;

/// A failing schedule, shrunk.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The seed it came from.
    pub seed: u64,
    /// The violations of the original schedule.
    pub original: Vec<Violation>,
    /// The shrunk schedule.
    pub shrunk: Schedule,
    /// Its violations.
    pub violations: Vec<Violation>,
    /// Runs the shrinker spent.
    pub runs: u64,
}

/// Shrinks failing `s` (whose run found `violations`) to the smallest
/// schedule that still shows a violation of the first one's kind: timed
/// faults removed one at a time, each fault probability zeroed, then runs
/// of requests removed (halves, quarters, ... single requests), repeated
/// until nothing more goes.
pub fn shrink(s: &Schedule, violations: Vec<Violation>) -> Failure {
    let kind = violations.first().map_or(Kind::Panic, |v| v.kind);
    let mut runs = 0u64;
    let mut best = s.clone().normalised();
    let mut best_v = {
        runs += 1;
        let o = check(&best);
        if o.violations.iter().any(|v| v.kind == kind) {
            o.violations
        } else {
            // Renumbering alone lost it: shrink the original as it was.
            best = s.clone();
            violations.clone()
        }
    };
    let mut try_it = |cand: Schedule, best: &mut Schedule, best_v: &mut Vec<Violation>| {
        let cand = cand.normalised();
        runs += 1;
        let o = check(&cand);
        if o.violations.iter().any(|v| v.kind == kind) {
            *best = cand;
            *best_v = o.violations;
            true
        } else {
            false
        }
    };
    loop {
        let mut progress = false;
        // Timed faults, last first.
        let mut i = best.cfg.faults.timed.len();
        while i > 0 {
            i -= 1;
            if i >= best.cfg.faults.timed.len() {
                continue;
            }
            let mut c = best.clone();
            c.cfg.faults.timed.remove(i);
            progress |= try_it(c, &mut best, &mut best_v);
        }
        // Probabilities.
        for k in 0..4 {
            let f = &best.cfg.faults;
            let p = [
                f.facts.drop,
                f.facts.duplicate,
                f.facts.delay,
                f.transfer_fail,
            ][k];
            if p <= 0.0 {
                continue;
            }
            let mut c = best.clone();
            match k {
                0 => c.cfg.faults.facts.drop = 0.0,
                1 => c.cfg.faults.facts.duplicate = 0.0,
                2 => c.cfg.faults.facts.delay = 0.0,
                _ => c.cfg.faults.transfer_fail = 0.0,
            }
            progress |= try_it(c, &mut best, &mut best_v);
        }
        // The trace: drop halves, then quarters, ... then single requests,
        // latest first (later requests matter least to earlier events).
        let mut size = best.items.len() / 2;
        while size >= 1 {
            let mut start = best.items.len().saturating_sub(size);
            loop {
                if best.items.len() > size && start + size <= best.items.len() {
                    let mut c = best.clone();
                    c.items.drain(start..start + size);
                    progress |= try_it(c, &mut best, &mut best_v);
                }
                if start == 0 {
                    break;
                }
                start = start.saturating_sub(size);
            }
            size /= 2;
        }
        if !progress {
            break;
        }
    }
    Failure {
        seed: s.seed,
        original: violations,
        shrunk: best,
        violations: best_v,
        runs,
    }
}

impl Failure {
    /// The seed, the shrunk plan and trace, the violations, and a
    /// regression test body.
    pub fn render(&self) -> String {
        let s = &self.shrunk;
        let plan = s.cfg.faults.to_string();
        let trace = s.trace_jsonl();
        let mut out = String::new();
        out.push_str(&format!(
            "schedule {} failed ({} violations; shrunk in {} runs to {} timed faults, {} requests):\n",
            self.seed,
            self.original.len(),
            self.runs,
            s.cfg.faults.timed.len(),
            s.items.len()
        ));
        for v in self.violations.iter().take(8) {
            out.push_str(&format!("  {v}\n"));
        }
        out.push_str(&format!("--- deployment ---\n{}\n", s.deployment()));
        out.push_str("--- fault plan ---\n");
        out.push_str(&plan);
        if !plan.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("--- trace (Mooncake JSONL) ---\n");
        out.push_str(&trace);
        out.push_str("--- regression test ---\n");
        out.push_str(&format!(
            "#[test]\nfn dst_schedule_{}() {{\n    let deployment = \"{}\";\n    let plan = \"\n{}\";\n    let trace = r#\"\n{}\"#;\n    handoff_tests::dst::assert_passes(deployment, plan, trace);\n}}\n",
            self.seed,
            s.deployment(),
            plan.trim_end(),
            trace.trim_end(),
        ));
        out
    }
}

/// Runs the schedule given by a [`Schedule::deployment`] line, a fault
/// plan and a Mooncake JSONL trace (blank lines and indentation ignored) and
/// panics with every violation found: the body of a DST regression test.
pub fn assert_passes(deployment: &str, plan: &str, trace: &str) {
    let trace: String = trace
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    let s = Schedule::from_text(deployment, plan, &trace).unwrap_or_else(|e| panic!("{e}"));
    let o = check(&s);
    assert!(
        o.violations.is_empty(),
        "schedule {}:\n{}",
        s.seed,
        o.violations
            .iter()
            .map(|v| format!("  {v}\n"))
            .collect::<String>()
    );
}
