//! A scenario's checks: what it expected, what it observed, a verdict.

use super::scenario::Scenario;
use serde::Serialize;
use serde_json::{json, Value};

/// One expectation of a scenario, with what was observed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    /// What is checked.
    pub what: String,
    /// What the DEP expects (a value, or a relation such as `> 0`).
    pub expected: Value,
    /// What the run showed.
    pub observed: Value,
    /// `pass` or `fail`.
    pub verdict: &'static str,
}

/// A scenario's checks for one backend.
#[derive(Clone, Debug, Default)]
pub struct Checks {
    checks: Vec<Check>,
}

impl Checks {
    fn push(&mut self, what: impl Into<String>, expected: Value, observed: Value, ok: bool) {
        self.checks.push(Check {
            what: what.into(),
            expected,
            observed,
            verdict: if ok { "pass" } else { "fail" },
        });
    }

    /// `observed` must equal `expected`.
    pub fn eq(
        &mut self,
        what: impl Into<String>,
        expected: impl Into<Value>,
        observed: impl Into<Value>,
    ) {
        let (e, o) = (expected.into(), observed.into());
        let ok = e == o;
        self.push(what, e, o, ok);
    }

    /// `observed` must be above zero.
    pub fn positive(&mut self, what: impl Into<String>, observed: &Value) {
        let ok = observed.as_f64().is_some_and(|x| x > 0.0);
        self.push(what, json!("> 0"), observed.clone(), ok);
    }

    /// `observed` must be below `bound`.
    pub fn below(&mut self, what: impl Into<String>, observed: &Value, bound: f64) {
        let ok = observed.as_f64().is_some_and(|x| x < bound);
        self.push(what, json!(format!("< {bound}")), observed.clone(), ok);
    }

    /// A check decided by the caller, with `expected` described in words.
    pub fn holds(
        &mut self,
        what: impl Into<String>,
        expected: &str,
        observed: impl Into<Value>,
        ok: bool,
    ) {
        self.push(what, json!(expected), observed.into(), ok);
    }

    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.verdict == "pass")
    }

    /// Breaks the first check on purpose (the command line's hidden
    /// `--break-first-check`, so a test can see a failure exit non-zero):
    /// it now expects anything but what it observed.
    pub fn sabotage(&mut self) {
        if let Some(c) = self.checks.first_mut() {
            c.expected = json!(format!("anything but {}", c.observed));
            c.verdict = "fail";
        }
    }

    /// The scenario's outcome for `backend` as JSON: its verdict, checks
    /// and the observations they were read from.
    pub fn outcome(self, scenario: Scenario, backend: &str, observed: Value) -> Value {
        json!({
            "scenario": scenario.name(),
            "backend": backend,
            "verdict": if self.passed() { "pass" } else { "fail" },
            "checks": self.checks,
            "observed": observed,
        })
    }
}

/// Both workers drained with no KV in use, from a scenario's `end`
/// observations (`View::end` in the harness).
pub(super) fn end(c: &mut Checks, e: &Value) {
    for pool in ["prefill", "decode"] {
        c.eq(
            format!("{pool} worker drained at the end"),
            true,
            e[pool]["drained"].clone(),
        );
        c.eq(
            format!("{pool} KV in use at the end, blocks"),
            0,
            e[pool]["kv_used_blocks"].clone(),
        );
    }
}
