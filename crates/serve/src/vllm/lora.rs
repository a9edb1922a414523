//! LoRA adapters as vLLM's OpenAI server keeps them
//! (`vllm/entrypoints/openai/serving_models.py`, `OpenAIServingModels`):
//! the `--lora-modules` given at start (`init_static_loras`, each loaded as
//! through the load endpoint), `POST /v1/load_lora_adapter {lora_name,
//! lora_path}` and `POST /v1/unload_lora_adapter {lora_name}` (routed only
//! when `VLLM_ALLOW_RUNTIME_LORA_UPDATING` is true, as
//! `vllm/entrypoints/openai/api_server.py` registers them), and the
//! adapters' cards in `/v1/models` (`show_available_models`).
//!
//! - Every load, static or at run time, takes the next `lora_int_id` from
//!   one counter starting at 1 (`lora_id_counter.inc(1)`); ids are never
//!   reused after an unload.
//! - Answers: `Success: LoRA adapter 'NAME' added successfully.` /
//!   `... removed successfully.` as plain text with 200; a missing name or
//!   path, or a name already loaded, is a 400 of type `InvalidUserInput`;
//!   unloading an unknown name is a 404 `NotFoundError`
//!   (`_check_load_lora_adapter_request`,
//!   `_check_unload_lora_adapter_request`).
//! - A card is `{id: name, root: path, parent: base_model_name or the
//!   served model}`; cards follow the base model's, in load order.
//! - The mock reads no adapter file: a path is only a name, and
//!   `--max-lora-rank` is recorded but bounds nothing (vLLM checks an
//!   adapter's rank against it when it loads the weights).

use handoff_core::LoraAdapter;
use handoff_openai::{ApiError, ErrorKind};
use serde_json::{json, Value};
use std::sync::Mutex;

/// vLLM's default `--max-loras`.
pub const DEFAULT_MAX_LORAS: u32 = 1;

/// vLLM's default `--max-lora-rank`.
pub const DEFAULT_MAX_LORA_RANK: u32 = 16;

/// The environment switch of the load and unload endpoints.
pub const RUNTIME_UPDATING_ENV: &str = "VLLM_ALLOW_RUNTIME_LORA_UPDATING";

/// One `--lora-modules` entry (`LoRAModulePath`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoraModule {
    /// `name`: what requests send as `model`.
    pub name: String,
    /// `path`: the adapter's weights (only shown here).
    pub path: String,
    /// `base_model_name`: the card's `parent`, when it names the served
    /// model.
    pub base_model_name: Option<String>,
}

/// Parses one `--lora-modules` value as vLLM's `LoRAParserAction` does:
/// `name=path`, or a JSON object `{"name", "path", "base_model_name"?}`.
pub fn parse_lora_module(s: &str) -> Result<LoraModule, String> {
    let t = s.trim();
    if t.starts_with('{') {
        let v: Value = serde_json::from_str(t).map_err(|e| format!("{s:?}: invalid JSON: {e}"))?;
        let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let (Some(name), Some(path)) = (field("name"), field("path")) else {
            return Err(format!(
                "{s:?}: the JSON form needs string fields name and path"
            ));
        };
        return module(name, path, field("base_model_name"), s);
    }
    match t.split_once('=') {
        Some((name, path)) => module(name.to_string(), path.to_string(), None, s),
        None => Err(format!("{s:?}: expected name=path or a JSON object")),
    }
}

fn module(
    name: String,
    path: String,
    base_model_name: Option<String>,
    s: &str,
) -> Result<LoraModule, String> {
    if name.is_empty() || path.is_empty() {
        return Err(format!("{s:?}: the name and the path must not be empty"));
    }
    Ok(LoraModule {
        name,
        path,
        base_model_name,
    })
}

/// Whether `VLLM_ALLOW_RUNTIME_LORA_UPDATING` holds a value vLLM reads as
/// true (`vllm/envs.py`: `"1"` or `"true"`, case-insensitive).
pub fn runtime_updating_from(value: Option<&str>) -> bool {
    value.is_some_and(|v| {
        let v = v.trim();
        v == "1" || v.eq_ignore_ascii_case("true")
    })
}

/// How the server serves LoRA (`serve --lora-modules`, `--max-loras`,
/// `--max-lora-rank`, the environment switch).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoraConfig {
    /// Adapters loaded at start, in order.
    pub modules: Vec<LoraModule>,
    /// Adapters per scheduled batch (vLLM `max_loras`).
    pub max_loras: u32,
    /// vLLM `max_lora_rank` (recorded only).
    pub max_lora_rank: u32,
    /// Whether the load and unload endpoints are routed.
    pub runtime_updating: bool,
}

impl Default for LoraConfig {
    fn default() -> Self {
        LoraConfig {
            modules: Vec::new(),
            max_loras: DEFAULT_MAX_LORAS,
            max_lora_rank: DEFAULT_MAX_LORA_RANK,
            runtime_updating: false,
        }
    }
}

impl LoraConfig {
    /// Whether LoRA is served at all (vLLM's `--enable-lora`): adapters at
    /// start, or loading them at run time allowed.
    pub fn enabled(&self) -> bool {
        !self.modules.is_empty() || self.runtime_updating
    }
}

#[derive(Clone, Debug)]
struct Loaded {
    adapter: LoraAdapter,
    path: String,
    parent: Option<String>,
}

#[derive(Debug, Default)]
struct Inner {
    loaded: Vec<Loaded>,
    /// The last `lora_int_id` handed out.
    last_id: u32,
}

/// The adapters a server knows, shared by every handler.
#[derive(Debug, Default)]
pub struct LoraRegistry {
    config: LoraConfig,
    inner: Mutex<Inner>,
}

fn invalid(message: String) -> ApiError {
    ApiError {
        status: 400,
        message,
        kind: ErrorKind::InvalidUserInput,
        param: None,
    }
}

impl LoraRegistry {
    /// The registry of a server serving `base`, with `config`'s modules
    /// loaded (a duplicate name is refused, as `init_static_loras` raises).
    pub fn new(base: &str, config: LoraConfig) -> Result<Self, String> {
        let r = LoraRegistry {
            config: config.clone(),
            inner: Mutex::new(Inner::default()),
        };
        for m in &config.modules {
            let parent = m.base_model_name.clone().filter(|b| b == base);
            r.insert(&m.name, &m.path, parent).map_err(|e| e.message)?;
        }
        Ok(r)
    }

    /// How the server serves LoRA.
    pub fn config(&self) -> &LoraConfig {
        &self.config
    }

    /// The adapter `model` names, if one is loaded.
    pub fn resolve(&self, model: &str) -> Option<LoraAdapter> {
        let inner = self.inner.lock().ok()?;
        inner
            .loaded
            .iter()
            .find(|l| l.adapter.name == model)
            .map(|l| l.adapter.clone())
    }

    fn insert(&self, name: &str, path: &str, parent: Option<String>) -> Result<String, ApiError> {
        if name.is_empty() || path.is_empty() {
            return Err(invalid(
                "Both 'lora_name' and 'lora_path' must be provided.".into(),
            ));
        }
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| crate::http::error::failure("the adapter table is poisoned"))?;
        if inner.loaded.iter().any(|l| l.adapter.name == name) {
            return Err(invalid(format!(
                "The lora adapter '{name}' has already been loaded."
            )));
        }
        inner.last_id = inner.last_id.saturating_add(1);
        let id = inner.last_id;
        inner.loaded.push(Loaded {
            adapter: LoraAdapter {
                id,
                name: name.to_string(),
            },
            path: path.to_string(),
            parent,
        });
        Ok(format!(
            "Success: LoRA adapter '{name}' added successfully."
        ))
    }

    /// `POST /v1/load_lora_adapter` with `body`.
    pub fn load(&self, body: &Value) -> Result<String, ApiError> {
        let s = |k: &str| body.get(k).and_then(Value::as_str).unwrap_or_default();
        self.insert(s("lora_name"), s("lora_path"), None)
    }

    /// `POST /v1/unload_lora_adapter` with `body`.
    pub fn unload(&self, body: &Value) -> Result<String, ApiError> {
        let name = body
            .get("lora_name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let by_id = body.get("lora_int_id").is_some_and(|v| !v.is_null());
        if name.is_empty() && !by_id {
            return Err(invalid(
                "either 'lora_name' and 'lora_int_id' needs to be provided.".into(),
            ));
        }
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| crate::http::error::failure("the adapter table is poisoned"))?;
        let before = inner.loaded.len();
        inner.loaded.retain(|l| l.adapter.name != name);
        if inner.loaded.len() == before {
            return Err(ApiError {
                status: 404,
                message: format!("The lora adapter '{name}' cannot be found."),
                kind: ErrorKind::LoraNotFound,
                param: None,
            });
        }
        Ok(format!(
            "Success: LoRA adapter '{name}' removed successfully."
        ))
    }

    /// The adapters' `/v1/models` cards, in load order, for a server
    /// serving `base`.
    pub fn cards(&self, base: &str, created: u64, owned_by: &str) -> Vec<Value> {
        let Ok(inner) = self.inner.lock() else {
            return Vec::new();
        };
        inner
            .loaded
            .iter()
            .map(|l| {
                json!({
                    "id": l.adapter.name,
                    "object": "model",
                    "created": created,
                    "owned_by": owned_by,
                    "root": l.path,
                    "parent": l.parent.as_deref().unwrap_or(base),
                    "max_model_len": Value::Null,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(modules: &[&str]) -> LoraRegistry {
        let config = LoraConfig {
            modules: modules
                .iter()
                .map(|m| parse_lora_module(m).unwrap())
                .collect(),
            runtime_updating: true,
            ..LoraConfig::default()
        };
        LoraRegistry::new("base", config).unwrap()
    }

    #[test]
    fn modules_parse_in_both_of_vllms_forms() {
        assert_eq!(
            parse_lora_module("sql=/a/b").unwrap(),
            LoraModule {
                name: "sql".into(),
                path: "/a/b".into(),
                base_model_name: None
            }
        );
        let j = parse_lora_module(r#"{"name": "x", "path": "/p", "base_model_name": "base"}"#);
        assert_eq!(j.unwrap().base_model_name.as_deref(), Some("base"));
        for bad in ["sql", "=p", "n=", r#"{"name": "x"}"#, "{nope"] {
            assert!(parse_lora_module(bad).is_err(), "{bad}");
        }
        assert!(runtime_updating_from(Some("True")));
        assert!(runtime_updating_from(Some("1")));
        assert!(!runtime_updating_from(Some("0")));
        assert!(!runtime_updating_from(None));
    }

    #[test]
    fn ids_count_up_across_static_and_runtime_loads_and_are_not_reused() {
        let r = reg(&["a=/a", "b=/b"]);
        assert_eq!(r.resolve("a").map(|l| l.id), Some(1));
        assert_eq!(r.resolve("b").map(|l| l.id), Some(2));
        assert_eq!(
            r.load(&json!({"lora_name": "c", "lora_path": "/c"})),
            Ok("Success: LoRA adapter 'c' added successfully.".into())
        );
        assert_eq!(r.resolve("c").map(|l| l.id), Some(3));
        r.unload(&json!({"lora_name": "c"})).unwrap();
        assert_eq!(r.resolve("c"), None);
        r.load(&json!({"lora_name": "c", "lora_path": "/c"}))
            .unwrap();
        assert_eq!(r.resolve("c").map(|l| l.id), Some(4));
        assert_eq!(r.resolve("base"), None);
    }

    #[test]
    fn errors_answer_as_vllm() {
        let r = reg(&["a=/a"]);
        let dup = r
            .load(&json!({"lora_name": "a", "lora_path": "/x"}))
            .unwrap_err();
        assert_eq!((dup.status, dup.kind.name()), (400, "InvalidUserInput"));
        assert_eq!(dup.message, "The lora adapter 'a' has already been loaded.");
        let missing = r.load(&json!({"lora_name": "z"})).unwrap_err();
        assert_eq!(
            missing.message,
            "Both 'lora_name' and 'lora_path' must be provided."
        );
        let unknown = r.unload(&json!({"lora_name": "z"})).unwrap_err();
        assert_eq!(
            (unknown.status, unknown.kind.name()),
            (404, "NotFoundError")
        );
        assert_eq!(unknown.message, "The lora adapter 'z' cannot be found.");
        assert_eq!(r.unload(&json!({})).unwrap_err().status, 400);
        assert!(LoraRegistry::new(
            "base",
            LoraConfig {
                modules: vec![parse_lora_module("a=/a").unwrap(); 2],
                ..LoraConfig::default()
            }
        )
        .is_err());
    }

    #[test]
    fn cards_name_the_parent_and_root() {
        let r = reg(&[
            "a=/a",
            r#"{"name": "b", "path": "/b", "base_model_name": "other"}"#,
        ]);
        let c = r.cards("base", 7, "vllm");
        assert_eq!(c.len(), 2);
        assert_eq!(
            (c[0]["id"].as_str(), c[0]["root"].as_str()),
            (Some("a"), Some("/a"))
        );
        assert_eq!(c[0]["parent"], "base");
        // A base_model_name that is not the served model is ignored, as
        // `load_lora_adapter` keeps it only when `is_base_model`.
        assert_eq!(c[1]["parent"], "base");
    }
}
