//! `cargo xtask bench --dynamo TRACE`'s overlay rows: TRACE at 4P+4D and
//! overlaid 4 and 8 times (`crate::overlay`) at 16P+16D and 32P+32D, the
//! same load per engine on a cluster K times the size, on this mocker and
//! on Dynamo's mocker 1.6.1 with the settings `checks/dynamo-mocker/run.sh`
//! matches (disaggregated, kv router, instant transfer). Each row is the
//! median of `--runs` alternating runs per mocker, with the wall ratio
//! this/Dynamo and each mocker's growth over its own 4P+4D run.
//!
//! The binaries are `run.sh`'s: `HANDOFF_MOCKER` or this workspace's
//! release build, `DYNAMO_MOCKER_BENCH` or the one `run.sh` builds under
//! `TARGET/dynamo-mocker-bench`. Without Dynamo's, this mocker's side is
//! printed alone and says so.

use super::{median, start, start_program, target_dir, Sample};
use crate::{cargo, run};
use std::path::{Path, PathBuf};

/// `run.sh`'s matched settings for this mocker, disaggregated.
const MATCHED: [&str; 22] = [
    "--trace-block-size",
    "512",
    "--router",
    "kv",
    "--block-size",
    "64",
    "--prefill-kv-tokens",
    "1048576",
    "--decode-kv-tokens",
    "1048576",
    "--max-running",
    "256",
    "--max-batched-tokens",
    "8192",
    "--perf",
    "dynamo-polynomial",
    "--transfer",
    "fixed",
    "--transfer-ms",
    "0",
    "--message-latency-us",
    "0",
];

/// (copies of the trace, prefill = decode workers): the rows.
pub(super) const ROWS: [(u64, u32); 3] = [(1, 4), (4, 16), (8, 32)];

/// A binary named by `var`, else `default` if it is there.
fn binary(var: &str, default: PathBuf) -> Option<PathBuf> {
    std::env::var_os(var)
        .map(PathBuf::from)
        .or(Some(default))
        .filter(|p| p.is_file())
}

/// This mocker's arguments for `trace` at `n`P+`n`D (`start` adds
/// `replay` and `--json`).
pub(super) fn ours_args(trace: &Path, n: u32) -> Vec<String> {
    let mut a = vec!["--trace".to_string(), trace.to_string_lossy().to_string()];
    a.extend(MATCHED.iter().map(|s| s.to_string()));
    let n = n.to_string();
    a.extend(["--prefill".into(), n.clone(), "--decode".into(), n]);
    a
}

/// Dynamo's mocker's arguments for `trace` at `n`P+`n`D
/// (`checks/dynamo-mocker/src/main.rs`).
pub(super) fn theirs_args(trace: &Path, n: u32) -> Vec<String> {
    let n = n.to_string();
    vec![
        trace.to_string_lossy().to_string(),
        "disagg".into(),
        n.clone(),
        n,
        "kv".into(),
    ]
}

/// Medians of wall, CPU and peak RSS, formatted.
fn summary(s: &[Sample]) -> (f64, String) {
    let wall = median(s.iter().map(|x| x.wall_s).collect());
    let cpu = median(s.iter().map(|x| x.cpu_s).collect());
    let rss = median(s.iter().filter_map(|x| x.rss_mib).collect());
    let rss = if rss.is_nan() {
        "n/a".to_string()
    } else {
        format!("{rss:.0} MiB")
    };
    (
        wall,
        format!("wall {wall:>7.2} s cpu {cpu:>7.2} s rss {rss:>8}"),
    )
}

/// Times every row on both mockers (or on this one alone) and prints the
/// table; false when a run fails or this mocker cannot be built.
pub(super) fn overlay_rows(trace: &Path, runs: usize) -> bool {
    let ours = match std::env::var_os("HANDOFF_MOCKER") {
        Some(p) => PathBuf::from(p),
        None => {
            if !run(cargo().args(["build", "--release", "-q", "-p", "handoff-mocker"])) {
                return false;
            }
            target_dir().join("release/handoff-mocker")
        }
    };
    let theirs = binary(
        "DYNAMO_MOCKER_BENCH",
        target_dir().join("dynamo-mocker-bench/release/dynamo-mocker-bench"),
    );
    if theirs.is_none() {
        println!(
            "== overlay rows: Dynamo's mocker is not built here (DYNAMO_MOCKER_BENCH or \
             checks/dynamo-mocker/run.sh builds it); this mocker's side only"
        );
    }
    println!("== overlay rows ({runs} runs each, alternating): medians");
    let mut base: Option<(f64, Option<f64>)> = None;
    for (copies, n) in ROWS {
        let written;
        let t = if copies == 1 {
            trace
        } else {
            match crate::overlay::overlaid_trace(trace, copies) {
                Ok(p) => {
                    written = p;
                    written.as_path()
                }
                Err(e) => {
                    eprintln!("{e}");
                    return false;
                }
            }
        };
        let timed = time_row(&ours, theirs.as_deref(), t, n, runs);
        if copies > 1 {
            let _ = std::fs::remove_file(t);
        }
        let (h, d) = match timed {
            Ok(x) => x,
            Err(e) => {
                eprintln!("{e}");
                return false;
            }
        };
        let (hw, hs) = summary(&h);
        let mut line = format!("x{copies} at {n}P+{n}D: this {hs}");
        let dw = (!d.is_empty()).then(|| summary(&d));
        if let Some((dw, ds)) = &dw {
            line.push_str(&format!(" | dynamo {ds} | this/dynamo wall {:.3}", hw / dw));
        }
        let (bh, bd) = *base.get_or_insert((hw, dw.as_ref().map(|d| d.0)));
        line.push_str(&format!(" | over x1: this {:.2}x", hw / bh));
        if let (Some(bd), Some((dw, _))) = (bd, &dw) {
            line.push_str(&format!(", dynamo {:.2}x", dw / bd));
        }
        println!("{line}");
    }
    true
}

/// `runs` alternating runs of one row: this mocker's samples and Dynamo's
/// (empty without its binary).
fn time_row(
    ours: &Path,
    theirs: Option<&Path>,
    trace: &Path,
    n: u32,
    runs: usize,
) -> Result<(Vec<Sample>, Vec<Sample>), String> {
    let (mut h, mut d) = (Vec::new(), Vec::new());
    for r in 0..runs {
        let s = start(ours, &ours_args(trace, n), 0)?.finish()?;
        eprintln!(
            "run {}/{runs}: this {n}P+{n}D wall {:.3} s",
            r + 1,
            s.wall_s
        );
        h.push(s);
        if let Some(b) = theirs {
            let s = start_program(b, &theirs_args(trace, n), 1)?.finish()?;
            eprintln!(
                "run {}/{runs}: dynamo {n}P+{n}D wall {:.3} s",
                r + 1,
                s.wall_s
            );
            d.push(s);
        }
    }
    Ok((h, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_mockers_get_the_matched_deployment() {
        let t = Path::new("t.jsonl");
        let a = ours_args(t, 32);
        assert_eq!(a[..2], ["--trace", "t.jsonl"]);
        assert_eq!(a[a.len() - 4..], ["--prefill", "32", "--decode", "32"]);
        for pair in [
            ["--router", "kv"],
            ["--transfer-ms", "0"],
            ["--block-size", "64"],
        ] {
            assert!(a.windows(2).any(|w| w == pair), "{pair:?}");
        }
        assert_eq!(theirs_args(t, 16), ["t.jsonl", "disagg", "16", "16", "kv"]);
        assert_eq!(ROWS.map(|(k, n)| n as u64 / k), [4, 4, 4], "4P+4D per copy");
    }

    #[test]
    fn a_missing_binary_is_none() {
        assert_eq!(
            binary("XTASK_TEST_UNSET_VAR", PathBuf::from("/nonexistent/bin")),
            None
        );
    }
}
