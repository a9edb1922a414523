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
