//! The structured JSONL log of the seed's §6 ("Structural log channels",
//! `structural/d-to-p-sync.jsonl`): one JSON object per line with `ts`
//! (virtual milliseconds), `event`, `sid` and the event's fields.
//!
//! Lines are written by hand, in a fixed key order and with fixed float
//! precision, so the same run produces byte-identical logs.

use handoff_core::{Instant, SessionId};
use std::fmt::Write as _;

/// One field value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// An integer.
    U(u64),
    /// A float, written with three decimals.
    F(f64),
    /// A string.
    S(&'a str),
    /// A boolean.
    B(bool),
}

/// In-memory JSONL log; disabled logs drop every line without formatting.
#[derive(Clone, Debug, Default)]
pub struct EventLog {
    enabled: bool,
    label: Option<String>,
    lines: Vec<String>,
}

fn push_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn push_value(out: &mut String, v: Value<'_>) {
    match v {
        Value::U(n) => {
            let _ = write!(out, "{n}");
        }
        Value::F(x) if x.is_finite() => {
            let _ = write!(out, "{x:.3}");
        }
        Value::F(_) => out.push_str("null"),
        Value::S(s) => push_str(out, s),
        Value::B(b) => out.push_str(if b { "true" } else { "false" }),
    }
}

impl EventLog {
    /// A log that keeps lines when `enabled`.
    pub fn new(enabled: bool) -> Self {
        EventLog {
            enabled,
            label: None,
            lines: Vec::new(),
        }
    }

    /// Adds `"run": label` to every line (several runs in one file).
    pub fn with_label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Whether lines are kept.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Appends one event.
    pub fn emit(
        &mut self,
        now: Instant,
        event: &str,
        sid: SessionId,
        fields: &[(&str, Value<'_>)],
    ) {
        if !self.enabled {
            return;
        }
        let mut line = String::with_capacity(96);
        let _ = write!(
            line,
            "{{\"ts\":{:.3},\"event\":",
            now.as_nanos() as f64 / 1e6
        );
        push_str(&mut line, event);
        let _ = write!(line, ",\"sid\":\"{}\"", sid.0);
        if let Some(label) = &self.label {
            line.push_str(",\"run\":");
            push_str(&mut line, label);
        }
        for (k, v) in fields {
            line.push(',');
            push_str(&mut line, k);
            line.push(':');
            push_value(&mut line, *v);
        }
        line.push('}');
        self.lines.push(line);
    }

    /// The lines so far.
    pub fn lines(&self) -> &[String] {
        &self.lines
    }

    /// Takes the lines.
    pub fn into_lines(self) -> Vec<String> {
        self.lines
    }

    /// Lines whose event is `event`.
    pub fn count(&self, event: &str) -> usize {
        let needle = format!("\"event\":\"{event}\"");
        self.lines.iter().filter(|l| l.contains(&needle)).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_valid_json_in_fixed_order() {
        let mut log = EventLog::new(true).with_label("E4");
        log.emit(
            Instant::from_millis(1500),
            "snapshot_push_failed",
            SessionId(3),
            &[
                ("reason", Value::S("transfer \"failed\"")),
                ("attempt", Value::U(1)),
                ("age_s", Value::F(0.5)),
                ("retry", Value::B(true)),
            ],
        );
        let line = &log.lines()[0];
        assert!(line
            .starts_with(r#"{"ts":1500.000,"event":"snapshot_push_failed","sid":"3","run":"E4""#));
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["reason"], "transfer \"failed\"");
        assert_eq!(v["retry"], true);
        assert_eq!(log.count("snapshot_push_failed"), 1);
        let mut off = EventLog::new(false);
        off.emit(Instant::ZERO, "x", SessionId(0), &[]);
        assert!(off.lines().is_empty());
    }
}
