//! `cargo xtask docs [--pictures] [PAGE ...]`: runs every marked example of
//! the pages under `docs/` with the release binary and checks that each
//! number the pages quote from it still comes out.
//!
//! The markers are HTML comments, invisible on a rendered page (the full
//! description, for writers, is in `docs/README.md`):
//!
//! - `<!-- docs-run -->` on the line before a ```` ```sh ```` block: the
//!   block runs in `bash` from the repository root, with `set -eo
//!   pipefail`. `cargo run --release -p handoff-mocker -- ARGS` runs the
//!   release binary with ARGS and `cargo build --release -p
//!   handoff-mocker` does nothing (the binary is built once, first), so the
//!   block is what a reader pastes.
//! - `<!-- expect: SELECTOR [* K | / K] = VALUE -->`, anywhere after such a
//!   block: a number in that block's standard output, scaled, must print
//!   as VALUE at VALUE's decimals (`= 14.5` holds for 14.46 but not 14.4;
//!   `= 2,258` for 2258.3). SELECTOR is a JSON pointer (`/ttft_ms/p50`,
//!   into output that is one JSON document) or one or more quoted strings
//!   (`"Stranded" "max"`), found in that order, the number being the first
//!   after the last of them.
//! - `<!-- expect in PATH: ... -->`: the same, in the file PATH (from the
//!   root) that the block wrote.
//! - `<!-- picture: HTML PNG WIDTHxHEIGHT -->` after a block: with
//!   `--pictures`, headless Chromium draws HTML (written by the block) into
//!   PNG at that window size, so a page's pictures come from the same run
//!   as its numbers.
//!
//! Each block's output is kept in `target/docs-check/`. Any failed block,
//! missing number or differing number fails the task, and so does finding
//! no block at all.

use crate::{release_bin, root};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What every block runs after: `cargo` commands of the docs map to the
/// binary already built.
const PRELUDE: &str = r#"set -eo pipefail
cargo() {
    if [ "$1 $2 $3 $4" = "run --release -p handoff-mocker" ]; then
        shift 4; if [ "${1-}" = "--" ]; then shift; fi; "$HM_BIN" "$@"
    elif [ "$*" = "build --release -p handoff-mocker" ]; then :
    else command cargo "$@"; fi
}
"#;

/// A block may take this long before it is stopped and failed.
const BLOCK_TIMEOUT: Duration = Duration::from_secs(180);

/// Where a quoted number is looked up.
#[derive(Debug, PartialEq)]
enum Selector {
    /// A JSON pointer into a JSON document.
    Pointer(String),
    /// Strings found in order; the number follows the last.
    Literals(Vec<String>),
}

/// One `expect` marker.
#[derive(Debug, PartialEq)]
struct Expect {
    line: usize,
    /// `None`: the block's standard output.
    file: Option<String>,
    selector: Selector,
    scale: f64,
    /// As written, thousands separators removed.
    value: String,
}

/// One `picture` marker.
#[derive(Debug, PartialEq)]
struct Picture {
    html: String,
    png: String,
    size: (u32, u32),
}

/// One runnable block of a page and what is checked from it.
#[derive(Debug, PartialEq)]
struct Block {
    line: usize,
    script: String,
    expects: Vec<Expect>,
    pictures: Vec<Picture>,
}

/// The text inside each `<!-- NAME...-->` comment of `line` whose body
/// starts with `name`, without the name. A comment between two backticks
/// is quoted code (a page describing the markers), not a marker.
fn comments<'a>(line: &'a str, name: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find("<!--") {
        let body = &rest[i + 4..];
        let Some(end) = body.find("-->") else { break };
        let quoted = rest[..i].ends_with('`') && body[end + 3..].starts_with('`');
        if let Some(b) = body[..end].trim().strip_prefix(name).filter(|_| !quoted) {
            out.push(b.trim());
        }
        rest = &body[end + 3..];
    }
    out
}

/// Splits `"a" 'b' / 10` into its quoted strings (quotes removed) and
/// what follows them.
fn literals(s: &str) -> Result<(Vec<String>, &str), String> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while let Some(q) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') {
        let end = rest[1..]
            .find(q)
            .ok_or_else(|| format!("unclosed {q} in {s:?}"))?;
        out.push(rest[1..1 + end].to_string());
        rest = rest[end + 2..].trim_start();
    }
    if out.is_empty() {
        return Err(format!("a JSON pointer or quoted strings, not {s:?}"));
    }
    Ok((out, rest))
}

/// The scale written after a selector (`* K` or `/ K`; 1 when empty).
fn scale(s: &str) -> Result<f64, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(1.0);
    }
    let (op, k) = s.split_at(1);
    let k: f64 = k.trim().parse().map_err(|_| format!("bad scale {s:?}"))?;
    match op {
        "*" => Ok(k),
        "/" => Ok(1.0 / k),
        _ => Err(format!("bad scale {s:?}")),
    }
}

/// Parses an `expect` marker's body (after `expect`).
fn parse_expect(body: &str, line: usize) -> Result<Expect, String> {
    let (file, rest) = match body.strip_prefix("in ") {
        Some(r) => {
            let (path, rest) = r.split_once(':').ok_or("expect in PATH: needs a ':'")?;
            (Some(path.trim().to_string()), rest)
        }
        None => (
            None,
            body.strip_prefix(':')
                .ok_or("expect needs ':' or 'in PATH:'")?,
        ),
    };
    let (lhs, value) = rest.rsplit_once('=').ok_or("expect needs '= VALUE'")?;
    let value = value.trim().replace(',', "");
    value
        .parse::<f64>()
        .map_err(|_| format!("expect: {value:?} is not a number"))?;
    let lhs = lhs.trim();
    let (selector, k) = if lhs.starts_with('/') {
        let (p, k) = lhs.split_once(char::is_whitespace).unwrap_or((lhs, ""));
        (Selector::Pointer(p.to_string()), scale(k)?)
    } else {
        let (lits, k) = literals(lhs)?;
        (Selector::Literals(lits), scale(k)?)
    };
    Ok(Expect {
        line,
        file,
        selector,
        scale: k,
        value,
    })
}

/// Parses a `picture` marker's body: `HTML PNG WIDTHxHEIGHT`.
fn parse_picture(body: &str) -> Result<Picture, String> {
    let parts: Vec<&str> = body.trim_start_matches(':').split_whitespace().collect();
    let [html, png, size] = parts[..] else {
        return Err(format!("picture: HTML PNG WIDTHxHEIGHT, not {body:?}"));
    };
    let (w, h) = size
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse().ok()?, h.parse().ok()?)))
        .ok_or_else(|| format!("picture: bad size {size:?}"))?;
    Ok(Picture {
        html: html.into(),
        png: png.into(),
        size: (w, h),
    })
}

/// The marked blocks of one page, in order, each with the markers that
/// follow it up to the next block.
fn parse_page(text: &str) -> Result<Vec<Block>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut blocks: Vec<Block> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let n = i + 1;
        let at = |e: String| format!("line {n}: {e}");
        if !comments(lines[i], "docs-run").is_empty() {
            if lines.get(i + 1).map(|l| l.trim()) != Some("```sh") {
                return Err(at("docs-run must come right before a ```sh block".into()));
            }
            let body: Vec<&str> = lines[i + 2..]
                .iter()
                .take_while(|l| l.trim() != "```")
                .copied()
                .collect();
            if i + 2 + body.len() >= lines.len() {
                return Err(at("unclosed ```sh block".into()));
            }
            blocks.push(Block {
                line: n,
                script: body.join("\n"),
                expects: Vec::new(),
                pictures: Vec::new(),
            });
            i += body.len() + 3;
            continue;
        }
        for body in comments(lines[i], "expect") {
            let e = parse_expect(body, n).map_err(at)?;
            let b = blocks
                .last_mut()
                .ok_or_else(|| at("expect before any docs-run".into()))?;
            b.expects.push(e);
        }
        for body in comments(lines[i], "picture") {
            let p = parse_picture(body).map_err(at)?;
            let b = blocks
                .last_mut()
                .ok_or_else(|| at("picture before any docs-run".into()))?;
            b.pictures.push(p);
        }
        i += 1;
    }
    Ok(blocks)
}

/// The first number in `s` (sign, digits, decimals, exponent).
fn first_number(s: &str) -> Option<f64> {
    let b = s.as_bytes();
    let start = (0..b.len()).find(|&i| {
        b[i].is_ascii_digit() || (b[i] == b'-' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
    })?;
    let mut end = start + 1;
    let mut seen_dot = false;
    while end < b.len() {
        match b[end] {
            c if c.is_ascii_digit() => end += 1,
            b'.' if !seen_dot && b.get(end + 1).is_some_and(u8::is_ascii_digit) => {
                seen_dot = true;
                end += 1;
            }
            b'e' | b'E'
                if b.get(end + 1)
                    .is_some_and(|c| c.is_ascii_digit() || *c == b'-') =>
            {
                end += 2;
            }
            _ => break,
        }
    }
    s[start..end].parse().ok()
}

/// The number `sel` picks out of `text`.
fn select(text: &str, sel: &Selector) -> Result<f64, String> {
    match sel {
        Selector::Pointer(p) => {
            let v: serde_json::Value =
                serde_json::from_str(text).map_err(|e| format!("output is not JSON: {e}"))?;
            v.pointer(p)
                .and_then(serde_json::Value::as_f64)
                .ok_or_else(|| format!("no number at {p}"))
        }
        Selector::Literals(lits) => {
            let mut rest = text;
            for l in lits {
                let i = rest
                    .find(l.as_str())
                    .ok_or_else(|| format!("{l:?} not found"))?;
                rest = &rest[i + l.len()..];
            }
            first_number(rest).ok_or_else(|| format!("no number after {lits:?}"))
        }
    }
}

/// `None` when `found`, printed at `quoted`'s decimals, is `quoted`;
/// else how it prints.
fn agrees(found: f64, quoted: &str) -> Option<String> {
    let decimals = quoted.split_once('.').map_or(0, |(_, d)| d.len());
    let printed = format!("{found:.decimals$}");
    // -0.0 rounds to "-0.0"; a quote of "0.0" means it.
    let unsigned_zero = printed.trim_start_matches('-');
    let is_zero = unsigned_zero.chars().all(|c| c == '0' || c == '.');
    let printed = if is_zero {
        unsigned_zero.to_string()
    } else {
        printed
    };
    (printed != quoted).then_some(printed)
}

/// Checks one expectation against the block's output (or a file it
/// wrote); `Err` says what differs.
fn check(e: &Expect, stdout: &str, root: &Path) -> Result<(), String> {
    let text = match &e.file {
        None => stdout.to_string(),
        Some(f) => std::fs::read_to_string(root.join(f)).map_err(|err| format!("{f}: {err}"))?,
    };
    let found = select(&text, &e.selector)? * e.scale;
    match agrees(found, &e.value) {
        None => Ok(()),
        Some(printed) => Err(format!("quoted {}, the run gives {printed}", e.value)),
    }
}

/// Runs one block; its stdout on success.
fn run_block(bin: &Path, page: &str, b: &Block, out_dir: &Path) -> Result<String, String> {
    use std::os::unix::process::CommandExt;
    let stem = format!("{}-{}", page.replace(['/', '.'], "_"), b.line);
    let (out, err) = (
        out_dir.join(format!("{stem}.stdout")),
        out_dir.join(format!("{stem}.stderr")),
    );
    let file = |p: &Path| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(format!("{PRELUDE}\n{}\n", b.script))
        .current_dir(root())
        .env("HM_BIN", bin)
        .stdin(Stdio::null())
        .stdout(file(&out)?)
        .stderr(file(&err)?)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("bash: {e}"))?;
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if started.elapsed() > BLOCK_TIMEOUT => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => return Err(e.to_string()),
        }
    };
    stop_group(child.id());
    let _ = child.wait();
    let stderr = std::fs::read_to_string(&err).unwrap_or_default();
    match status {
        None => Err(format!("timed out after {} s", BLOCK_TIMEOUT.as_secs())),
        Some(s) if !s.success() => Err(format!("{s}; stderr:\n{stderr}")),
        Some(_) => std::fs::read_to_string(&out).map_err(|e| e.to_string()),
    }
}

/// Ends whatever a block left running (a server it did not stop): SIGTERM
/// to its process group, through bash's own `kill` with `--`. Not
/// `/usr/bin/kill -TERM -PGID`: procps-ng's `kill` reads a negative
/// argument before `--` as an unknown option and signals pid `-(first
/// digit)`, so a group id starting with 1 becomes `kill(-1)`, every
/// process the user may signal.
fn stop_group(pgid: u32) {
    if pgid <= 1 {
        return;
    }
    let _ = Command::new("bash")
        .args(["-c", "kill -TERM -- \"-$1\" 2>/dev/null", "stop-group"])
        .arg(pgid.to_string())
        .stdin(Stdio::null())
        .status();
}

/// Draws `p.html` into `p.png` with headless Chromium.
fn screenshot(p: &Picture, root: &Path) -> Result<(), String> {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .ok_or("--pictures needs chromium (apt-get install chromium)")?;
    let ok = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--window-size={},{}", p.size.0, p.size.1))
        .arg(format!("--screenshot={}", root.join(&p.png).display()))
        .arg(format!("file://{}", root.join(&p.html).display()))
        .output()
        .map_err(|e| format!("{browser}: {e}"))?;
    if ok.status.success() && root.join(&p.png).is_file() {
        Ok(())
    } else {
        Err(format!(
            "{browser} failed: {}",
            String::from_utf8_lossy(&ok.stderr)
        ))
    }
}

/// The pages under `docs/` (sorted), or those named.
fn pages(named: &[String]) -> Vec<PathBuf> {
    if !named.is_empty() {
        return named.iter().map(PathBuf::from).collect();
    }
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "md"))
                .map(|p| p.strip_prefix(root()).map(Path::to_path_buf).unwrap_or(p))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Runs one page's blocks and checks; the number of failures and of
/// blocks run.
fn run_page(bin: &Path, page: &Path, pictures: bool, out_dir: &Path) -> (usize, usize) {
    let name = page.display().to_string();
    let blocks = match std::fs::read_to_string(root().join(page))
        .map_err(|e| e.to_string())
        .and_then(|t| parse_page(&t))
    {
        Ok(b) => b,
        Err(e) => {
            println!("{name}: {e}");
            return (1, 0);
        }
    };
    let mut failed = 0;
    for b in &blocks {
        let started = Instant::now();
        let stdout = match run_block(bin, &name, b, out_dir) {
            Ok(s) => s,
            Err(e) => {
                println!("{name}:{}: FAILED: {e}", b.line);
                failed += 1;
                continue;
            }
        };
        let mut bad = 0;
        for e in &b.expects {
            if let Err(why) = check(e, &stdout, &root()) {
                println!("{name}:{}: DIFFERS: {why}", e.line);
                bad += 1;
            }
        }
        for p in b.pictures.iter().filter(|_| pictures) {
            match screenshot(p, &root()) {
                Ok(()) => println!("{name}:{}: drew {}", b.line, p.png),
                Err(e) => {
                    println!("{name}:{}: picture {}: {e}", b.line, p.png);
                    bad += 1;
                }
            }
        }
        println!(
            "{name}:{}: ran in {:.1} s, {} of {} numbers as quoted",
            b.line,
            started.elapsed().as_secs_f64(),
            b.expects.len() - bad.min(b.expects.len()),
            b.expects.len()
        );
        failed += bad;
    }
    (failed, blocks.len())
}

pub fn docs(args: &[String]) -> bool {
    let pictures = args.iter().any(|a| a == "--pictures");
    let named: Vec<String> = args
        .iter()
        .filter(|a| *a != "--pictures")
        .cloned()
        .collect();
    if let Some(bad) = named.iter().find(|a| a.starts_with('-')) {
        eprintln!("docs: unknown option {bad}");
        return false;
    }
    let Some(bin) = release_bin() else {
        return false;
    };
    let out_dir = root().join("target/docs-check");
    if let Err(e) = std::fs::create_dir_all(&out_dir) {
        eprintln!("{}: {e}", out_dir.display());
        return false;
    }
    let started = Instant::now();
    let (mut failed, mut blocks) = (0, 0);
    for page in pages(&named) {
        let (f, b) = run_page(&bin, &page, pictures, &out_dir);
        failed += f;
        blocks += b;
    }
    println!(
        "docs: {blocks} examples in {:.0} s, {failed} problems",
        started.elapsed().as_secs_f64()
    );
    if blocks == 0 {
        eprintln!("docs: no <!-- docs-run --> example found");
    }
    failed == 0 && blocks > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_attach_to_the_block_before_them() {
        let page = "# T\n<!-- docs-run -->\n```sh\necho a 14.46\n```\ntext ~14.5 s <!-- expect: \"a\" = 14.5 -->\n<!-- expect in out.json: /x/y / 1000 = 2,258 -->\n<!-- picture: r.html docs/r.png 1120x2900 -->\n";
        let b = parse_page(page).unwrap();
        assert_eq!(b.len(), 1);
        assert_eq!((b[0].line, b[0].script.as_str()), (2, "echo a 14.46"));
        assert_eq!(
            b[0].expects[0].selector,
            Selector::Literals(vec!["a".into()])
        );
        assert_eq!(b[0].expects[1].file.as_deref(), Some("out.json"));
        assert_eq!(b[0].expects[1].selector, Selector::Pointer("/x/y".into()));
        assert_eq!(
            (b[0].expects[1].scale, b[0].expects[1].value.as_str()),
            (0.001, "2258")
        );
        assert_eq!(b[0].pictures[0].size, (1120, 2900));
        assert!(parse_page("<!-- expect: \"a\" = 1 -->\n").is_err());
        assert!(parse_page("<!-- docs-run -->\ntext\n").is_err());
        assert!(parse_page("<!-- docs-run -->\n```sh\necho\n").is_err());
        assert_eq!(
            parse_page("`<!-- docs-run -->` and `<!-- expect: X -->`\n"),
            Ok(vec![])
        );
        let b = parse_page("<!-- docs-run -->\n```sh\necho 1\n```\n`a`<!-- expect: \"\" = 1 -->\n");
        assert_eq!(b.map(|b| b[0].expects.len()), Ok(1));
    }

    #[test]
    fn literal_selectors_scale_and_round_as_quoted() {
        let e = parse_expect(": \"p\" \"max\" / 1000 = 14.5", 1).unwrap();
        assert_eq!(e.scale, 0.001);
        let out = "p: min 3, max 14462.0 ms";
        assert!(check(&e, out, Path::new(".")).is_ok());
        let e = parse_expect(": 'max' = 14400", 1).unwrap();
        assert!(check(&e, out, Path::new("."))
            .is_err_and(|m| m.contains("quoted 14400, the run gives 14462")));
        assert!(parse_expect(": max = 1", 1).is_err());
        assert!(parse_expect(": \"max\" = many", 1).is_err());
    }

    #[test]
    fn numbers_and_pointers_are_read() {
        assert_eq!(first_number(": -1.5e3, 2"), Some(-1500.0));
        assert_eq!(first_number("x 3. y"), Some(3.0));
        assert_eq!(first_number("none"), None);
        let e = parse_expect(": /a/1/b * 100 = 90", 1).unwrap();
        assert!(check(&e, r#"{"a": [0, {"b": 0.898}]}"#, Path::new(".")).is_ok());
        assert!(check(&e, "not json", Path::new(".")).is_err());
        assert_eq!(agrees(-0.04, "0.0"), None);
        assert_eq!(agrees(2.26, "2.2"), Some("2.3".into()));
    }
}
