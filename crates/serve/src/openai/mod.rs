//! The OpenAI routes' bodies, from [`handoff_openai`] (the parser, its
//! errors, sampling, prompt token ids, the tokenizer; no async runtime),
//! re-exported under the paths the edge names them by, and vLLM's render
//! and tokenize endpoints, which answer HTTP here.

pub(crate) mod render;
pub(crate) mod tokenize;

pub(crate) use handoff_openai::{chat_text, encode, json_object, prompt, tokenizer};
pub use handoff_openai::{
    parse, tokenize, ApiError, EncodeError, Endpoint, ErrorKind, GenRequest, Meta, PromptKind,
    Tokenizer, TokenizerFileError, Usage, DEFAULT_MAX_TOKENS,
};

use crate::vllm::lora::LoraRegistry;

/// What the server checks requests against: [`handoff_openai::Limits`]
/// with the server's adapter table.
pub type Limits = handoff_openai::Limits<LoraRegistry>;

impl handoff_openai::Adapters for LoraRegistry {
    fn resolve(&self, model: &str) -> Option<handoff_core::LoraAdapter> {
        LoraRegistry::resolve(self, model)
    }
}

impl From<TokenizerFileError> for crate::ServeError {
    fn from(e: TokenizerFileError) -> Self {
        crate::ServeError::Tokenizer {
            path: e.path,
            source: e.source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vllm::lora::{LoraConfig, LoraModule};
    use std::sync::Arc;

    /// A request's `model` resolves through the server's adapter table.
    #[test]
    fn the_lora_registry_resolves_models() {
        let config = LoraConfig {
            modules: vec![LoraModule {
                name: "sql".into(),
                path: "/a/sql".into(),
                base_model_name: None,
            }],
            ..LoraConfig::default()
        };
        let limits = Limits {
            model: "m".into(),
            max_model_len: 100,
            tokenizer: Tokenizer::Builtin,
            loras: Arc::new(LoraRegistry::new("m", config).expect("one module")),
        };
        let body = |m: &str| format!(r#"{{"model":"{m}","prompt":"hi"}}"#);
        let r = parse(Endpoint::Completions, body("sql").as_bytes(), &limits).expect("adapter");
        assert_eq!(r.lora.map(|a| a.name), Some("sql".to_string()));
        let e = parse(Endpoint::Completions, body("x").as_bytes(), &limits).expect_err("unknown");
        assert_eq!((e.status, e.param), (404, Some("model")));
    }

    /// A tokenizer file that cannot be loaded reads as the server's error
    /// as it did: the flag, the file, why.
    #[test]
    fn a_tokenizer_file_error_is_the_servers() {
        let path = std::env::temp_dir().join("handoff-no-such-tokenizer.json");
        let e = Tokenizer::from_file(&path).expect_err("no such file");
        let shown = e.to_string();
        let served = crate::ServeError::from(e);
        assert!(matches!(served, crate::ServeError::Tokenizer { .. }));
        assert_eq!(served.to_string(), shown);
        assert!(
            shown.starts_with("--tokenizer ") && shown.contains("handoff-no-such-tokenizer.json")
        );
    }
}
