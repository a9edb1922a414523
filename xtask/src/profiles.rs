//! `cargo xtask profiles build --model M --system S --backend B --tp N
//! [--attention-dp D] [--moe-tp M] [--moe-ep E] [--expert-parallel] [--out DIR]`
//! and `cargo xtask profiles list`: AIConfigurator profiles on demand (the
//! layout options export a mixture of experts at attention DP and expert
//! parallelism, `MODEL-GPU-tpN-dpD-epE-BACKEND.json`; the script checks
//! them against AIC's width rule).
//!
//! Both run `profiles/derive_from_aic.py` with a Python that has the pinned
//! `aiconfigurator==0.12.0`: `$HANDOFF_AIC_PYTHON` when set, else the venv
//! `target/venv-aic`, created (once) with `python3 -m venv` and `pip
//! install`. AIConfigurator stays out of every Cargo dependency: it is a
//! Python package this task installs beside the build, never linked.
//!
//! `build` writes `MODEL-GPU-tpN-BACKEND.json` into `--out` (default
//! `target/profiles`, so a built profile leaves the built-in set of
//! `profiles/aic/` alone) and prints the flags that select it
//! (`--profiles-dir DIR --model M --gpu G --tp N --backend B`, or the
//! folder in `HANDOFF_PROFILES_DIR`). What AIC lacks or refuses is the
//! script's one line and a failure.

use crate::root;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The AIConfigurator release `derive_from_aic.py` is pinned to.
pub const AIC_VERSION: &str = "0.12.0";
/// A Python with that release installed, instead of `target/venv-aic`.
pub const PYTHON_ENV: &str = "HANDOFF_AIC_PYTHON";

const USAGE: &str = "usage: cargo xtask profiles build --model M --system S --backend vllm|sglang|trtllm --tp N [--attention-dp D] [--moe-tp M] [--moe-ep E] [--expert-parallel] [--out DIR]\n       cargo xtask profiles list";

/// The layout options passed on to the script, each a size 1..=64.
const LAYOUT_OPTIONS: [&str; 3] = ["--attention-dp", "--moe-tp", "--moe-ep"];

/// `build`'s options, checked.
#[derive(Debug, PartialEq)]
pub struct Build {
    model: String,
    system: String,
    backend: String,
    tp: u32,
    out: Option<PathBuf>,
    /// `--attention-dp`, `--moe-tp`, `--moe-ep` as given, in that order.
    layout: [Option<u32>; 3],
    expert_parallel: bool,
}

impl Build {
    /// Parses `--model M --system S --backend B --tp N [--out DIR]` (any
    /// order); an error names the option.
    pub fn parse(args: &[String]) -> Result<Build, String> {
        let (mut model, mut system, mut backend, mut tp, mut out) = (None, None, None, None, None);
        let mut layout: [Option<String>; 3] = Default::default();
        let mut expert_parallel = false;
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            if flag == "--expert-parallel" {
                if std::mem::replace(&mut expert_parallel, true) {
                    return Err(format!("profiles build: {flag} given twice"));
                }
                continue;
            }
            let value = it
                .next()
                .ok_or_else(|| format!("profiles build: {flag} needs a value"))?
                .clone();
            let slot = match flag.as_str() {
                "--model" => &mut model,
                "--system" => &mut system,
                "--backend" => &mut backend,
                "--tp" => &mut tp,
                "--out" => &mut out,
                "--attention-dp" => &mut layout[0],
                "--moe-tp" => &mut layout[1],
                "--moe-ep" => &mut layout[2],
                other => return Err(format!("profiles build: unknown option {other}")),
            };
            if slot.replace(value).is_some() {
                return Err(format!("profiles build: {flag} given twice"));
            }
        }
        let need = |v: Option<String>, flag: &str| {
            v.filter(|s| !s.is_empty())
                .ok_or_else(|| format!("profiles build: {flag} is required"))
        };
        let backend = need(backend, "--backend")?;
        if !["vllm", "sglang", "trtllm"].contains(&backend.as_str()) {
            return Err(format!(
                "profiles build: --backend {backend}: expected vllm, sglang or trtllm"
            ));
        }
        let tp_text = need(tp, "--tp")?;
        let tp = tp_text
            .parse::<u32>()
            .ok()
            .filter(|t| (1..=64).contains(t))
            .ok_or_else(|| format!("profiles build: --tp {tp_text}: expected 1..=64"))?;
        let mut sizes = [None; 3];
        for ((slot, text), flag) in sizes.iter_mut().zip(layout).zip(LAYOUT_OPTIONS) {
            if let Some(t) = text {
                *slot = Some(
                    t.parse::<u32>()
                        .ok()
                        .filter(|n| (1..=64).contains(n))
                        .ok_or_else(|| format!("profiles build: {flag} {t}: expected 1..=64"))?,
                );
            }
        }
        Ok(Build {
            model: need(model, "--model")?,
            system: need(system, "--system")?,
            backend,
            tp,
            out: out.map(PathBuf::from),
            layout: sizes,
            expert_parallel,
        })
    }

    /// The script's arguments, writing into `out`.
    fn script_args(&self, out: &Path) -> Vec<String> {
        let mut args: Vec<String> = vec![
            "--model".into(),
            self.model.clone(),
            "--system".into(),
            self.system.clone(),
            "--backend".into(),
            self.backend.clone(),
            "--tp".into(),
            self.tp.to_string(),
        ];
        for (flag, size) in LAYOUT_OPTIONS.iter().zip(self.layout) {
            if let Some(n) = size {
                args.extend([flag.to_string(), n.to_string()]);
            }
        }
        if self.expert_parallel {
            args.push("--expert-parallel".into());
        }
        args.extend(["--out".into(), out.display().to_string()]);
        args
    }
}

/// A trailing `-{tag}N` of `rest`, split off, if N is a number.
fn size_suffix<'a>(rest: &'a str, tag: &str) -> Option<(&'a str, u32)> {
    let (head, n) = rest.rsplit_once(&format!("-{tag}"))?;
    Some((head, n.parse().ok()?))
}

/// The flags that select the profile written at `path`
/// (`DIR/MODEL-GPU-tpN[-dpD][-epE]-BACKEND.json`: `--dp-size D`, and
/// `--enable-expert-parallel` when E = N × D, else `--ep-size E`), or
/// `None` for another name.
pub fn selecting_flags(path: &Path) -> Option<String> {
    let dir = path.parent()?;
    let stem = path.file_name()?.to_str()?.strip_suffix(".json")?;
    let (rest, backend) = stem.rsplit_once('-')?;
    let (rest, ep) = size_suffix(rest, "ep").unwrap_or((rest, 1));
    let (rest, dp) = size_suffix(rest, "dp").unwrap_or((rest, 1));
    let (rest, tp) = size_suffix(rest, "tp")?;
    let (model, gpu) = rest.rsplit_once('-')?;
    let mut layout = String::new();
    if dp > 1 {
        layout.push_str(&format!(" --dp-size {dp}"));
    }
    if ep > 1 && ep == tp * dp {
        layout.push_str(" --enable-expert-parallel");
    } else if ep > 1 {
        layout.push_str(&format!(" --ep-size {ep}"));
    }
    Some(format!(
        "--profiles-dir {} --model {model} --gpu {gpu} --tp {tp}{layout} --backend {backend}",
        dir.display()
    ))
}

/// What `build` prints after writing `path`: the flags that select it,
/// with the folder as `--profiles-dir` and as `HANDOFF_PROFILES_DIR`.
pub fn how_to_use(path: &Path) -> Vec<String> {
    let (Some(flags), Some(dir)) = (selecting_flags(path), path.parent()) else {
        return Vec::new();
    };
    let model_on = flags.find("--model").map_or("", |i| &flags[i..]);
    vec![
        format!("use it: handoff-mocker replay {flags}"),
        format!(
            "   or: HANDOFF_PROFILES_DIR={} handoff-mocker replay {model_on}",
            dir.display()
        ),
    ]
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// `$HANDOFF_AIC_PYTHON`, else `target/venv-aic`'s python, creating the
/// venv with the pinned AIConfigurator first if it has none.
fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(PYTHON_ENV).filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let venv = target_dir().join("venv-aic");
    let py = venv.join("bin/python");
    let pinned = venv.join(format!(".aiconfigurator-{AIC_VERSION}"));
    if py.is_file() && pinned.is_file() {
        return Some(py);
    }
    eprintln!(
        "profiles: creating {} with aiconfigurator=={AIC_VERSION} (once; set {PYTHON_ENV} to use another Python)",
        venv.display()
    );
    let made = crate::run(Command::new("python3").arg("-m").arg("venv").arg(&venv))
        && crate::run(
            Command::new(&py)
                .args(["-m", "pip", "install", "--quiet"])
                .arg(format!("aiconfigurator=={AIC_VERSION}")),
        );
    if !made {
        eprintln!("profiles: could not create {}", venv.display());
        return None;
    }
    std::fs::write(&pinned, AIC_VERSION).ok()?;
    Some(py)
}

fn script() -> PathBuf {
    root().join("profiles/derive_from_aic.py")
}

/// `cargo xtask profiles build|list ...`.
pub fn profiles(args: &[String]) -> bool {
    match args.first().map(String::as_str) {
        Some("list") if args.len() == 1 => match python() {
            Some(py) => crate::run(Command::new(py).arg(script()).arg("--list")),
            None => false,
        },
        Some("build") => match Build::parse(&args[1..]) {
            Ok(b) => build(&b),
            Err(e) => {
                eprintln!("{e}\n{USAGE}");
                false
            }
        },
        _ => {
            eprintln!("{USAGE}");
            false
        }
    }
}

fn build(b: &Build) -> bool {
    let out = b
        .out
        .clone()
        .unwrap_or_else(|| target_dir().join("profiles"));
    let Some(py) = python() else {
        return false;
    };
    let mut cmd = Command::new(py);
    cmd.arg(script()).args(b.script_args(&out));
    eprintln!("$ {cmd:?}");
    // The script prints the file's path on stdout, its one-line refusals
    // on stderr (passed through).
    let Ok(done) = cmd.stderr(std::process::Stdio::inherit()).output() else {
        eprintln!("profiles: could not run {}", script().display());
        return false;
    };
    if !done.status.success() {
        return false;
    }
    let written = String::from_utf8_lossy(&done.stdout).trim().to_string();
    let path = PathBuf::from(&written);
    println!("wrote {written}");
    for line in how_to_use(&path) {
        println!("{line}");
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn build_options_parse_in_any_order_and_errors_name_the_option() {
        let b = Build::parse(&strings(&[
            "--tp",
            "2",
            "--backend",
            "sglang",
            "--system",
            "rtx_pro_6000_server",
            "--model",
            "qwen3-32b",
        ]))
        .unwrap();
        assert_eq!(
            b,
            Build {
                model: "qwen3-32b".into(),
                system: "rtx_pro_6000_server".into(),
                backend: "sglang".into(),
                tp: 2,
                out: None,
                layout: [None; 3],
                expert_parallel: false,
            }
        );
        assert_eq!(
            b.script_args(Path::new("/o"))[8..],
            strings(&["--out", "/o"])
        );
        let full = [
            "--model",
            "m",
            "--system",
            "s",
            "--backend",
            "vllm",
            "--tp",
            "1",
        ];
        for (bad, want) in [
            (&full[..6], "--tp is required"),
            (&["--tp"][..], "--tp needs a value"),
            (&["--gpu", "h100"][..], "unknown option --gpu"),
            (
                &[&full[..], &["--tp", "2"]].concat()[..],
                "--tp given twice",
            ),
        ] {
            let e = Build::parse(&strings(bad)).unwrap_err();
            assert!(e.contains(want), "{bad:?}: {e}");
        }
        let mut tgi = full;
        tgi[5] = "tgi";
        assert!(Build::parse(&strings(&tgi))
            .unwrap_err()
            .contains("--backend tgi"));
        let mut tp0 = full;
        tp0[7] = "0";
        assert!(Build::parse(&strings(&tp0))
            .unwrap_err()
            .contains("--tp 0: expected 1..=64"));
    }

    #[test]
    fn a_written_profile_names_the_flags_that_select_it() {
        let p = Path::new("/t/profiles/llama-3.1-8b-rtxpro6000-tp1-vllm.json");
        assert_eq!(
            selecting_flags(p).as_deref(),
            Some("--profiles-dir /t/profiles --model llama-3.1-8b --gpu rtxpro6000 --tp 1 --backend vllm")
        );
        assert_eq!(selecting_flags(Path::new("/t/x.json")), None);
        assert_eq!(
            how_to_use(p),
            [
                "use it: handoff-mocker replay --profiles-dir /t/profiles --model llama-3.1-8b --gpu rtxpro6000 --tp 1 --backend vllm",
                "   or: HANDOFF_PROFILES_DIR=/t/profiles handoff-mocker replay --model llama-3.1-8b --gpu rtxpro6000 --tp 1 --backend vllm",
            ]
        );
        assert!(how_to_use(Path::new("/t/x.json")).is_empty());
        let ep = Path::new("/t/p/qwen3-30b-a3b-b200-tp1-dp4-ep4-vllm.json");
        assert_eq!(
            selecting_flags(ep).as_deref(),
            Some("--profiles-dir /t/p --model qwen3-30b-a3b --gpu b200 --tp 1 --dp-size 4 --enable-expert-parallel --backend vllm")
        );
        let dp = Path::new("/t/p/qwen3-30b-a3b-b200-tp1-dp2-vllm.json");
        assert!(selecting_flags(dp)
            .unwrap()
            .ends_with("--tp 1 --dp-size 2 --backend vllm"));
    }

    #[test]
    fn layout_options_pass_through_checked() {
        let b = Build::parse(&strings(&[
            "--model",
            "qwen3-30b-a3b",
            "--system",
            "b200_sxm",
            "--backend",
            "vllm",
            "--tp",
            "1",
            "--attention-dp",
            "4",
            "--expert-parallel",
        ]))
        .unwrap();
        assert_eq!((b.layout, b.expert_parallel), ([Some(4), None, None], true));
        assert_eq!(
            b.script_args(Path::new("/o"))[8..],
            strings(&["--attention-dp", "4", "--expert-parallel", "--out", "/o"])
        );
        let base = [
            "--model",
            "m",
            "--system",
            "s",
            "--backend",
            "vllm",
            "--tp",
            "1",
        ];
        for (more, want) in [
            (&["--moe-ep", "0"][..], "--moe-ep 0: expected 1..=64"),
            (&["--attention-dp", "x"][..], "--attention-dp x: expected"),
            (
                &["--expert-parallel", "--expert-parallel"][..],
                "--expert-parallel given twice",
            ),
            (&["--moe-tp"][..], "--moe-tp needs a value"),
        ] {
            let e = Build::parse(&strings(&[&base[..], more].concat())).unwrap_err();
            assert!(e.contains(want), "{more:?}: {e}");
        }
    }
}
