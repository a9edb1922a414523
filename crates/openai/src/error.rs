//! The API error: what a request did wrong, typed ([`ErrorKind`]), with the
//! field at fault; its JSON body is OpenAI's `{"error": {...}}`. The HTTP
//! response around it is the server's.

use serde_json::{json, Value};

/// An error as the OpenAI API returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status (4xx).
    pub status: u16,
    /// What is wrong.
    pub message: String,
    /// OpenAI's error type.
    pub kind: ErrorKind,
    /// The offending field, if one.
    pub param: Option<&'static str>,
}

/// OpenAI's error `type`s used here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// A malformed or out-of-range request.
    InvalidRequest,
    /// An unknown model or route.
    NotFound,
    /// The body is too large.
    TooLarge,
    /// The engine failed the request or is gone (a 5xx).
    Unavailable,
    /// The request failed inside a worker (a 500, as SGLang answers an
    /// aborted request).
    Internal,
    /// vLLM's `InvalidUserInput` (a bad LoRA load or unload request,
    /// `vllm/entrypoints/openai/serving_models.py`).
    InvalidUserInput,
    /// vLLM's `NotFoundError` (unloading an adapter not loaded).
    LoraNotFound,
}

impl ErrorKind {
    /// The error `type` of the body.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest => "invalid_request_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::TooLarge => "invalid_request_error",
            ErrorKind::Unavailable => "service_unavailable_error",
            ErrorKind::Internal => "internal_server_error",
            ErrorKind::InvalidUserInput => "InvalidUserInput",
            ErrorKind::LoraNotFound => "NotFoundError",
        }
    }
}

impl ApiError {
    /// A 400 about `param`.
    pub fn invalid(param: Option<&'static str>, message: impl Into<String>) -> Self {
        ApiError {
            status: 400,
            message: message.into(),
            kind: ErrorKind::InvalidRequest,
            param,
        }
    }

    /// A 404.
    pub fn not_found(param: Option<&'static str>, message: impl Into<String>) -> Self {
        ApiError {
            status: 404,
            message: message.into(),
            kind: ErrorKind::NotFound,
            param,
        }
    }

    /// A 405: the route exists, not for this method (vLLM's FastAPI front
    /// answers `{"detail": "Method Not Allowed"}`; this keeps the OpenAI
    /// error shape every other error here has).
    pub fn method_not_allowed() -> Self {
        ApiError {
            status: 405,
            message: "method not allowed on this route".into(),
            kind: ErrorKind::InvalidRequest,
            param: None,
        }
    }

    /// The response body: `{"error": {message, type, param, code}}`.
    pub fn body(&self) -> Value {
        json!({
            "error": {
                "message": self.message,
                "type": self.kind.name(),
                "param": self.param,
                "code": self.status,
            }
        })
    }
}
