//! A row made a deployment here: its model, GPU and backend (the file's,
//! unless a flag overrides them), each pool's TP, expert parallelism and
//! profile ([`PoolProfile`]) and the one DP, or why the mocker cannot run
//! the layout it names ([`Skip`]).

use super::read::{AicBackend, AicRow, Parallel};

/// A profile the caller can select: its `--model` slug, the Hugging Face
/// id AIConfigurator writes in its `model` column, its GPU slug, TP, MoE
/// layout (attention DP and EP, 1 for a TP-only profile) and backend.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileEntry {
    /// `--model`.
    pub model: String,
    /// `deployment.hf_id`.
    pub hf_id: String,
    /// `--gpu`.
    pub gpu: String,
    /// `--tp`.
    pub tp: u32,
    /// The attention DP ranks an MoE layout profile times together
    /// (`-dpD` in its name); 1 for a TP profile.
    pub dp: u32,
    /// Its expert parallelism (`-epE`); 1 without.
    pub ep: u32,
    /// `--backend`.
    pub backend: AicBackend,
}

/// The profile a pool needs: TP, the layout's attention DP (1 unless the
/// MoE layer spans the ranks) and EP (1 without expert parallelism).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolProfile {
    /// TP of one rank.
    pub tp: u32,
    /// Attention DP the profile times together.
    pub dp: u32,
    /// Expert parallelism.
    pub ep: u32,
}

impl PoolProfile {
    /// The profile `p` needs: an MoE layer spanning the DP ranks (EP =
    /// TP × DP, or MoE TP = TP × DP) needs a layout profile of that DP;
    /// a dense model's ranks are independent engines timed by the TP
    /// profile.
    pub fn of(p: &Parallel) -> PoolProfile {
        let spans = p.dp > 1 && (p.moe_ep > 1 || p.moe_tp == p.tp.saturating_mul(p.dp));
        PoolProfile {
            tp: p.tp,
            dp: if spans { p.dp } else { 1 },
            ep: p.moe_ep.max(1),
        }
    }

    /// Whether the pool runs expert parallelism (`--enable-expert-parallel`
    /// or the pool's own flag).
    pub fn expert_parallel(&self) -> bool {
        self.ep > 1
    }

    /// `TP1 DP4 EP4`, each part after TP only when over 1.
    fn label(&self) -> String {
        let mut s = format!("TP{}", self.tp);
        if self.dp > 1 {
            s.push_str(&format!(" DP{}", self.dp));
        }
        if self.ep > 1 {
            s.push_str(&format!(" EP{}", self.ep));
        }
        s
    }
}

/// The model, GPU and backend of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Engine {
    /// `--model` (a slug, or a Hugging Face id of a profile).
    pub model: String,
    /// `--gpu`.
    pub gpu: String,
    /// `--backend`.
    pub backend: AicBackend,
}

/// What the rows' model, system and backend columns give way to: the
/// flags given after `--` (`overrides`), and what a file without such a
/// column runs (`fallback`: the flags' defaults).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    /// `--model` given after `--`.
    pub model: Option<String>,
    /// `--gpu` given after `--`.
    pub gpu: Option<String>,
    /// `--backend` given after `--`.
    pub backend: Option<AicBackend>,
    /// A column the file lacks (or a row leaves empty) takes this.
    pub fallback: Engine,
}

/// Which pool a reason is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// Aggregated workers.
    Aggregated,
    /// Prefill workers.
    Prefill,
    /// Decode workers.
    Decode,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Aggregated => "aggregated",
            Side::Prefill => "prefill",
            Side::Decode => "decode",
        }
    }
}

/// Why a valid row is not simulated here: a layout the mocker cannot
/// model (it never runs a row on another layout or fewer GPUs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// MoE expert parallelism other than vLLM's (`moe_ep` = `tp` × `dp`,
    /// `moe_tp` 1): the pool's parallelism.
    ExpertParallel(Side, Parallel),
    /// Context parallelism (`cp` > 1).
    ContextParallel(Side, u32),
    /// Pipeline parallelism (`pp` > 1).
    Pipeline(Side, u32),
    /// The MoE layer's TP is neither the attention TP nor all the GPUs of
    /// the attention DP ranks (`tp` × `dp`, which a layout profile times):
    /// no engine flag here gives it.
    MoeTpAcrossDp {
        /// Pool.
        side: Side,
        /// Its parallelism.
        par: Parallel,
    },
    /// Prefill and decode attention DP differ (one `--dp-size` here).
    DpDiffers {
        /// Prefill DP.
        prefill: u32,
        /// Decode DP.
        decode: u32,
    },
    /// Prefill and decode on different systems (one `--gpu` here).
    SystemsDiffer(String, String),
    /// Prefill and decode under different backends (one `--backend`).
    BackendsDiffer(AicBackend, AicBackend),
    /// A backend the mocker does not model.
    Backend(AicBackend),
    /// A cached prefix of this many tokens.
    Prefix(u32),
    /// No profile of the model on the GPU at this TP for the backend.
    NoProfile {
        /// The model as named (a Hugging Face id or slug).
        model: String,
        /// Whether any profile of the model exists (on any GPU or TP).
        known: bool,
        /// GPU slug.
        gpu: String,
        /// What `cargo xtask profiles build --system` takes: the row's
        /// AIC system, or the GPU slug.
        system: String,
        /// The pool's TP and MoE layout.
        layout: PoolProfile,
        /// Backend.
        backend: AicBackend,
    },
    /// The layout's GPUs are not the row's `num_total_gpus`.
    Gpus {
        /// The row's count.
        row: u32,
        /// The layout's: workers × TP × DP per pool.
        layout: u64,
    },
}

impl Skip {
    /// The reason's kind, as the summary counts it.
    pub fn kind(&self) -> &'static str {
        match self {
            Skip::ExpertParallel(..) => "expert parallelism",
            Skip::ContextParallel(..) => "context parallelism",
            Skip::Pipeline(..) => "pipeline parallelism",
            Skip::MoeTpAcrossDp { .. } => "MoE TP across attention DP",
            Skip::DpDiffers { .. } => "prefill and decode DP differ",
            Skip::SystemsDiffer(..) => "prefill and decode systems differ",
            Skip::BackendsDiffer(..) => "prefill and decode backends differ",
            Skip::Backend(_) => "backend not modelled",
            Skip::Prefix(_) => "cached prefix",
            Skip::NoProfile { .. } => "no profile",
            Skip::Gpus { .. } => "GPU count",
        }
    }
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::ExpertParallel(s, par) => write!(
                f,
                "{} {par}: expert parallelism with MoE TP{} and EP{} is not modelled (only \
                 EP = TP × DP, vLLM's --enable-expert-parallel)",
                s.name(),
                par.moe_tp,
                par.moe_ep
            ),
            Skip::ContextParallel(s, cp) => write!(
                f,
                "{} CP{cp}: context parallelism is not modelled",
                s.name()
            ),
            Skip::Pipeline(s, pp) => write!(
                f,
                "{} PP{pp}: pipeline parallelism is not modelled",
                s.name()
            ),
            Skip::MoeTpAcrossDp { side, par } => write!(
                f,
                "{} {par}: MoE TP{} is neither the attention TP{} nor TP × DP {} (no engine \
                 flag gives it)",
                side.name(),
                par.moe_tp,
                par.tp,
                par.tp.saturating_mul(par.dp)
            ),
            Skip::DpDiffers { prefill, decode } => write!(
                f,
                "prefill DP{prefill} and decode DP{decode} differ (one --dp-size here)"
            ),
            Skip::SystemsDiffer(p, d) => {
                write!(f, "prefill on {p} and decode on {d} (one --gpu here)")
            }
            Skip::BackendsDiffer(p, d) => write!(
                f,
                "prefill under {} and decode under {} (one --backend here)",
                p.name(),
                d.name()
            ),
            Skip::Backend(b) => write!(f, "backend {} is not modelled", b.name()),
            Skip::Prefix(n) => write!(f, "a cached prefix of {n} tokens"),
            Skip::NoProfile {
                model,
                known,
                gpu,
                system,
                layout,
                backend,
            } => {
                let (b, at) = (backend.name(), layout.label());
                if *known {
                    write!(f, "no profile of {model} on {gpu} at {at} for {b}")?;
                } else {
                    write!(f, "no profile of {model} (on {gpu} at {at} for {b})")?;
                }
                let mut more = String::new();
                if layout.dp > 1 {
                    more.push_str(&format!(" --attention-dp {}", layout.dp));
                }
                if layout.ep > 1 {
                    more.push_str(" --expert-parallel");
                }
                write!(
                    f,
                    "; `cargo xtask profiles build --model {model} --system {system} \
                     --backend {b} --tp {}{more}` and --profiles-dir target/profiles would add \
                     it",
                    layout.tp
                )
            }
            Skip::Gpus { row, layout } => write!(
                f,
                "the row names {row} GPUs, its layout here is {layout} (workers × TP × DP)"
            ),
        }
    }
}

/// A row as a deployment here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The model (its profiles' slug), GPU and backend.
    pub engine: Engine,
    /// Prefill (or aggregated) TP.
    pub prefill_tp: u32,
    /// Decode TP (aggregated: as prefill).
    pub decode_tp: u32,
    /// Attention DP of every worker (`--dp-size`).
    pub dp: u32,
    /// Whether the prefill (or aggregated) pool runs expert parallelism.
    pub prefill_ep: bool,
    /// Whether the decode pool does (aggregated: as prefill).
    pub decode_ep: bool,
}

/// The `--gpu` slug of an AIC system: `_sxm` or `_server` dropped, then
/// `_` and `-` removed, lower case (`profiles/derive_from_aic.py`
/// `gpu_slug`: `h100_sxm` is `h100`, `rtx_pro_6000_server` `rtxpro6000`).
pub fn gpu_slug(system: &str) -> String {
    let base = system
        .strip_suffix("_sxm")
        .or_else(|| system.strip_suffix("_server"))
        .unwrap_or(system);
    base.chars()
        .filter(|c| *c != '_' && *c != '-')
        .flat_map(char::to_lowercase)
        .collect()
}

/// Whether a pool's expert parallelism is modelled: the one place that
/// decides it. vLLM's `--enable-expert-parallel` makes EP the engine's
/// every GPU (`moe_ep` = `tp` × `dp`, `moe_tp` 1): that runs, with an EP
/// profile and the ranks stepping together; AIConfigurator's hybrid MoE
/// TP × EP layouts have no engine flag here and are skipped.
pub fn expert_parallel_skip(side: Side, p: &Parallel) -> Option<Skip> {
    (p.moe_ep > 1 && (p.moe_tp != 1 || p.moe_ep != p.tp.saturating_mul(p.dp)))
        .then_some(Skip::ExpertParallel(side, *p))
}

/// Why a pool's parallelism is not modelled, if it is not. Context and
/// pipeline parallelism are refused before the GPU count is compared, so
/// a CP or PP row never runs on the `tp × dp` GPUs it would have without
/// them.
fn pool_skip(side: Side, p: &Parallel) -> Option<Skip> {
    if let Some(s) = expert_parallel_skip(side, p) {
        return Some(s);
    }
    if p.cp > 1 {
        return Some(Skip::ContextParallel(side, p.cp));
    }
    if p.pp > 1 {
        return Some(Skip::Pipeline(side, p.pp));
    }
    let odd = p.moe_tp > 1 && p.moe_tp != p.tp && p.moe_tp != p.tp.saturating_mul(p.dp);
    (odd && p.moe_ep <= 1).then_some(Skip::MoeTpAcrossDp { side, par: *p })
}

/// The layout `r` names, checked: every pool's parallelism modelled, one
/// DP, one system, one backend the mocker has, no prefix, and as many GPUs
/// as the row names.
fn layout_skip(r: &AicRow) -> Option<Skip> {
    let sides: &[(Side, &Parallel)] = if r.aggregated() {
        &[(Side::Aggregated, &r.p_par)]
    } else {
        &[(Side::Prefill, &r.p_par), (Side::Decode, &r.d_par)]
    };
    if let Some(s) = sides.iter().find_map(|(s, p)| pool_skip(*s, p)) {
        return Some(s);
    }
    if !r.aggregated() && r.p_par.dp != r.d_par.dp {
        return Some(Skip::DpDiffers {
            prefill: r.p_par.dp,
            decode: r.d_par.dp,
        });
    }
    if r.prefix > 0 {
        return Some(Skip::Prefix(r.prefix));
    }
    let gpus = |workers: u32, p: &Parallel| u64::from(workers) * u64::from(p.tp * p.dp);
    let layout = gpus(r.prefill, &r.p_par) + gpus(r.decode, &r.d_par);
    (layout != u64::from(r.gpus)).then_some(Skip::Gpus {
        row: r.gpus,
        layout,
    })
}

impl Choice {
    /// The row's model, GPU (and the AIC system it came from) and
    /// backend: a flag's, else the file's, else the fallback.
    fn engine(&self, r: &AicRow) -> Result<(Engine, String), Skip> {
        let pick = |i: usize| {
            if r.aggregated() {
                r.system[0].clone()
            } else {
                r.system[i].clone()
            }
        };
        let system = match (&self.gpu, pick(0), pick(1)) {
            (Some(g), ..) => (g.clone(), g.clone()),
            (None, Some(p), Some(d)) if p != d && !r.aggregated() => {
                return Err(Skip::SystemsDiffer(p, d))
            }
            (None, Some(p), _) | (None, None, Some(p)) => (gpu_slug(&p), p),
            (None, None, None) => (self.fallback.gpu.clone(), self.fallback.gpu.clone()),
        };
        let backend = match (self.backend, r.backend[0], r.backend[1]) {
            (Some(b), ..) => b,
            (None, Some(p), Some(d)) if p != d && !r.aggregated() => {
                return Err(Skip::BackendsDiffer(p, d))
            }
            (None, Some(p), _) | (None, None, Some(p)) => p,
            (None, None, None) => self.fallback.backend,
        };
        if backend == AicBackend::TrtLlm {
            return Err(Skip::Backend(backend));
        }
        let model = self
            .model
            .clone()
            .or_else(|| r.model.clone())
            .unwrap_or_else(|| self.fallback.model.clone());
        Ok((
            Engine {
                model,
                gpu: system.0,
                backend,
            },
            system.1,
        ))
    }

    /// Row `r` as a deployment with the profiles of `catalogue`, or why
    /// the mocker cannot run the layout it names.
    pub fn resolve(&self, r: &AicRow, catalogue: &[ProfileEntry]) -> Result<Resolved, Skip> {
        if let Some(s) = layout_skip(r) {
            return Err(s);
        }
        let (mut engine, system) = self.engine(r)?;
        let named = |p: &ProfileEntry| {
            p.model.eq_ignore_ascii_case(&engine.model)
                || p.hf_id.eq_ignore_ascii_case(&engine.model)
        };
        let slug = catalogue.iter().find(|p| named(p)).map(|p| p.model.clone());
        let prefill = PoolProfile::of(&r.p_par);
        let decode = if r.aggregated() {
            prefill
        } else {
            PoolProfile::of(&r.d_par)
        };
        for want in [prefill, decode] {
            let here = |p: &ProfileEntry| {
                named(p) && p.gpu == engine.gpu && p.backend == engine.backend && p.tp == want.tp
            };
            let found = catalogue
                .iter()
                .any(|p| here(p) && (p.dp, p.ep) == (want.dp, want.ep));
            if !found {
                return Err(Skip::NoProfile {
                    model: slug.clone().unwrap_or_else(|| engine.model.clone()),
                    known: slug.is_some(),
                    gpu: engine.gpu.clone(),
                    system,
                    layout: want,
                    backend: engine.backend,
                });
            }
        }
        if let Some(s) = slug {
            engine.model = s;
        }
        Ok(Resolved {
            engine,
            prefill_tp: prefill.tp,
            decode_tp: decode.tp,
            dp: r.p_par.dp,
            prefill_ep: prefill.expert_parallel(),
            decode_ep: decode.expert_parallel(),
        })
    }
}
