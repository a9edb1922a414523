//! SGLang's environment switches the CLI reads at its edge.

/// SGLang's environment variable for the early send of the cached prefix.
pub const EARLY_SEND_ENV: &str = "SGLANG_DISAGG_PREFILL_EARLY_SEND_CACHED_PREFIX";

/// A boolean as SGLang's `EnvBool.parse` reads one
/// (`python/sglang/srt/environ.py`): case-insensitive `true`/`1`/`yes`/`y`
/// or `false`/`0`/`no`/`n`; anything else is refused.
fn sglang_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "y" => Some(true),
        "false" | "0" | "no" | "n" => Some(false),
        _ => None,
    }
}

/// Whether SGLang prefill workers send the cached prefix early, and a
/// warning to print if the variable was not understood: the
/// `--disagg-prefill-early-send-cached-prefix` flag if given (a value it
/// cannot read is an error: it is this mock's flag), else the
/// [`EARLY_SEND_ENV`] variable's value if set, else SGLang's default, on
/// (`EnvBool(True)` in `Envs`). SGLang's `EnvField.get`
/// (`python/sglang/srt/environ.py`) reads an unset variable as its default
/// and, when `parse` raises on a set one, warns "Invalid value for NAME:
/// ..., using default" and uses the default; so does this. The caller
/// reads the environment: this is the CLI's edge, the engine crates never
/// do.
pub fn early_send_cached_prefix(
    flag: Option<&str>,
    env: Option<&std::ffi::OsStr>,
) -> Result<(bool, Option<String>), String> {
    if let Some(f) = flag {
        return sglang_bool(f).map(|b| (b, None)).ok_or_else(|| {
            format!(
                "--disagg-prefill-early-send-cached-prefix: `{f}`: expected true or false (or 1/0, yes/no, y/n)"
            )
        });
    }
    match env {
        None => Ok((true, None)),
        Some(v) => Ok(match v.to_str().and_then(sglang_bool) {
            Some(b) => (b, None),
            None => (
                true,
                Some(format!(
                    "warning: invalid value for {EARLY_SEND_ENV}: `{}` is not a boolean, using default \"true\"",
                    v.to_string_lossy()
                )),
            ),
        }),
    }
}

/// SGLang's decode-side waiting timeout, seconds (`EnvInt(300)`).
pub const WAITING_TIMEOUT_ENV: &str = "SGLANG_DISAGGREGATION_WAITING_TIMEOUT";
/// SGLang's decode→prefill heartbeat interval, seconds (`EnvFloat(5.0)`).
pub const HEARTBEAT_INTERVAL_ENV: &str = "SGLANG_DISAGGREGATION_HEARTBEAT_INTERVAL";
/// Missed heartbeats before a prefill is taken for dead (`EnvInt(2)`).
pub const HEARTBEAT_MAX_FAILURE_ENV: &str = "SGLANG_DISAGGREGATION_HEARTBEAT_MAX_FAILURE";

/// A number SGLang reads from the environment as `EnvInt`/`EnvFloat` do
/// (`python/sglang/srt/environ.py`, `EnvField.get`): unset, the default;
/// not a number, a warning and the default. `float` selects `EnvFloat`'s
/// parse (any finite decimal) over `EnvInt`'s (an integer).
pub fn sglang_number(
    name: &str,
    env: Option<&std::ffi::OsStr>,
    default: f64,
    float: bool,
) -> (f64, Option<String>) {
    let Some(v) = env else {
        return (default, None);
    };
    let text = v.to_string_lossy();
    let t = text.trim();
    let parsed = if float {
        t.parse::<f64>().ok().filter(|x| x.is_finite())
    } else {
        t.parse::<i64>().ok().map(|x| x as f64)
    };
    match parsed {
        Some(x) => (x, None),
        None => (
            default,
            Some(format!(
                "warning: invalid value for {name}: `{text}` is not a valid {} value, using \
                 default \"{default}\"",
                if float { "float" } else { "integer" }
            )),
        ),
    }
}

/// SGLang's decode→prefill heartbeat: each flag if given, else its
/// variable ([`HEARTBEAT_INTERVAL_ENV`], [`HEARTBEAT_MAX_FAILURE_ENV`]),
/// else SGLang's default (5 s, 2), then clamped as SGLang's
/// `CommonKVManager.__init__` does (`disaggregation/common/conn.py`: at
/// least 2 s and 1 failure). `env` reads a variable.
pub fn heartbeat(
    interval_flag: Option<f64>,
    max_failure_flag: Option<u32>,
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
    warnings: &mut Vec<String>,
) -> Result<handoff_engine::fault::Heartbeat, String> {
    let interval = match interval_flag {
        Some(s) => s,
        None => {
            let (x, w) = sglang_number(
                HEARTBEAT_INTERVAL_ENV,
                env(HEARTBEAT_INTERVAL_ENV).as_deref(),
                5.0,
                true,
            );
            warnings.extend(w);
            x
        }
    };
    if !(interval.is_finite() && interval <= 86_400.0) {
        return Err(format!(
            "the heartbeat interval {interval} s: at most 86400 s"
        ));
    }
    let failures = match max_failure_flag {
        Some(n) => i64::from(n),
        None => {
            let (x, w) = sglang_number(
                HEARTBEAT_MAX_FAILURE_ENV,
                env(HEARTBEAT_MAX_FAILURE_ENV).as_deref(),
                2.0,
                false,
            );
            warnings.extend(w);
            x as i64
        }
    };
    Ok(handoff_engine::fault::Heartbeat::clamped(
        std::time::Duration::from_secs_f64(interval.max(0.0)),
        failures.clamp(1, 1_000_000) as u32,
    ))
}

#[cfg(test)]
mod early_send_tests {
    use super::*;
    use std::ffi::OsStr;

    #[test]
    fn the_flag_wins_over_the_variable_both_parsed_as_sglang_parses_booleans() {
        assert_eq!(early_send_cached_prefix(None, None), Ok((true, None)));
        for (v, want) in [
            ("0", false),
            ("No", false),
            ("n", false),
            ("TRUE", true),
            ("y", true),
        ] {
            assert_eq!(
                early_send_cached_prefix(None, Some(OsStr::new(v))),
                Ok((want, None))
            );
        }
        assert_eq!(
            early_send_cached_prefix(Some("true"), Some(OsStr::new("0"))),
            Ok((true, None))
        );
        assert_eq!(
            early_send_cached_prefix(Some("false"), None),
            Ok((false, None))
        );
        let e = early_send_cached_prefix(Some("maybe"), None).unwrap_err();
        assert!(
            e.contains("--disagg-prefill-early-send-cached-prefix"),
            "{e}"
        );
        // SGLang warns and uses its default for a value it cannot parse.
        let (on, warning) = early_send_cached_prefix(None, Some(OsStr::new("maybe"))).unwrap();
        assert!(on);
        let w = warning.expect("a warning");
        assert!(w.contains(EARLY_SEND_ENV) && w.contains("maybe"), "{w}");
    }
}

#[cfg(test)]
mod heartbeat_tests {
    use super::*;
    use std::time::Duration;

    fn env_of(
        pairs: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Option<std::ffi::OsString> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| std::ffi::OsString::from(v))
        }
    }

    #[test]
    fn flags_then_sglang_variables_then_defaults_clamped_as_upstream() {
        let mut w = Vec::new();
        // environ.py defaults: 5 s, 2 failures; conn.py: 10 s to detect.
        let hb = heartbeat(None, None, env_of(&[]), &mut w).expect("ok");
        assert_eq!(hb.detection(), Duration::from_secs(10));
        let env = env_of(&[
            (HEARTBEAT_INTERVAL_ENV, "3.5"),
            (HEARTBEAT_MAX_FAILURE_ENV, "4"),
        ]);
        let hb = heartbeat(None, None, &env, &mut w).expect("ok");
        assert_eq!(hb.detection(), Duration::from_secs(14));
        let hb = heartbeat(Some(6.0), Some(1), &env, &mut w).expect("ok");
        assert_eq!(hb.detection(), Duration::from_secs(6));
        // CommonKVManager.__init__: max(interval, 2.0), max(failures, 1).
        let hb = heartbeat(Some(0.5), Some(0), &env, &mut w).expect("ok");
        assert_eq!(hb.detection(), Duration::from_secs(2));
        assert!(w.is_empty());
        // EnvField.get: an unreadable value warns and takes the default.
        let bad = env_of(&[
            (HEARTBEAT_INTERVAL_ENV, "soon"),
            (HEARTBEAT_MAX_FAILURE_ENV, "2.5"),
        ]);
        let hb = heartbeat(None, None, bad, &mut w).expect("ok");
        assert_eq!(hb.detection(), Duration::from_secs(10));
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(heartbeat(Some(f64::NAN), None, env_of(&[]), &mut w).is_err());
    }
}
