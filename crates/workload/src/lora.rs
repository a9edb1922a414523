//! The optional `lora_name` of a trace record: the LoRA adapter a request
//! runs on, under the key vLLM's KV events (`BlockStored.lora_name`,
//! `vllm/distributed/kv_events.py`) and Dynamo's router events use for it.
//! `null` or absent runs the request on the base model.
//!
//! A reader numbers the adapters it meets from 1 in first-seen order
//! (vLLM's `lora_int_id`, which is positive); the block hashes key on the
//! name ([`handoff_core::LoraAdapter::hash_salt`]), so two traces that name
//! the same adapters share their blocks whatever the numbering.

use crate::error::Problem;
use crate::record::Scalar;
use handoff_core::LoraAdapter;
use std::collections::HashMap;

/// The longest adapter name accepted, in bytes.
pub use crate::error::MAX_ADAPTER_NAME_BYTES as MAX_NAME_BYTES;

/// The adapter name a `lora_name` value gives: `None` for absent or `null`,
/// the name for a non-empty string of at most [`MAX_NAME_BYTES`] bytes,
/// [`Problem::ExpectedAdapterName`] for anything else.
pub(crate) fn name(v: Option<&Scalar>) -> Result<Option<&str>, Problem> {
    match v {
        None | Some(Scalar::Null) => Ok(None),
        Some(Scalar::Str(s)) if !s.is_empty() && s.len() <= MAX_NAME_BYTES => Ok(Some(s)),
        Some(_) => Err(Problem::ExpectedAdapterName),
    }
}

/// The adapters a reader has met, numbered from 1 in first-seen order.
#[derive(Clone, Debug, Default)]
pub struct LoraNames {
    ids: HashMap<String, u32>,
}

impl LoraNames {
    /// The adapter called `name`, numbered on first sight.
    pub fn adapter(&mut self, name: String) -> LoraAdapter {
        let next = u32::try_from(self.ids.len() + 1).unwrap_or(u32::MAX);
        let id = *self.ids.entry(name.clone()).or_insert(next);
        LoraAdapter { id, name }
    }
}

#[cfg(test)]
mod tests {
    use crate::{Problem, ReaderOptions, TraceField, TraceReader};

    fn read(text: &str) -> Vec<Result<crate::TraceItem, crate::TraceError>> {
        TraceReader::new(text.as_bytes(), ReaderOptions::new("t.jsonl")).collect()
    }

    #[test]
    fn lora_name_names_the_adapter_numbered_in_first_seen_order() {
        let got = read(concat!(
            r#"{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1], "lora_name": "b"}"#,
            "\n",
            r#"{"timestamp": 1, "input_length": 512, "output_length": 1, "hash_ids": [1]}"#,
            "\n",
            r#"{"timestamp": 2, "input_length": 512, "output_length": 1, "hash_ids": [1], "lora_name": "a"}"#,
            "\n",
            r#"{"timestamp": 3, "input_length": 512, "output_length": 1, "hash_ids": [1], "lora_name": "b"}"#,
            "\n",
            r#"{"timestamp": 4, "input_length": 512, "output_length": 1, "hash_ids": [1], "lora_name": null}"#,
        ));
        let loras: Vec<_> = got
            .into_iter()
            .map(|r| r.unwrap().request.lora.map(|l| (l.id, l.name)))
            .collect();
        let s = |id, n: &str| Some((id, n.to_string()));
        assert_eq!(loras, vec![s(1, "b"), None, s(2, "a"), s(1, "b"), None]);
    }

    #[test]
    fn the_writer_writes_lora_name_back() {
        let text = r#"{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [1], "lora_name": "q\"x"}"#;
        let items: Vec<_> = read(text).into_iter().map(Result::unwrap).collect();
        let mut w = crate::TraceWriter::new(Vec::new());
        w.write(&items[0]).unwrap();
        let out = String::from_utf8(w.into_inner().unwrap()).unwrap();
        assert_eq!(out.trim_end(), text);
    }

    #[test]
    fn a_bad_lora_name_is_a_located_error() {
        for bad in [r#""""#, "7", "[]", &format!("\"{}\"", "x".repeat(257))] {
            let line = format!(
                r#"{{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [], "lora_name": {bad}}}"#
            );
            let got = read(&line);
            let e = got[0].as_ref().expect_err(bad);
            assert_eq!(e.field(), TraceField::LoraName, "{bad}");
            assert_eq!(e.problem(), &Problem::ExpectedAdapterName);
            assert!(e.to_string().contains("lora_name"), "{e}");
        }
    }
}
