//! Request fields vLLM's OpenAI front accepts that a mock engine cannot
//! honour (sampling, log-probabilities, stop strings, tools, formats):
//! they are checked for vLLM's types and ranges, so a client's malformed
//! request fails here as it would against vLLM, and then ignored. The
//! mock's tokens are stand-ins, so nothing sampled from them could mean
//! anything. Types and bounds follow vLLM's `entrypoints/openai/protocol.py`
//! request models and `SamplingParams._verify_args` (temperature >= 0,
//! top_p in (0, 1], top_k >= -1, penalties in [-2, 2], logprobs <= 20).

use serde_json::Value;

/// A field that fails its check: its name and why.
pub type FieldError = (&'static str, String);

/// How a field's value must look.
#[derive(Clone, Copy)]
enum Kind {
    /// A finite number in `lo..=hi`.
    Number { lo: f64, hi: f64 },
    /// An integer in `lo..=hi`.
    Integer { lo: i64, hi: i64 },
    /// true or false.
    Boolean,
    /// A string.
    Text,
    /// A string or a list of strings.
    TextOrList,
    /// A list of objects.
    ObjectList,
    /// An object.
    Object,
    /// A string or an object.
    TextOrObject,
}

/// Fields both endpoints take.
const COMMON: &[(&str, Kind)] = &[
    (
        "temperature",
        Kind::Number {
            lo: 0.0,
            hi: f64::MAX,
        },
    ),
    (
        "top_p",
        Kind::Number {
            lo: f64::MIN_POSITIVE,
            hi: 1.0,
        },
    ),
    ("min_p", Kind::Number { lo: 0.0, hi: 1.0 }),
    (
        "top_k",
        Kind::Integer {
            lo: -1,
            hi: i64::MAX,
        },
    ),
    ("presence_penalty", Kind::Number { lo: -2.0, hi: 2.0 }),
    ("frequency_penalty", Kind::Number { lo: -2.0, hi: 2.0 }),
    (
        "repetition_penalty",
        Kind::Number {
            lo: f64::MIN_POSITIVE,
            hi: f64::MAX,
        },
    ),
    (
        "seed",
        Kind::Integer {
            lo: i64::MIN,
            hi: i64::MAX,
        },
    ),
    ("stop", Kind::TextOrList),
    ("user", Kind::Text),
    ("logit_bias", Kind::Object),
    ("response_format", Kind::Object),
];

/// Fields only `/v1/completions` takes.
const COMPLETIONS: &[(&str, Kind)] = &[
    ("logprobs", Kind::Integer { lo: 0, hi: 20 }),
    ("echo", Kind::Boolean),
    ("suffix", Kind::Text),
    ("best_of", Kind::Integer { lo: 1, hi: 1 }),
];

/// Fields only `/v1/chat/completions` takes.
const CHAT: &[(&str, Kind)] = &[
    ("logprobs", Kind::Boolean),
    ("top_logprobs", Kind::Integer { lo: 0, hi: 20 }),
    ("tools", Kind::ObjectList),
    ("tool_choice", Kind::TextOrObject),
    ("parallel_tool_calls", Kind::Boolean),
];

/// The roles a chat message may have.
pub const ROLES: &[&str] = &[
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
];

/// Checks every such field of `body` (a JSON object) for a chat request
/// (`chat`) or a completion. `null` is accepted wherever a value is.
pub fn check(body: &Value, chat: bool) -> Result<(), FieldError> {
    let own = if chat { CHAT } else { COMPLETIONS };
    for &(name, kind) in COMMON.iter().chain(own) {
        match body.get(name) {
            None | Some(Value::Null) => {}
            Some(v) => check_one(name, kind, v)?,
        }
    }
    Ok(())
}

fn check_one(name: &'static str, kind: Kind, v: &Value) -> Result<(), FieldError> {
    let bad = |what: String| Err((name, format!("{name} {what}")));
    match kind {
        Kind::Number { lo, hi } => match v.as_f64() {
            Some(x) if x.is_finite() && (lo..=hi).contains(&x) => Ok(()),
            Some(x) => bad(format!("is out of range: {x}")),
            None => bad("must be a number".into()),
        },
        Kind::Integer { lo, hi } => match v.as_i64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(()),
            Some(x) if lo == hi => bad(format!("must be {lo} (got {x}): only {lo} is supported")),
            Some(x) => bad(format!("must be in {lo}..={hi} (got {x})")),
            None => bad("must be an integer".into()),
        },
        Kind::Boolean if v.is_boolean() => Ok(()),
        Kind::Boolean => bad("must be a boolean".into()),
        Kind::Text if v.is_string() => Ok(()),
        Kind::Text => bad("must be a string".into()),
        Kind::TextOrList => match v {
            Value::String(_) => Ok(()),
            Value::Array(a) if a.iter().all(Value::is_string) => Ok(()),
            _ => bad("must be a string or a list of strings".into()),
        },
        Kind::ObjectList => match v {
            Value::Array(a) if a.iter().all(Value::is_object) => Ok(()),
            _ => bad("must be a list of objects".into()),
        },
        Kind::Object if v.is_object() => Ok(()),
        Kind::Object => bad("must be an object".into()),
        Kind::TextOrObject if v.is_string() || v.is_object() => Ok(()),
        Kind::TextOrObject => bad("must be a string or an object".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wrong_types_and_ranges_name_the_field() {
        let cases = [
            (json!({"temperature": "hot"}), false, "temperature"),
            (json!({"temperature": -0.5}), true, "temperature"),
            (json!({"top_p": 0}), false, "top_p"),
            (json!({"top_k": -2}), false, "top_k"),
            (json!({"presence_penalty": 3}), true, "presence_penalty"),
            (json!({"stop": [1, 2]}), false, "stop"),
            (json!({"logprobs": true}), false, "logprobs"),
            (json!({"logprobs": 5}), true, "logprobs"),
            (json!({"top_logprobs": 21}), true, "top_logprobs"),
            (json!({"tools": {"type": "function"}}), true, "tools"),
            (json!({"best_of": 2}), false, "best_of"),
            (json!({"seed": 1.5}), false, "seed"),
        ];
        for (body, chat, field) in cases {
            let e = check(&body, chat).expect_err(&body.to_string());
            assert_eq!(e.0, field, "{body}");
        }
    }

    #[test]
    fn what_vllm_accepts_is_accepted() {
        let completion = json!({
            "temperature": 0.7, "top_p": 0.9, "top_k": -1, "seed": 3, "stop": ["\n"],
            "logprobs": 2, "echo": false, "best_of": 1, "frequency_penalty": -1.5,
            "user": "u", "logit_bias": {"50256": -100}, "suffix": null
        });
        assert_eq!(check(&completion, false), Ok(()));
        let chat = json!({
            "temperature": 0, "stop": "END", "logprobs": true, "top_logprobs": 5,
            "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": "auto", "response_format": {"type": "json_object"}
        });
        assert_eq!(check(&chat, true), Ok(()));
    }
}
