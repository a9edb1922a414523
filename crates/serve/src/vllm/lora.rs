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
//! - Bounds vLLM does not have (each of its loads reads an adapter from
//!   disk, which bounds them in practice; here a load costs only its
//!   strings): a name is at most [`MAX_LORA_NAME_BYTES`] bytes, a path at
//!   most [`MAX_LORA_PATH_BYTES`], neither holds a control character, and
//!   at most [`MAX_LORA_ADAPTERS`] adapters are loaded at once
//!   (`OpenAIServingModels.lora_requests` is an unbounded dict). A load
//!   past them is a 400 `InvalidUserInput`, a `--lora-modules` entry past
//!   them a flag error.
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

/// The longest adapter name, in bytes (a Hugging Face repo id is at most
/// 96 characters; a local name is shorter).
pub const MAX_LORA_NAME_BYTES: usize = 256;

/// The longest adapter path, in bytes (Linux's `PATH_MAX`).
pub const MAX_LORA_PATH_BYTES: usize = 4096;

/// The most adapters loaded at once, static and run-time together (vLLM's
/// `--max-cpu-loras` caches far fewer; each one's weights take memory).
pub const MAX_LORA_ADAPTERS: usize = 1024;

/// The environment switch of the load and unload endpoints.
pub const RUNTIME_UPDATING_ENV: &str = "VLLM_ALLOW_RUNTIME_LORA_UPDATING";

/// Why an adapter's name or path, or one more adapter, is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoraRefusal {
    /// The name or the path is empty or missing.
    Missing,
    /// A field is longer than its bound.
    TooLong {
        /// `lora_name` or `lora_path`.
        field: &'static str,
        /// Its bytes.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// A field holds a control character.
    NotPrintable {
        /// `lora_name` or `lora_path`.
        field: &'static str,
        /// The byte offset of the first one.
        offset: usize,
    },
    /// [`MAX_LORA_ADAPTERS`] adapters are loaded already.
    TooMany,
    /// An adapter of this name is loaded already.
    AlreadyLoaded(String),
}

impl std::fmt::Display for LoraRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoraRefusal::Missing => {
                f.write_str("Both 'lora_name' and 'lora_path' must be provided.")
            }
            LoraRefusal::TooLong {
                field,
                bytes,
                limit,
            } => write!(f, "'{field}' is {bytes} bytes, more than {limit}."),
            LoraRefusal::NotPrintable { field, offset } => {
                write!(f, "'{field}' holds a control character at byte {offset}.")
            }
            LoraRefusal::TooMany => write!(
                f,
                "{MAX_LORA_ADAPTERS} LoRA adapters are loaded, the most this server holds; \
                 unload one first."
            ),
            LoraRefusal::AlreadyLoaded(name) => {
                write!(f, "The lora adapter '{name}' has already been loaded.")
            }
        }
    }
}

impl std::error::Error for LoraRefusal {}

/// Refuses `value` of `field` if it is empty, longer than `limit` bytes
/// or holds a control character.
fn check_field(field: &'static str, value: &str, limit: usize) -> Result<(), LoraRefusal> {
    if value.is_empty() {
        return Err(LoraRefusal::Missing);
    }
    if value.len() > limit {
        return Err(LoraRefusal::TooLong {
            field,
            bytes: value.len(),
            limit,
        });
    }
    match value.char_indices().find(|(_, c)| c.is_control()) {
        Some((offset, _)) => Err(LoraRefusal::NotPrintable { field, offset }),
        None => Ok(()),
    }
}

/// Refuses an adapter name or path past the bounds.
fn check_adapter(name: &str, path: &str) -> Result<(), LoraRefusal> {
    check_field("lora_name", name, MAX_LORA_NAME_BYTES)?;
    check_field("lora_path", path, MAX_LORA_PATH_BYTES)
}

/// Why a `--lora-modules` value was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoraModuleError {
    /// Neither `name=path` nor a JSON object with string `name` and `path`.
    Form {
        /// The value's first bytes (at most 64).
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// Its name or path is past the bounds.
    Refused(LoraRefusal),
}

impl std::fmt::Display for LoraModuleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoraModuleError::Form { value, why } => write!(f, "{value:?}: {why}"),
            LoraModuleError::Refused(r) => write!(f, "{r}"),
        }
    }
}

impl std::error::Error for LoraModuleError {}

/// The first bytes of `s` (at most 64, on a character boundary), for a
/// message that must not echo a huge value.
fn excerpt(s: &str) -> String {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    if end < s.len() {
        format!("{}...", &s[..end])
    } else {
        s.to_string()
    }
}

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
/// `name=path`, or a JSON object `{"name", "path", "base_model_name"?}`;
/// its name and path within the bounds a load has.
pub fn parse_lora_module(s: &str) -> Result<LoraModule, LoraModuleError> {
    let form = |why: String| LoraModuleError::Form {
        value: excerpt(s),
        why,
    };
    let t = s.trim();
    let (name, path, base_model_name) = if t.starts_with('{') {
        let v: Value = serde_json::from_str(t).map_err(|e| form(format!("invalid JSON: {e}")))?;
        let field = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let (Some(name), Some(path)) = (field("name"), field("path")) else {
            return Err(form(
                "the JSON form needs string fields name and path".into(),
            ));
        };
        (name, path, field("base_model_name"))
    } else {
        match t.split_once('=') {
            Some((name, path)) => (name.to_string(), path.to_string(), None),
            None => return Err(form("expected name=path or a JSON object".into())),
        }
    };
    if name.is_empty() || path.is_empty() {
        return Err(form("the name and the path must not be empty".into()));
    }
    check_adapter(&name, &path).map_err(LoraModuleError::Refused)?;
    if let Some(b) = base_model_name.as_ref().filter(|b| !b.is_empty()) {
        check_field("base_model_name", b, MAX_LORA_NAME_BYTES).map_err(LoraModuleError::Refused)?;
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

/// The adapters of a server of `base` with LoRA configured as `lora`
/// (none: LoRA off), the gauges told its `max_loras`. Both serve modes
/// build theirs here: one `serve` process and an engine process
/// (`serve --engine`) serve the same adapters from the same flags.
pub(crate) fn registry(
    base: &str,
    lora: Option<LoraConfig>,
    metrics: &crate::metrics::Metrics,
) -> Result<LoraRegistry, crate::error::ServeError> {
    match lora {
        Some(l) => {
            metrics.set_max_lora(l.max_loras);
            LoraRegistry::new(base, l).map_err(crate::error::ServeError::Lora)
        }
        None => Ok(LoraRegistry::default()),
    }
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
    /// loaded (a duplicate name is refused, as `init_static_loras` raises,
    /// and so are modules past the bounds of a load).
    pub fn new(base: &str, config: LoraConfig) -> Result<Self, String> {
        if config.modules.len() > MAX_LORA_ADAPTERS {
            return Err(format!(
                "{} adapters, more than the {MAX_LORA_ADAPTERS} a server holds",
                config.modules.len()
            ));
        }
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
        let refuse = |r: LoraRefusal| invalid(r.to_string());
        check_adapter(name, path).map_err(refuse)?;
        let mut inner = self
            .inner
            .lock()
            .map_err(|_| crate::http::error::failure("the adapter table is poisoned"))?;
        if inner.loaded.iter().any(|l| l.adapter.name == name) {
            return Err(refuse(LoraRefusal::AlreadyLoaded(name.to_string())));
        }
        if inner.loaded.len() >= MAX_LORA_ADAPTERS {
            return Err(refuse(LoraRefusal::TooMany));
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
    fn names_paths_and_the_adapter_count_are_bounded() {
        let r = reg(&[]);
        let load = |name: &str, path: &str| r.load(&json!({"lora_name": name, "lora_path": path}));
        let long_name = "n".repeat(MAX_LORA_NAME_BYTES + 1);
        let e = load(&long_name, "/p").unwrap_err();
        assert_eq!((e.status, e.kind.name()), (400, "InvalidUserInput"));
        assert_eq!(e.message, "'lora_name' is 257 bytes, more than 256.");
        let e = load("n", &"p".repeat(MAX_LORA_PATH_BYTES + 1)).unwrap_err();
        assert_eq!(e.message, "'lora_path' is 4097 bytes, more than 4096.");
        let e = load("a\nb", "/p").unwrap_err();
        assert_eq!(
            e.message,
            "'lora_name' holds a control character at byte 1."
        );
        // At the bounds is fine.
        load(
            &"n".repeat(MAX_LORA_NAME_BYTES),
            &"p".repeat(MAX_LORA_PATH_BYTES),
        )
        .unwrap();
        for i in 1..MAX_LORA_ADAPTERS {
            load(&format!("a{i}"), "/p").unwrap();
        }
        let e = load("one-more", "/p").unwrap_err();
        assert_eq!((e.status, e.kind.name()), (400, "InvalidUserInput"));
        assert!(
            e.message.contains("1024 LoRA adapters are loaded"),
            "{}",
            e.message
        );
        // Unloading one makes room again.
        r.unload(&json!({"lora_name": "a1"})).unwrap();
        load("one-more", "/p").unwrap();
        assert_eq!(r.cards("base", 0, "vllm").len(), MAX_LORA_ADAPTERS);
    }

    #[test]
    fn lora_modules_past_the_bounds_are_flag_errors() {
        let long = format!("{}=/p", "n".repeat(MAX_LORA_NAME_BYTES + 1));
        assert_eq!(
            parse_lora_module(&long),
            Err(LoraModuleError::Refused(LoraRefusal::TooLong {
                field: "lora_name",
                bytes: 257,
                limit: 256
            }))
        );
        let path = format!("n={}", "p".repeat(MAX_LORA_PATH_BYTES + 1));
        assert!(matches!(
            parse_lora_module(&path),
            Err(LoraModuleError::Refused(LoraRefusal::TooLong {
                field: "lora_path",
                ..
            }))
        ));
        // A malformed value is quoted by its first bytes only.
        let e = parse_lora_module(&"x".repeat(10_000))
            .unwrap_err()
            .to_string();
        assert!(e.len() < 200 && e.contains("expected name=path"), "{e}");
        let many = LoraConfig {
            modules: (0..=MAX_LORA_ADAPTERS)
                .map(|i| parse_lora_module(&format!("m{i}=/p")).unwrap())
                .collect(),
            ..LoraConfig::default()
        };
        let e = LoraRegistry::new("base", many).unwrap_err();
        assert_eq!(e, "1025 adapters, more than the 1024 a server holds");
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
