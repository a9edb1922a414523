//! The grid of a `sweep`: replay options every configuration shares (the
//! base) and the axes whose values multiply into configurations, read from
//! a TOML or JSON file and from repeated `--set key=v1,v2,...`.
//!
//! Keys are `replay`'s long flag names (`prefill`, `decode-kv-tokens`;
//! `_` may stand for `-`). Every key and every value is checked against
//! `replay`'s own parser before anything runs, so a bad grid fails with the
//! place it came from (`FILE:LINE: grid.router[1] = "kvv": ...`, or the
//! `--set` it was given in) instead of in the middle of a sweep.
//!
//! A file looks like this (JSON: the same two objects):
//!
//! ```toml
//! [base]                 # options every configuration gets
//! trace = "tests/data/conversation_2000.jsonl"
//! decode = 4
//!
//! [grid]                 # one configuration per combination
//! prefill = [2, 4]
//! router = ["kv", "round-robin"]
//! ```
//!
//! With `sweep --experiment` the keys are `experiment`'s flags instead and
//! each configuration is one `experiment e4` (E1, E3, E4, E4-ablate).
//!
//! Configurations are numbered in a fixed order: the file's axes in key
//! order (JSON and TOML tables are read as sorted maps), then the `--set`
//! axes in the order given; the last axis varies fastest. The number is a
//! configuration's identity in report file names, summaries and shards.

use crate::experiment_cmd::ExperimentArgs;
use crate::replay_cmd::ReplayArgs;
use clap::{CommandFactory, Parser};
use handoff_workload::file::FileKind;
use std::path::Path;

/// The command a grid sweeps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kind {
    /// `replay`: one report per configuration.
    #[default]
    Replay,
    /// `experiment e4`: the four variants and the H4 verdicts per
    /// configuration.
    Experiment,
}

impl Kind {
    /// The command's name, in messages.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Replay => "replay",
            Kind::Experiment => "experiment",
        }
    }

    fn command(self) -> clap::Command {
        match self {
            Kind::Replay => ReplayOnly::command(),
            Kind::Experiment => ExperimentOnly::command(),
        }
    }
}

/// `experiment e4`'s options parsed on their own.
#[derive(Parser, Debug)]
#[command(name = "experiment", no_binary_name = true)]
pub struct ExperimentOnly {
    #[command(flatten)]
    pub args: ExperimentArgs,
}

/// A configuration's options, parsed by its command's own parser.
#[derive(Debug)]
pub enum Parsed {
    /// `replay`'s.
    Replay(Box<ReplayArgs>),
    /// `experiment e4`'s.
    Experiment(Box<ExperimentArgs>),
}

/// `replay`'s options parsed on their own, to check and build a
/// configuration with exactly the parser `replay` uses.
#[derive(Parser, Debug)]
#[command(name = "replay", no_binary_name = true)]
pub struct ReplayOnly {
    #[command(flatten)]
    pub args: ReplayArgs,
}

/// One value of an option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// A switch (`--no-multi-step`): on or off.
    Switch(bool),
    /// An option's value, as its flag would take it.
    Text(String),
}

impl Value {
    /// The value as the summary shows it.
    pub fn label(&self) -> String {
        match self {
            Value::Switch(b) => b.to_string(),
            Value::Text(s) => s.clone(),
        }
    }

    fn push_args(&self, key: &str, out: &mut Vec<String>) {
        match self {
            Value::Switch(true) => out.push(format!("--{key}")),
            Value::Switch(false) => {}
            // `--key=value`, so a value that starts with `-` stays a value.
            Value::Text(v) => out.push(format!("--{key}={v}")),
        }
    }
}

/// An option every configuration gets.
#[derive(Clone, Debug)]
pub struct Fixed {
    /// Flag name without `--`.
    pub key: String,
    /// Its value.
    pub value: Value,
    /// Where it was given.
    pub origin: String,
}

/// An option whose values multiply into configurations.
#[derive(Clone, Debug)]
pub struct Axis {
    /// Flag name without `--`.
    pub key: String,
    /// Its values, in order.
    pub values: Vec<Value>,
    /// Where it was given.
    pub origin: String,
}

/// A whole grid: the base and the axes.
#[derive(Clone, Debug, Default)]
pub struct Grid {
    /// The command swept (set before reading keys: it decides which are
    /// valid).
    pub kind: Kind,
    /// Options from the file's `[base]`.
    pub base: Vec<Fixed>,
    /// Replay flags given after `--`.
    pub trailing: Vec<String>,
    /// The axes, in numbering order.
    pub axes: Vec<Axis>,
}

/// One configuration of a grid.
#[derive(Debug)]
pub struct Configuration {
    /// Its number in the grid (see the module docs).
    pub index: usize,
    /// Each axis's value for it, in axis order.
    pub labels: Vec<String>,
    /// Its command's flags.
    pub args: Vec<String>,
    /// Them, parsed.
    pub parsed: Parsed,
}

/// Largest grid accepted: every configuration is built and checked before
/// the first runs.
pub const MAX_CONFIGURATIONS: usize = 1 << 20;

fn normalise(key: &str) -> String {
    key.trim().trim_start_matches("--").replace('_', "-")
}

/// Whether `key` is a switch (takes no value) of `kind`'s command, or an
/// error naming the closest flag.
fn is_switch(kind: Kind, key: &str) -> Result<bool, String> {
    let cmd = kind.command();
    let what = kind.name();
    if let Some(a) = cmd.get_arguments().find(|a| a.get_long() == Some(key)) {
        return Ok(!a.get_action().takes_values());
    }
    let near = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .min_by_key(|l| edit_distance(l, key));
    Err(match near {
        Some(n) if edit_distance(n, key) <= 3 => {
            format!("unknown {what} option --{key} (did you mean --{n}?)")
        }
        _ => format!("unknown {what} option --{key}"),
    })
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Flags a sweep writes itself or decides per configuration.
fn refused(kind: Kind, key: &str) -> Option<&'static str> {
    let writes = "the sweep writes each configuration's report itself (see --out)";
    match (kind, key) {
        (
            Kind::Replay,
            "json" | "output" | "transcript" | "html" | "per-request-jsonl" | "wall-time",
        ) => Some(writes),
        (Kind::Replay, "allow-failures") => {
            Some("a sweep always records failed requests in its summary")
        }
        (Kind::Experiment, "json" | "log" | "metrics") => Some(writes),
        (Kind::Experiment, "naive" | "enable-d-to-p-sync" | "disable-prefill-bypass") => {
            Some("each configuration runs all four variants (E1, E3, E4, E4-ablate)")
        }
        _ => None,
    }
}

fn check_key(kind: Kind, key: &str) -> Result<bool, String> {
    if let Some(why) = refused(kind, key) {
        return Err(format!("--{key} cannot be part of a sweep: {why}"));
    }
    is_switch(kind, key)
}

/// A value from the file or `--set`, as the flag takes it.
fn value_of(switch: bool, key: &str, v: &serde_json::Value) -> Result<Value, String> {
    use serde_json::Value as J;
    match (switch, v) {
        (true, J::Bool(b)) => Ok(Value::Switch(*b)),
        (true, J::String(s)) if s == "true" || s == "false" => Ok(Value::Switch(s == "true")),
        (true, _) => Err(format!(
            "--{key} is a switch: its values are true and false, not {v}"
        )),
        (false, J::String(s)) => Ok(Value::Text(s.clone())),
        (false, J::Number(n)) => Ok(Value::Text(n.to_string())),
        (false, J::Bool(_)) => Err(format!("--{key} takes a value, not {v}")),
        (false, _) => Err(format!(
            "--{key}: a value must be a string or a number, not {v}"
        )),
    }
}

/// 1-based line of the first line of `text` that names `key` (as `key =`
/// in TOML or `"key":` in JSON, with `-` or `_`), after the line that opens
/// `section`: a pointer for the reader, not a parser.
fn line_of(text: &str, section: &str, key: &str) -> Option<usize> {
    let spellings = [key.to_string(), key.replace('-', "_")];
    let mut in_section = false;
    for (n, line) in text.lines().enumerate() {
        let l = line.trim_start();
        if l.starts_with(&format!("[{section}]")) || l.contains(&format!("\"{section}\"")) {
            in_section = true;
            continue;
        }
        if !in_section {
            continue;
        }
        for k in &spellings {
            let quoted = format!("\"{k}\"");
            let bare = l.strip_prefix(k.as_str()).map(str::trim_start);
            if l.contains(&quoted) || bare.is_some_and(|r| r.starts_with('=')) {
                return Some(n + 1);
            }
        }
    }
    None
}

impl Grid {
    /// Reads a grid file: TOML, or JSON when the name ends in `.json`.
    pub fn read_file(&mut self, path: &Path) -> Result<(), String> {
        let name = path.display().to_string();
        let text = handoff_workload::file::read_to_string("--grid", path, FileKind::Grid)
            .map_err(|e| e.to_string())?;
        self.parse_text(&name, &text, path.extension().is_some_and(|e| e == "json"))
    }

    /// Parses a grid file's text; `name` prefixes every error.
    pub fn parse_text(&mut self, name: &str, text: &str, json: bool) -> Result<(), String> {
        let root: serde_json::Value = if json {
            serde_json::from_str(text).map_err(|e| format!("{name}: {e}"))?
        } else {
            let t: toml::Table = toml::from_str(text).map_err(|e| format!("{name}: {e}"))?;
            serde_json::to_value(t).map_err(|e| format!("{name}: {e}"))?
        };
        let serde_json::Value::Object(top) = root else {
            return Err(format!("{name}: expected an object with `base` and `grid`"));
        };
        for k in top.keys() {
            if k != "base" && k != "grid" {
                return Err(format!(
                    "{name}:{}: unknown section `{k}` (a grid file has `base` and `grid`)",
                    text.lines()
                        .position(|l| l.contains(k.as_str()))
                        .map_or(0, |n| n + 1)
                ));
            }
        }
        let at = |section: &str, key: &str| match line_of(text, section, key) {
            Some(l) => format!("{name}:{l}: {section}.{key}"),
            None => format!("{name}: {section}.{key}"),
        };
        if let Some(base) = top.get("base") {
            let serde_json::Value::Object(base) = base else {
                return Err(format!("{name}: `base` must be a table of options"));
            };
            for (k, v) in base {
                let key = normalise(k);
                let origin = at("base", k);
                let switch = check_key(self.kind, &key).map_err(|e| format!("{origin}: {e}"))?;
                let value = value_of(switch, &key, v).map_err(|e| format!("{origin}: {e}"))?;
                self.base.push(Fixed { key, value, origin });
            }
        }
        let Some(grid) = top.get("grid") else {
            return Err(format!("{name}: no `grid` section (the options to sweep)"));
        };
        let serde_json::Value::Object(grid) = grid else {
            return Err(format!(
                "{name}: `grid` must be a table of option = [values]"
            ));
        };
        for (k, v) in grid {
            let key = normalise(k);
            let origin = at("grid", k);
            let switch = check_key(self.kind, &key).map_err(|e| format!("{origin}: {e}"))?;
            let list = match v {
                serde_json::Value::Array(a) => a.clone(),
                one => vec![one.clone()],
            };
            let mut values = Vec::new();
            for (i, v) in list.iter().enumerate() {
                values.push(
                    value_of(switch, &key, v).map_err(|e| format!("{origin}[{i}] = {v}: {e}"))?,
                );
            }
            self.add_axis(Axis {
                key,
                values,
                origin,
            })?;
        }
        Ok(())
    }

    /// Adds `--set key=v1,v2,...`.
    pub fn parse_set(&mut self, set: &str) -> Result<(), String> {
        let origin = format!("--set {set}");
        let Some((k, vs)) = set.split_once('=') else {
            return Err(format!("{origin}: expected KEY=V1,V2,..."));
        };
        let key = normalise(k);
        let switch = check_key(self.kind, &key).map_err(|e| format!("{origin}: {e}"))?;
        let mut values = Vec::new();
        for v in vs.split(',') {
            let v = serde_json::Value::String(v.trim().to_string());
            values.push(value_of(switch, &key, &v).map_err(|e| format!("{origin}: {e}"))?);
        }
        // A later --set of a file's key replaces the file's values.
        self.axes.retain(|a| a.key != key);
        self.add_axis(Axis {
            key,
            values,
            origin,
        })
    }

    fn add_axis(&mut self, axis: Axis) -> Result<(), String> {
        if axis.values.is_empty() {
            return Err(format!("{}: no values", axis.origin));
        }
        if self.axes.iter().any(|a| a.key == axis.key) {
            return Err(format!("{}: --{} is swept twice", axis.origin, axis.key));
        }
        self.axes.push(axis);
        Ok(())
    }

    /// Axis keys, in numbering order.
    pub fn keys(&self) -> Vec<String> {
        self.axes.iter().map(|a| a.key.clone()).collect()
    }

    /// How many configurations the grid has (`None` past
    /// [`MAX_CONFIGURATIONS`]).
    pub fn len(&self) -> Option<usize> {
        self.axes
            .iter()
            .try_fold(1usize, |n, a| n.checked_mul(a.values.len()))
            .filter(|n| *n <= MAX_CONFIGURATIONS)
    }

    /// The flags every configuration shares: the file's base (less any key
    /// an axis sweeps), then the flags after `--`.
    pub fn base_args(&self) -> Vec<String> {
        let mut out = Vec::new();
        for f in &self.base {
            if !self.axes.iter().any(|a| a.key == f.key) {
                f.value.push_args(&f.key, &mut out);
            }
        }
        out.extend(self.trailing.iter().cloned());
        out
    }

    fn parse(&self, args: &[String]) -> Result<Parsed, String> {
        let parsed = match self.kind {
            Kind::Replay => {
                ReplayOnly::try_parse_from(args).map(|o| Parsed::Replay(Box::new(o.args)))
            }
            // `experiment e4`'s options.
            Kind::Experiment => {
                ExperimentOnly::try_parse_from(args).map(|o| Parsed::Experiment(Box::new(o.args)))
            }
        };
        parsed.map_err(|e| {
            let text = e.to_string();
            let mut lines = text.lines().filter(|l| !l.trim().is_empty());
            let first = lines.next().unwrap_or("").trim_start_matches("error: ");
            match lines.find(|l| l.trim_start().starts_with("tip:")) {
                Some(tip) => format!("{first} ({})", tip.trim()),
                None => first.to_string(),
            }
        })
    }

    /// Every configuration, checked: each base option and each axis value
    /// alone (errors name where they were given), then each whole
    /// configuration's deployment (errors name the configuration).
    pub fn configurations(&self) -> Result<Vec<Configuration>, String> {
        let n = self
            .len()
            .ok_or_else(|| format!("the grid has more than {MAX_CONFIGURATIONS} configurations"))?;
        for a in &self.axes {
            if self
                .trailing
                .iter()
                .any(|t| *t == format!("--{}", a.key) || t.starts_with(&format!("--{}=", a.key)))
            {
                return Err(format!(
                    "{}: --{} is also given after `--`; give it in one place",
                    a.origin, a.key
                ));
            }
        }
        let base = self.base_args();
        let base_parsed = self.parse(&base).map_err(|e| {
            // Name the base option at fault when one fails alone.
            for f in &self.base {
                let mut one = Vec::new();
                f.value.push_args(&f.key, &mut one);
                if let Err(e) = self.parse(&one) {
                    return format!("{}: {e}", f.origin);
                }
            }
            format!("the sweep's base options: {e}")
        })?;
        let outputs = match &base_parsed {
            Parsed::Replay(r) => r.per_run_outputs(),
            Parsed::Experiment(e) => e.per_run_outputs(),
        };
        if !outputs.is_empty() {
            return Err(format!(
                "{} after `--` cannot be part of a sweep: the sweep writes each report itself",
                outputs.join(" ")
            ));
        }
        for a in &self.axes {
            for (i, v) in a.values.iter().enumerate() {
                let mut args = base.clone();
                v.push_args(&a.key, &mut args);
                self.parse(&args)
                    .map_err(|e| format!("{}[{i}] = {}: {e}", a.origin, v.label()))?;
            }
        }
        let mut out = Vec::with_capacity(n);
        for index in 0..n {
            let mut args = base.clone();
            let mut labels = Vec::with_capacity(self.axes.len());
            let mut rest = index;
            let mut picks = vec![0; self.axes.len()];
            for (k, a) in self.axes.iter().enumerate().rev() {
                picks[k] = rest % a.values.len();
                rest /= a.values.len();
            }
            for (a, &p) in self.axes.iter().zip(&picks) {
                a.values[p].push_args(&a.key, &mut args);
                labels.push(a.values[p].label());
            }
            let describe = || {
                self.axes
                    .iter()
                    .zip(&labels)
                    .map(|(a, l)| format!("{}={l}", a.key))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let parsed = self
                .parse(&args)
                .and_then(|p| {
                    match &p {
                        Parsed::Replay(r) => r.check()?,
                        Parsed::Experiment(e) => e.check()?,
                    }
                    Ok(p)
                })
                .map_err(|e| format!("configuration {index} ({}): {e}", describe()))?;
            out.push(Configuration {
                index,
                labels,
                args,
                parsed,
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(text: &str, json: bool) -> Result<Grid, String> {
        let mut g = Grid::default();
        g.parse_text("g", text, json)?;
        Ok(g)
    }

    #[test]
    fn toml_and_json_give_the_same_configurations_in_a_fixed_order() {
        let t = grid(
            "[base]\ndecode = 1\n[grid]\nrouter = [\"kv\", \"random\"]\nprefill = [1, 2, 3]\n",
            false,
        )
        .unwrap();
        let j = grid(
            r#"{"base": {"decode": 1}, "grid": {"prefill": [1, 2, 3], "router": ["kv", "random"]}}"#,
            true,
        )
        .unwrap();
        let (ct, cj) = (t.configurations().unwrap(), j.configurations().unwrap());
        assert_eq!(ct.len(), 6);
        let args = |c: &[Configuration]| c.iter().map(|c| c.args.clone()).collect::<Vec<_>>();
        assert_eq!(args(&ct), args(&cj));
        // Sorted keys: prefill, then router, the last varying fastest.
        assert_eq!(t.keys(), ["prefill", "router"]);
        assert_eq!(ct[1].labels, ["1", "random"]);
        assert_eq!(ct[2].args, ["--decode=1", "--prefill=2", "--router=kv"]);
    }

    #[test]
    fn set_adds_axes_in_order_and_replaces_a_file_axis() {
        let mut g = grid("[grid]\nprefill = [1, 2]\n", false).unwrap();
        g.parse_set("seed=1,2,3").unwrap();
        g.parse_set("prefill=4").unwrap();
        assert_eq!(g.keys(), ["seed", "prefill"]);
        assert_eq!(g.len(), Some(3));
        g.parse_set("no_multi_step=true,false").unwrap();
        let c = g.configurations().unwrap();
        assert_eq!(c[0].args, ["--seed=1", "--prefill=4", "--no-multi-step"]);
        assert_eq!(c[1].args, ["--seed=1", "--prefill=4"]);
    }

    #[test]
    fn bad_grids_name_the_line_and_the_value() {
        let e = grid("[grid]\nprefill = [1]\nrouter = [\"kv\", \"kvv\"]\n", false)
            .unwrap()
            .configurations()
            .unwrap_err();
        assert!(
            e.starts_with("g:3: grid.router[1] = kvv: invalid value 'kvv'"),
            "{e}"
        );
        let e = grid("[grid]\n\nprefil = [1]\n", false).unwrap_err();
        assert_eq!(
            e,
            "g:3: grid.prefil: unknown replay option --prefil (did you mean --prefill?)"
        );
        let e = grid("{\"grid\": {\n  \"json\": [true]}}", true).unwrap_err();
        assert!(
            e.starts_with("g:2: grid.json: --json cannot be part of a sweep"),
            "{e}"
        );
        let e = grid("[grid]\nprefill = [1, \n", false).unwrap_err();
        assert!(e.starts_with("g: TOML parse error at line 2"), "{e}");
        let e = grid("{\"grid\": [1,]}", true).unwrap_err();
        assert!(e.contains("line 1 column"), "{e}");
        let e = grid("[grid]\nno-multi-step = [1]\n", false).unwrap_err();
        assert!(e.contains("is a switch"), "{e}");
        let e = grid("[grid]\nprefill = []\n", false).unwrap_err();
        assert_eq!(e, "g:2: grid.prefill: no values");
        let e = grid("[grids]\nprefill = [1]\n", false).unwrap_err();
        assert!(e.starts_with("g:1: unknown section `grids`"), "{e}");
        let e = grid("[grid]\nprefill = [0]\ndecode = [0]\n", false)
            .unwrap()
            .configurations()
            .unwrap_err();
        assert!(
            e.starts_with("configuration 0 (decode=0 prefill=0): --prefill 0 --decode 0"),
            "{e}"
        );
        let mut g = Grid::default();
        assert!(g.parse_set("prefill").unwrap_err().contains("KEY=V1,V2"));
        g.parse_set("prefill=1").unwrap();
        g.trailing = vec!["--prefill".into(), "2".into()];
        assert!(g
            .configurations()
            .unwrap_err()
            .contains("also given after `--`"));
    }

    #[test]
    fn oversized_grids_are_refused_before_building() {
        let mut g = Grid::default();
        let many = (0..1024)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",");
        g.parse_set(&format!("seed={many}")).unwrap();
        g.parse_set(&format!("max-running={many}")).unwrap();
        g.parse_set("prefill=1,2").unwrap();
        assert_eq!(g.len(), None);
        assert!(g.configurations().unwrap_err().contains("more than"));
    }
}
