//! The `overheads` section of a profile file: read into
//! [`handoff_perf::Overheads`], and written back ([`overheads_json`],
//! [`with_overheads`]).

use super::{parse_file, ProfileFileError, ProfileFileErrorKind};
use crate::hardware::ModelOnGpu;
use handoff_perf::overhead::MAX_CUDA_GRAPH_SIZES;
use handoff_perf::{CudaGraph, DeploymentShape, OverheadError, Overheads, Term, TermValue};
use serde_json::Value;

/// What the step-time terms read of a deployment.
pub fn shape_of(d: &ModelOnGpu) -> DeploymentShape {
    DeploymentShape {
        tp: d.tp,
        layers: d.layers,
        hidden_size: d.hidden_size,
        gpu_memory_bytes: d.gpu_memory_bytes,
    }
}

/// The `overheads` section's key of `term` (the section itself for none).
pub(super) fn term_key(term: Option<Term>) -> &'static str {
    match term {
        None => "overheads",
        Some(Term::KernelScale) => "overheads.kernel_scale",
        Some(Term::StepMs) => "overheads.step_ms",
        Some(Term::PerSeqMs) => "overheads.per_seq_ms",
        Some(Term::SchedMs) => "overheads.sched_ms",
        Some(Term::AsyncScheduling) => "overheads.async_scheduling",
        Some(Term::CudaGraph) => "overheads.cuda_graph",
        Some(Term::AllreduceUs) => "overheads.allreduce_us",
        Some(Term::AllreduceUsPerMib) => "overheads.allreduce_us_per_mib",
    }
}

/// The term an error names, if any.
pub(super) fn e_term(e: &OverheadError) -> Option<Term> {
    match e {
        OverheadError::Invalid { term, .. } => Some(*term),
        OverheadError::UnknownTerm(_) => None,
    }
}

const RULES: &str = "expected \"off\", \"vllm\", \"sglang\" or an array of batch sizes";

/// The `overheads` section read into terms (unchecked: the profile checks
/// them against its deployment); unknown keys and values of the wrong kind
/// are refused by key.
pub(super) fn overheads(
    section: &serde_json::Map<String, Value>,
) -> Result<Overheads, (&'static str, String)> {
    let mut o = Overheads::default();
    for (key, value) in section {
        let Some(term) = Term::from_name(key) else {
            return Err((
                "overheads",
                OverheadError::UnknownTerm(key.clone()).to_string(),
            ));
        };
        let at = term_key(Some(term));
        let value = match (term, value) {
            (Term::AsyncScheduling, Value::Bool(b)) => TermValue::Flag(*b),
            (Term::AsyncScheduling, _) => return Err((at, "expected true or false".into())),
            (Term::CudaGraph, Value::String(rule)) => TermValue::Graph(match rule.as_str() {
                "off" => CudaGraph::Off,
                "vllm" => CudaGraph::Vllm,
                "sglang" => CudaGraph::Sglang,
                other => return Err((at, format!("`{other}`: {RULES}"))),
            }),
            (Term::CudaGraph, Value::Array(items)) => TermValue::Graph(CudaGraph::Sizes(
                sizes(items).map_err(|i| {
                    (
                        at,
                        format!("entry {i}: expected a batch size (at most {MAX_CUDA_GRAPH_SIZES} of them)"),
                    )
                })?,
            )),
            (Term::CudaGraph, _) => return Err((at, RULES.into())),
            (_, Value::Number(n)) => TermValue::Number(n.as_f64().unwrap_or(f64::NAN)),
            (_, _) => return Err((at, "expected a number".into())),
        };
        o.set(term, value).map_err(|e| (at, e.to_string()))?;
    }
    Ok(o)
}

/// Whole numbers that fit a `u32`, at most [`MAX_CUDA_GRAPH_SIZES`];
/// `Err(index)` of the first that is not.
fn sizes(items: &[Value]) -> Result<Vec<u32>, usize> {
    let mut out = Vec::with_capacity(items.len().min(MAX_CUDA_GRAPH_SIZES));
    for (i, v) in items.iter().enumerate() {
        match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if i < MAX_CUDA_GRAPH_SIZES => out.push(n),
            _ => return Err(i),
        }
    }
    Ok(out)
}

/// Decimals the `overheads` section's numbers are written with: what a
/// profile file reads back exactly.
pub const OVERHEADS_DECIMALS: i32 = 6;

fn written(v: f64) -> f64 {
    let scale = 10f64.powi(OVERHEADS_DECIMALS);
    (v * scale).round() / scale
}

/// `o` as a profile file's `overheads` section: every term, numbers to
/// [`OVERHEADS_DECIMALS`] decimals (a profile reading it back gets `o`
/// with its numbers so rounded; rounded terms come back equal).
pub fn overheads_json(o: &Overheads) -> Value {
    let mut map = serde_json::Map::new();
    for term in Term::ALL {
        let value = match term {
            Term::AsyncScheduling => Value::Bool(o.async_scheduling),
            Term::CudaGraph => match (&o.cuda_graph, o.cuda_graph.rule_name()) {
                (CudaGraph::Sizes(s), _) => Value::from(s.clone()),
                (_, Some(rule)) => Value::from(rule),
                (_, None) => Value::from("off"),
            },
            t => Value::from(written(o.number(t).unwrap_or(0.0))),
        };
        map.insert(term.name().to_string(), value);
    }
    Value::Object(map)
}

/// A profile's text with its `overheads` section set to `o` (replacing
/// any), checked by reading it back: what `calibrate` writes. `origin`
/// names the profile in errors.
pub fn with_overheads(
    profile_json: &str,
    o: &Overheads,
    origin: &str,
) -> Result<String, ProfileFileError> {
    // Checks the profile first, with its own located errors.
    parse_file(profile_json, origin)?;
    let err = |message: String| ProfileFileError {
        path: origin.to_string(),
        kind: ProfileFileErrorKind::Field {
            field: "overheads",
            message,
        },
    };
    let mut doc: Value = serde_json::from_str(profile_json).map_err(|e| err(e.to_string()))?;
    let Some(map) = doc.as_object_mut() else {
        return Err(err("the profile is not a JSON object".into()));
    };
    map.insert("overheads".to_string(), overheads_json(o));
    let text = serde_json::to_string_pretty(&doc).map_err(|e| err(e.to_string()))?;
    parse_file(&text, origin)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::super::tests::{AIC, OK};
    use super::super::{parse, parse_file};
    use super::*;

    fn with_section(text: &str, section: &str) -> String {
        text.replacen('{', &format!("{{ \"overheads\": {section},"), 1)
    }

    #[test]
    fn the_overheads_section_sets_the_terms() {
        let f = parse_file(
            &with_section(
                AIC,
                r#"{"step_ms": 4, "per_seq_ms": 0.01, "kernel_scale": 1.1,
                "sched_ms": 2, "async_scheduling": true, "cuda_graph": "vllm",
                "allreduce_us": 5, "allreduce_us_per_mib": 30}"#,
            ),
            "a.json",
        )
        .unwrap();
        let o = f.profile.overheads();
        assert_eq!((o.step_ms, o.per_seq_ms, o.kernel_scale), (4.0, 0.01, 1.1));
        assert_eq!(o.cuda_graph, CudaGraph::Vllm);
        assert!(o.async_scheduling);
        assert_eq!(f.overheads.as_ref(), Some(o));
        assert_eq!(f.profile.shape().map(|s| s.layers), Some(36));
        let p = parse(&with_section(OK, r#"{"cuda_graph": [1, 2, 8]}"#), "t").unwrap();
        assert_eq!(p.overheads().cuda_graph, CudaGraph::Sizes(vec![1, 2, 8]));
        // No section: every term off, and none recorded.
        let f = parse_file(OK, "t").unwrap();
        assert!(f.profile.overheads().is_off() && f.overheads.is_none());
    }

    #[test]
    fn overheads_errors_name_the_key() {
        let cases = [
            (r#"{"step": 4}"#, "overheads: `step`: no such term"),
            (
                r#"{"step_ms": 101}"#,
                "overheads.step_ms: step_ms: 101 is not in [0, 100]",
            ),
            (r#"{"kernel_scale": 0.1}"#, "overheads.kernel_scale:"),
            (
                r#"{"per_seq_ms": "1"}"#,
                "overheads.per_seq_ms: expected a number",
            ),
            (
                r#"{"async_scheduling": 1}"#,
                "overheads.async_scheduling: expected true",
            ),
            (r#"{"cuda_graph": "trt"}"#, "overheads.cuda_graph: `trt`"),
            (r#"{"cuda_graph": [4, 2]}"#, "overheads.cuda_graph:"),
            (
                r#"{"cuda_graph": [1, -2]}"#,
                "overheads.cuda_graph: entry 1",
            ),
            (r#"{"cuda_graph": []}"#, "overheads.cuda_graph:"),
            (
                r#"{"allreduce_us": 3}"#,
                "overheads.allreduce_us: allreduce_us: needs the profile's deployment",
            ),
            (r#"[1]"#, "t:1:15: invalid type: sequence"),
        ];
        for (section, want) in cases {
            let e = parse(&with_section(OK, section), "t")
                .unwrap_err()
                .to_string();
            assert!(e.contains(want), "{section}: {e}");
        }
        // With a deployment the all-reduce terms are accepted.
        assert!(parse(&with_section(AIC, r#"{"allreduce_us": 3}"#), "a").is_ok());
    }

    #[test]
    fn written_overheads_round_trip_through_the_loader() {
        let o = Overheads {
            kernel_scale: 1.0374,
            step_ms: 3.981234,
            per_seq_ms: 0.0125,
            sched_ms: 1.5,
            async_scheduling: true,
            cuda_graph: CudaGraph::Sizes(vec![1, 2, 4, 8, 24]),
            allreduce_us: 6.25,
            allreduce_us_per_mib: 41.0,
        };
        let text = with_overheads(AIC, &o, "a.json").unwrap();
        let back = parse_file(&text, "a.json").unwrap();
        assert_eq!(back.profile.overheads(), &o);
        assert_eq!(back.overheads.as_ref(), Some(&o));
        // The tables and the rest are the input's.
        let input = parse_file(AIC, "a.json").unwrap();
        assert_eq!(back.profile.decode_table(), input.profile.decode_table());
        assert_eq!(back.deployment.unwrap().layers, 36);
        // Replacing a section, and the rules by name.
        let rules = Overheads {
            cuda_graph: CudaGraph::Sglang,
            ..Overheads::default()
        };
        let again = with_overheads(&text, &rules, "a.json").unwrap();
        assert_eq!(parse(&again, "a").unwrap().overheads(), &rules);
        assert_eq!(overheads_json(&rules)["cuda_graph"], "sglang");
        // Unrounded numbers come back rounded to the written decimals.
        let fine = Overheads {
            step_ms: 1.0 / 3.0,
            ..Overheads::default()
        };
        let p = parse(&with_overheads(OK, &fine, "t").unwrap(), "t").unwrap();
        assert_eq!(p.overheads().step_ms, 0.333333);
        // Terms the profile cannot take are refused, not written.
        let e = with_overheads(
            OK,
            &Overheads {
                allreduce_us: 1.0,
                ..Overheads::default()
            },
            "t",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("needs the profile's deployment"),
            "{e}"
        );
        assert!(with_overheads("[]", &o, "t").is_err());
    }
}
