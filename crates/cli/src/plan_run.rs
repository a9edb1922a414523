//! How `plan` and `plan --check-aic` run what [`handoff_plan`] hands them:
//! each layout or AIConfigurator row as `replay` flags, checked, then run
//! on a thread pool with the sweep's machinery ([`crate::sweep_cmd`]'s
//! [`in_order`] and [`run_one`]); the model's profiled TPs; the profiles
//! and flags AIConfigurator rows are resolved with; and `--max-rate`'s
//! probe, one replay at a rate.

use crate::replay_cmd::simulate;
use crate::sweep_cmd::{in_order, run_one};
use crate::sweep_grid::{Configuration, Parsed, ReplayOnly};
use clap::Parser as _;
use handoff_plan::aic::check::{AicRun, AIC_AXES, AIC_METRICS};
use handoff_plan::aic::{AicBackend, Choice, Engine, ProfileEntry};
use handoff_plan::rate::RateSearch;
use handoff_plan::{Axes, Experts, Layout, PoolTps, Runner, PLAN_METRICS};
use serde_json::{json, Value};
use std::path::Path;

/// The flags after `--`, parsed as `replay`'s; an error names the first
/// problem clap found.
fn parse_shared(shared: &[String]) -> Result<ReplayOnly, String> {
    ReplayOnly::try_parse_from(shared).map_err(|e| {
        format!(
            "plan: the flags after `--`: {}",
            e.to_string().lines().next().unwrap_or("")
        )
    })
}

/// The TP flags of a plan: `--tp`, `--prefill-tp`, `--decode-tp`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TpFlags<'a> {
    /// `--tp`.
    pub tp: &'a [u32],
    /// `--prefill-tp`.
    pub prefill: &'a [u32],
    /// `--decode-tp`.
    pub decode: &'a [u32],
}

/// The model, GPU and backend the base flags name, and the TP choices:
/// `--tp`, else every TP a profile exists for; with `--prefill-tp` or
/// `--decode-tp`, each pool's list (a pool not named takes that one) and
/// every pair of them. Each TP must have a profile.
pub(crate) fn model_and_tps(
    flags: TpFlags<'_>,
    shared: &[String],
) -> Result<(Vec<String>, PoolTps), String> {
    let parsed = parse_shared(shared)?;
    let deploy = parsed.args.deploy_args();
    let hw = &deploy.hardware;
    let (model, gpu) = match (&hw.model, &hw.gpu) {
        (Some(m), Some(g)) => (m.clone(), g.clone()),
        (None, None) if deploy.perf.is_none() => (
            crate::hardware_args::DEFAULT_MODEL.to_string(),
            crate::hardware_args::DEFAULT_GPU.to_string(),
        ),
        _ => return Err("plan: give both --model and --gpu after `--` (or neither)".into()),
    };
    let mut add = Vec::new();
    if hw.model.is_none() {
        add.extend(["--model".into(), model.clone(), "--gpu".into(), gpu.clone()]);
    }
    let backend = deploy.backend().name();
    // The profiles selection sees: the built-in ones and a folder's
    // (`--profiles-dir`, else `HANDOFF_PROFILES_DIR`).
    let keys = hw.profile_keys()?;
    let have: Vec<u32> = keys
        .iter()
        .filter(|k| k.model == model && k.gpu == gpu && k.backend == backend)
        .map(|k| k.tp)
        .collect();
    let or_base = |given: &[u32], base: &[u32]| {
        if given.is_empty() {
            base.to_vec()
        } else {
            given.to_vec()
        }
    };
    let tps = or_base(flags.tp, &have);
    for (flag, list) in [
        ("--tp", flags.tp),
        ("--prefill-tp", flags.prefill),
        ("--decode-tp", flags.decode),
    ] {
        if let Some(t) = list.iter().find(|t| !have.contains(t)) {
            return Err(format!(
                "plan {flag} {t}: no profile of {model} on {gpu} for {backend} at that TP \
                 (there are: {have:?})"
            ));
        }
    }
    if have.is_empty() {
        return Err(format!(
            "plan: no profile of {model} on {gpu} for {backend}"
        ));
    }
    if flags.prefill.is_empty() && flags.decode.is_empty() {
        return Ok((add, PoolTps::Same(tps)));
    }
    Ok((
        add,
        PoolTps::PerPool {
            prefill: or_base(flags.prefill, &tps),
            decode: or_base(flags.decode, &tps),
        },
    ))
}

/// `args` parsed as `replay`'s flags, checked, as configuration `index`.
fn configuration(
    index: usize,
    labels: Vec<String>,
    args: Vec<String>,
) -> Result<Configuration, String> {
    let parsed = ReplayOnly::try_parse_from(&args).map_err(|e| e.to_string().trim().to_string())?;
    Ok(Configuration {
        index,
        labels,
        args,
        parsed: Parsed::Replay(Box::new(parsed.args)),
    })
}

/// Runs configurations as replays on `pool`, writing their reports to
/// `out`; `total` numbers the report files.
pub(crate) struct ReplayRunner<'a> {
    /// The threads.
    pub pool: &'a rayon::ThreadPool,
    /// Where the reports go.
    pub out: &'a Path,
    /// Configurations in the whole plan or file (for the report names).
    pub total: usize,
    /// The flags added to every configuration's own: the model's, then
    /// the shared ones.
    pub flags: Vec<String>,
    /// `--max-rate`'s search, if asked (plans only).
    pub search: Option<RateSearch>,
    /// The plan's summary axes (plans only).
    pub axes: Axes,
}

/// The `replay` flags that make `l`: its workers, each pool's TP (`--tp`
/// when they are one, else `--prefill-tp` and `--decode-tp`), `--dp-size`
/// above 1, and `--enable-expert-parallel` when expert parallel.
fn layout_args(l: &Layout) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "--prefill".into(),
        l.prefill.to_string(),
        "--decode".into(),
        l.decode.to_string(),
    ];
    if l.tps_differ() {
        args.extend([
            "--prefill-tp".into(),
            l.prefill_tp.to_string(),
            "--decode-tp".into(),
            l.decode_tp.to_string(),
        ]);
    } else {
        args.extend(["--tp".into(), l.prefill_tp.to_string()]);
    }
    if l.dp > 1 {
        args.extend(["--dp-size".into(), l.dp.to_string()]);
    }
    if l.experts == Experts::Parallel {
        args.push("--enable-expert-parallel".into());
    }
    args
}

/// The layouts of `layouts` whose every pool has a profile (a MoE model's
/// DP and EP layouts each need their own), and how many were left out.
/// `flags` are what every layout adds (the model's, then the shared ones).
/// A TP without a profile is refused before (`model_and_tps`); a DP or EP
/// layout only AIConfigurator's derivation could add is left out here and
/// counted, so asking for `--dp 1,2 --expert-parallel off,on` plans what
/// the profiles allow.
pub(crate) fn profiled(layouts: Vec<Layout>, flags: &[String]) -> (Vec<Layout>, usize) {
    let total = layouts.len();
    let kept: Vec<Layout> = layouts
        .into_iter()
        .filter(|l| {
            if l.dp <= 1 && l.experts == Experts::Off {
                return true;
            }
            let mut args = layout_args(l);
            args.extend(flags.iter().cloned());
            ReplayOnly::try_parse_from(&args).is_ok_and(|p| p.args.deploy.pool_hardware().is_ok())
        })
        .collect();
    let left = total - kept.len();
    (kept, left)
}

impl Runner<Layout> for ReplayRunner<'_> {
    type Config = Configuration;

    fn prepare(&self, index: usize, l: &Layout) -> Result<Configuration, String> {
        let mut args = layout_args(l);
        args.extend(self.flags.iter().cloned());
        let c = configuration(index, l.labels(self.axes), args)?;
        if let Parsed::Replay(a) = &c.parsed {
            a.check()?;
        }
        Ok(c)
    }

    fn run_all(&self, configs: &[Configuration]) -> Vec<Value> {
        let keys: Vec<String> = self.axes.keys().into_iter().map(String::from).collect();
        // The report's `warnings` (a run not in steady state), in the row
        // only when there are some, so steady plans' summaries are as before.
        let extra: Vec<&str> = PLAN_METRICS.iter().copied().chain(["warnings"]).collect();
        self.pool.install(|| {
            in_order(configs, |c| {
                let mut row = run_one(c, &keys, self.out, self.total, &extra);
                if let Some(r) = row.as_object_mut() {
                    if r.get("warnings").is_some_and(Value::is_null) {
                        r.remove("warnings");
                    }
                }
                if let Some(s) = &self.search {
                    row["max_rate_rps"] = match s.search(|rate| probe(s, &c.args, rate)) {
                        Ok(r) => json!(r),
                        Err(e) => {
                            row["error"] = json!(format!("--max-rate: {e}"));
                            Value::Null
                        }
                    };
                }
                row
            })
        })
    }
}

/// Runs AIConfigurator rows as replays: each as the deployment the
/// library resolved (its workers, each pool's TP, its DP, its workload and
/// concurrency, and the model, GPU and backend that no flag after `--`
/// overrides), then `inner`'s flags; job numbers (and report names) are
/// the rows' CSV lines.
pub(crate) struct AicRunner<'a> {
    /// The pool, the reports' folder and the shared flags.
    pub inner: ReplayRunner<'a>,
    /// Whether `--model`, `--gpu`, `--backend` were given after `--` (then
    /// the shared flags carry them and the row's are not added).
    pub given: [bool; 3],
}

impl Runner<AicRun> for AicRunner<'_> {
    type Config = Configuration;

    fn prepare(&self, index: usize, run: &AicRun) -> Result<Configuration, String> {
        let (r, d) = (&run.row, &run.deployment);
        let mut args: Vec<String> = vec![
            "--prefill".into(),
            r.prefill.to_string(),
            "--decode".into(),
            r.decode.to_string(),
        ];
        if d.prefill_tp == d.decode_tp {
            args.extend(["--tp".into(), d.prefill_tp.to_string()]);
        } else {
            args.extend([
                "--prefill-tp".into(),
                d.prefill_tp.to_string(),
                "--decode-tp".into(),
                d.decode_tp.to_string(),
            ]);
        }
        match (d.prefill_ep, d.decode_ep) {
            (true, true) => args.push("--enable-expert-parallel".into()),
            (true, false) => args.push("--prefill-expert-parallel".into()),
            (false, true) => args.push("--decode-expert-parallel".into()),
            (false, false) => {}
        }
        args.extend([
            "--dp-size".into(),
            d.dp.to_string(),
            "--trace".into(),
            run.trace.clone(),
            "--concurrency".into(),
            r.concurrency.to_string(),
        ]);
        let e = &d.engine;
        for (given, flag, value) in [
            (self.given[0], "--model", e.model.as_str()),
            (self.given[1], "--gpu", e.gpu.as_str()),
            (self.given[2], "--backend", e.backend.name()),
        ] {
            if !given {
                args.extend([flag.to_string(), value.to_string()]);
            }
        }
        args.extend(self.inner.flags.iter().cloned());
        configuration(index, run.labels(), args)
    }

    fn run_all(&self, configs: &[Configuration]) -> Vec<Value> {
        let keys: Vec<String> = AIC_AXES.map(String::from).to_vec();
        let (out, total) = (self.inner.out, self.inner.total);
        self.inner
            .pool
            .install(|| in_order(configs, |c| run_one(c, &keys, out, total, AIC_METRICS)))
    }
}

/// Flags after `--` that each AIConfigurator row sets from its columns.
const ROW_FLAGS: [&str; 12] = [
    "--prefill",
    "--decode",
    "--tp",
    "--prefill-tp",
    "--decode-tp",
    "--dp-size",
    "--enable-expert-parallel",
    "--ep-size",
    "--prefill-expert-parallel",
    "--decode-expert-parallel",
    "--concurrency",
    "--trace",
];

/// Whether `flag` is among `args` (as `--flag V` or `--flag=V`).
fn has_flag(args: &[String], flag: &str) -> bool {
    args.iter()
        .any(|a| a == flag || a.strip_prefix(flag).is_some_and(|r| r.starts_with('=')))
}

/// What `plan --check-aic` runs each row as: the flags after `--`
/// (`shared`) that override the file's model, GPU and backend, the
/// defaults a file without those columns takes, whether each of the three
/// was given, and every selectable profile with its Hugging Face id.
pub(crate) fn aic_choice(
    shared: &[String],
) -> Result<(Choice, [bool; 3], Vec<ProfileEntry>), String> {
    if let Some(f) = ROW_FLAGS.iter().find(|f| has_flag(shared, f)) {
        return Err(format!(
            "plan --check-aic: {f} after `--`: each row sets its workers, TPs, DP, \
             concurrency and workload from its columns"
        ));
    }
    let parsed = parse_shared(shared)?;
    let deploy = parsed.args.deploy_args();
    let hw = &deploy.hardware;
    if deploy.perf.is_some() && hw.model.is_none() {
        return Err("plan --check-aic: --perf after `--` needs --model and --gpu".into());
    }
    let backend_given = has_flag(shared, "--backend");
    let backend = AicBackend::parse(deploy.backend().name())
        .ok_or_else(|| format!("--backend {}: not an AIC backend", deploy.backend().name()))?;
    let choice = Choice {
        model: hw.model.clone(),
        gpu: hw.gpu.clone(),
        backend: backend_given.then_some(backend),
        fallback: Engine {
            model: crate::hardware_args::DEFAULT_MODEL.to_string(),
            gpu: crate::hardware_args::DEFAULT_GPU.to_string(),
            backend,
        },
    };
    let given = [hw.model.is_some(), hw.gpu.is_some(), backend_given];
    Ok((choice, given, catalogue(hw)?))
}

/// Every profile `hw` can select (its folder's, then the built-in ones),
/// each with the Hugging Face id of its model (read from one profile of
/// each model: a model's profiles share it).
fn catalogue(hw: &crate::hardware_args::HardwareArgs) -> Result<Vec<ProfileEntry>, String> {
    use crate::hardware_args::{built_in_text, embedded_profiles, list_profiles, ProfileKey};
    use handoff_profiles::profile_file;
    let mut keys: Vec<(ProfileKey, Option<std::path::PathBuf>)> = Vec::new();
    if let Some(d) = hw.profile_dir() {
        for k in list_profiles(&d.path).map_err(|e| e.replace("--profiles-dir", d.named_by))? {
            keys.push((k, Some(d.path.clone())));
        }
    }
    keys.extend(embedded_profiles().into_iter().map(|k| (k, None)));
    let mut ids: Vec<(String, String)> = Vec::new();
    let mut out = Vec::new();
    for (k, dir) in keys {
        let Some(backend) = AicBackend::parse(k.backend) else {
            continue;
        };
        let hf_id = match ids.iter().find(|(m, _)| *m == k.model) {
            Some((_, id)) => id.clone(),
            None => {
                let name = k.file_name();
                let file = match &dir {
                    Some(d) => profile_file::load_file(&d.join(&name)),
                    None => {
                        let origin = format!("profiles/aic/{name}");
                        profile_file::parse_file(built_in_text(&origin).unwrap_or(""), &origin)
                    }
                }
                .map_err(|e| format!("plan --check-aic: {e}"))?;
                let id = file.deployment.map(|d| d.hf_id).unwrap_or_default();
                ids.push((k.model.clone(), id.clone()));
                id
            }
        };
        out.push(ProfileEntry {
            model: k.model,
            hf_id,
            gpu: k.gpu,
            tp: k.tp,
            dp: k.dp,
            ep: k.ep,
            backend,
        });
    }
    Ok(out)
}

/// Whether the SLO holds when the layout `args` (which carry `--slo`)
/// replays its workload at `rate` requests/s.
fn probe(s: &RateSearch, args: &[String], rate: f64) -> Result<bool, String> {
    let mut a = args.to_vec();
    a.extend([
        "--arrival-speedup-ratio".to_string(),
        s.speedup(rate).to_string(),
    ]);
    let parsed = ReplayOnly::try_parse_from(&a).map_err(|e| e.to_string())?;
    let sim = simulate(&parsed.args, false, None)?;
    Ok(sim.report.slo.as_ref().is_some_and(|s| s.holds))
}

/// A pool of `jobs` threads (0: every core) with the main thread's stack.
pub(crate) fn pool(jobs: Option<usize>) -> Result<rayon::ThreadPool, String> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(jobs.unwrap_or(0))
        // A replay on a worker thread gets the main thread's stack size.
        .stack_size(8 << 20)
        .build()
        .map_err(|e| format!("--jobs: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_is_the_replay_flags_of_its_pools() {
        let words = |l: &Layout| layout_args(l).join(" ");
        // One TP: `--tp`, as plans always ran.
        assert_eq!(
            words(&Layout::uniform(2, 1, 3, 1)),
            "--prefill 3 --decode 1 --tp 2"
        );
        let mixed = Layout {
            decode_tp: 4,
            ..Layout::uniform(2, 2, 6, 1)
        };
        assert_eq!(
            words(&mixed),
            "--prefill 6 --decode 1 --prefill-tp 2 --decode-tp 4 --dp-size 2"
        );
        // Aggregated at one TP; expert parallel adds its flag.
        let ep = Layout {
            experts: Experts::Parallel,
            ..Layout::uniform(1, 4, 2, 0)
        };
        assert_eq!(
            words(&ep),
            "--prefill 2 --decode 0 --tp 1 --dp-size 4 --enable-expert-parallel"
        );
    }
}
