//! The OpenAI request body parser ([`handoff_openai::parse`]) under
//! attack: what `serve`'s `/v1/completions` and `/v1/chat/completions`
//! handlers run on every body they read.
//!
//! Inputs are valid completion and chat bodies (with the sampling fields
//! vLLM accepts) mutated three ways: a known field's value replaced by a
//! value of another type or an extreme number (through `serde_json`, so
//! the rest stays valid and the check reached is the field's own), a field
//! added or removed, or generic byte mutations with a JSON dictionary.
//! Each input is parsed for both endpoints, twice.
//!
//! Checks: no panic; the same answer both times (deterministic); an error
//! is a 4xx (404 only for an unknown model) with a non-empty message, its
//! JSON body carries the same `code` and an OpenAI `type`, and a named
//! `param` is one of the fields the parser checks; an accepted request
//! obeys the parser's rules (`1 <= max_tokens`, `min_tokens <= max_tokens`,
//! a non-empty prompt, prompt plus output within `max_model_len`, an output
//! length in `[1, max_tokens]`); and the peak of live allocation stays
//! under [`ALLOC_PER_BYTE`] × input length + [`ALLOC_CONST`].

use crate::alloc::measure;
use crate::engine::{Sig, Target};
use crate::mutate::{mutate, TEXT_NUMBERS};
use crate::rng::Rng;
use handoff_openai::{parse, ApiError, Endpoint, GenRequest, Limits, Tokenizer};
use serde_json::{json, Map, Value};

/// Peak live bytes per input byte: `serde_json::Value` spends 32 bytes on
/// an array element that can be 2 input bytes (`1,`) and its vector may
/// double (< 32×); token ids are 4 bytes per token of at least one byte,
/// the chat template copies the text once, and the tokenizer keeps one
/// string of pieces (< 16× together).
pub const ALLOC_PER_BYTE: usize = 48;

/// Peak live bytes regardless of length: serde_json's error strings and
/// the error's message (which quotes no input beyond a role name).
pub const ALLOC_CONST: usize = 16 << 10;

/// `max_model_len` of the limits parsed against.
const MAX_MODEL_LEN: u32 = 4096;

/// Every field `parse` checks, hence every `param` an error may name.
const FIELDS: &[&str] = &[
    "model",
    "prompt",
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "n",
    "stream",
    "stream_options",
    "include_usage",
    "ignore_eos",
    "temperature",
    "top_p",
    "min_p",
    "top_k",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "stop",
    "user",
    "logit_bias",
    "response_format",
    "logprobs",
    "echo",
    "suffix",
    "best_of",
    "top_logprobs",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
];

const SEEDS: &[&str] = &[
    r#"{"model":"m","prompt":"hello world","max_tokens":5}"#,
    r#"{"model":"m","prompt":[1,2,3],"min_tokens":2,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}"#,
    r#"{"model":"m","prompt":[[7,8,9]],"temperature":0.7,"top_p":0.9,"top_k":-1,"seed":3,"stop":["\n"],"logprobs":2,"echo":false,"best_of":1,"n":1}"#,
    r#"{"model":"m","prompt":["one prompt"],"frequency_penalty":-1.5,"presence_penalty":2,"logit_bias":{"50":-100},"user":"u","suffix":null}"#,
    r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3}"#,
    r#"{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"u"}]}],"logprobs":true,"top_logprobs":5}"#,
    r#"{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"auto","response_format":{"type":"json_object"},"stream":true}"#,
];

const DICT: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"\\u0000",
    b"\\ud800",
    b"null",
    b"true",
    b"\"model\":",
    b"\"prompt\":",
    b"\"messages\":",
    b"\"role\":",
    b"\"content\":",
    b"\"max_tokens\":",
    b"\"n\":",
    b"\"stream\":",
    b"\"temperature\":",
    b"\"logprobs\":",
];

/// See the module docs.
#[derive(Default)]
pub struct BodyTarget {
    accepted: u64,
    refused: u64,
    by_param: std::collections::BTreeMap<&'static str, u64>,
    peak_ratio: f64,
}

fn limits() -> Limits {
    Limits {
        model: "m".into(),
        max_model_len: MAX_MODEL_LEN,
        tokenizer: Tokenizer::Builtin,
        loras: Default::default(),
    }
}

/// A value of a random type: numbers from the extremes list, strings,
/// lists of numbers or strings, objects, booleans, null.
fn gen_value(rng: &mut Rng, depth: usize) -> Value {
    match rng.below(if depth > 1 { 6 } else { 9 }) {
        0 => {
            serde_json::from_str(TEXT_NUMBERS[rng.below(TEXT_NUMBERS.len())]).unwrap_or(Value::Null)
        }
        1 => json!(rng.interesting_u64()),
        2 => json!(-(rng.below(1 << 20) as i64)),
        3 => json!(rng.below(4096) as f64 / 7.0),
        4 => json!(["hot", "", "user", "text", "m", "\u{0}"][rng.below(6)]),
        5 => Value::Bool(rng.coin()),
        6 => Value::Array(
            (0..rng.below(5))
                .map(|_| gen_value(rng, depth + 1))
                .collect(),
        ),
        7 => {
            let mut m = Map::new();
            for _ in 0..rng.below(3) {
                let k = *rng.pick(&["role", "content", "type", "text", "include_usage"]);
                m.insert(k.to_string(), gen_value(rng, depth + 1));
            }
            Value::Object(m)
        }
        _ => Value::Null,
    }
}

impl BodyTarget {
    fn check_ok(&mut self, r: &GenRequest) {
        check!(r.max_tokens >= 1, "max_tokens {}", r.max_tokens);
        check!(
            r.min_tokens <= r.max_tokens,
            "min {} > max {}",
            r.min_tokens,
            r.max_tokens
        );
        check!(!r.prompt.is_empty(), "an empty prompt was accepted");
        let total = r.prompt.len() as u64 + u64::from(r.max_tokens);
        check!(total <= u64::from(MAX_MODEL_LEN), "{total} tokens accepted");
        let n = r.output_tokens();
        check!(
            n >= 1 && n <= r.max_tokens,
            "output {n} of {}",
            r.max_tokens
        );
        check!(r.include_usage <= r.stream, "include_usage without stream");
        self.accepted += 1;
    }

    fn check_err(&mut self, e: &ApiError, sig: &mut Sig) {
        check!((400..500).contains(&e.status), "status {}: {e:?}", e.status);
        check!(
            e.status != 404 || e.param == Some("model"),
            "a 404 not about the model: {e:?}"
        );
        check!(!e.message.is_empty(), "an empty message: {e:?}");
        let body = e.body();
        check!(body["error"]["code"] == e.status, "code differs: {body}");
        check!(
            body["error"]["type"]
                .as_str()
                .is_some_and(|t| !t.is_empty()),
            "no type: {body}"
        );
        if let Some(p) = e.param {
            check!(FIELDS.contains(&p), "an unknown param {p:?}: {e:?}");
            *self.by_param.entry(p).or_default() += 1;
            sig.add(p);
        } else {
            sig.add("no-param");
        }
        self.refused += 1;
    }
}

impl Target for BodyTarget {
    fn name(&self) -> &'static str {
        "body"
    }

    fn seeds(&mut self) -> Vec<Vec<u8>> {
        let mut s: Vec<Vec<u8>> = SEEDS.iter().map(|b| b.as_bytes().to_vec()).collect();
        s.push(Vec::new());
        s.push(b"[]".to_vec());
        s
    }

    fn generate(&mut self, rng: &mut Rng) -> Vec<u8> {
        let seed: &&str = rng.pick(SEEDS);
        let mut v: Value = serde_json::from_str(seed).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut v {
            for _ in 0..rng.range(1, 4) {
                m.insert(rng.pick(FIELDS).to_string(), gen_value(rng, 0));
            }
        }
        v.to_string().into_bytes()
    }

    fn mutate(&mut self, rng: &mut Rng, buf: &mut Vec<u8>, corpus: &[Vec<u8>], max_len: usize) {
        let parsed = serde_json::from_slice::<Value>(buf).ok();
        match (rng.below(3), parsed) {
            (0 | 1, Some(Value::Object(mut m))) => {
                let k = rng.pick(FIELDS).to_string();
                if rng.one_in(4) {
                    m.remove(&k);
                } else if k == "messages" && rng.coin() {
                    let msg = json!({"role": gen_value(rng, 1), "content": gen_value(rng, 1)});
                    m.insert(k, json!([msg]));
                } else {
                    m.insert(k, gen_value(rng, 0));
                }
                *buf = Value::Object(m).to_string().into_bytes();
                buf.truncate(max_len);
            }
            _ => mutate(rng, buf, corpus, DICT, true, max_len),
        }
    }

    fn run(&mut self, input: &[u8]) -> Vec<u64> {
        let limits = limits();
        let mut sig = Sig::default();
        for endpoint in [Endpoint::Completions, Endpoint::Chat] {
            let (first, usage) = measure(|| parse(endpoint, input, &limits));
            let bound = ALLOC_PER_BYTE * input.len() + ALLOC_CONST;
            check!(
                usage.peak <= bound,
                "{endpoint:?}: peak {} bytes for {} input bytes (bound {bound})",
                usage.peak,
                input.len()
            );
            if !input.is_empty() {
                self.peak_ratio = self.peak_ratio.max(usage.peak as f64 / input.len() as f64);
            }
            check!(
                first == parse(endpoint, input, &limits),
                "not deterministic"
            );
            match &first {
                Ok(r) => {
                    self.check_ok(r);
                    sig.add(if r.stream { "ok-stream" } else { "ok" });
                }
                Err(e) => self.check_err(e, &mut sig),
            }
        }
        sig.finish()
    }

    fn summary(&self) -> String {
        let mut s = format!(
            "  accepted {}, refused {} (by param: {}); peak allocation at most {:.1} bytes per input byte (bound {ALLOC_PER_BYTE} + {ALLOC_CONST} bytes)\n",
            self.accepted,
            self.refused,
            self.by_param.len(),
            self.peak_ratio
        );
        let top: Vec<String> = self
            .by_param
            .iter()
            .map(|(p, n)| format!("{p} {n}"))
            .collect();
        s.push_str(&format!("  refusals naming a field: {}\n", top.join(", ")));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_parse_and_wrong_types_are_refused() {
        let mut t = BodyTarget::default();
        for s in SEEDS {
            let chat = s.contains("messages");
            let e = if chat {
                Endpoint::Chat
            } else {
                Endpoint::Completions
            };
            assert!(parse(e, s.as_bytes(), &limits()).is_ok(), "{s}");
        }
        let mut sig = Sig::default();
        let e = parse(
            Endpoint::Completions,
            br#"{"model":"m","prompt":"x","temperature":"hot"}"#,
            &limits(),
        )
        .unwrap_err();
        t.check_err(&e, &mut sig);
        assert_eq!(t.by_param.get("temperature"), Some(&1));
    }
}
