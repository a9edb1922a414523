//! The errors of the HTTP edge, as every route and the connection loop
//! (`http::accept`) answer them: an [`ApiError`] as its status and
//! OpenAI-style JSON body, the engine's failures as 503s, and
//! `Connection: close` when the rest of a body may still be on the wire.
//! It imports nothing of this crate, so every layer may answer with it.

use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use handoff_openai::{ApiError, ErrorKind};
use std::time::Duration;

/// Largest request body accepted.
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// A body that did not arrive within its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTimeout(pub Duration);

impl std::fmt::Display for BodyTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the request body did not arrive within {} s",
            self.0.as_secs_f64()
        )
    }
}

impl std::error::Error for BodyTimeout {}

/// `e` as its status and JSON body.
pub(crate) fn error(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, Json(e.body())).into_response()
}

/// A request the engine failed (or that never reached it), as a 503.
pub(crate) fn failure(reason: &str) -> ApiError {
    ApiError {
        status: 503,
        message: format!("the request failed in the engine: {reason}"),
        kind: ErrorKind::Unavailable,
        param: None,
    }
}

/// The answer to a body that could not be read (too large, cut short, or
/// late: a 408 naming the body timeout):
/// its error, and `Connection: close`, because the rest of the body may
/// still be on the connection and would be read as the next request.
pub(crate) fn body_error_response(r: &BytesRejection) -> Response {
    closing(error(&body_error(r)))
}

/// The [`BodyTimeout`] behind `r`, if the body came too late.
fn timed_out(r: &BytesRejection) -> Option<BodyTimeout> {
    let mut e: Option<&(dyn std::error::Error + 'static)> = Some(r);
    while let Some(x) = e {
        if let Some(t) = x.downcast_ref::<BodyTimeout>() {
            return Some(*t);
        }
        e = x.source();
    }
    None
}

/// The 413 for a request announcing a `len`-byte body, over
/// [`MAX_BODY_BYTES`] (`http::accept` sends it before reading any of
/// the body), with `Connection: close`: the body is left unread.
pub(crate) fn announced_too_large(len: u64) -> Response {
    let e = ApiError {
        status: 413,
        message: format!(
            "the body is {len} bytes (Content-Length), over the limit of {MAX_BODY_BYTES} bytes"
        ),
        kind: ErrorKind::TooLarge,
        param: None,
    };
    closing(error(&e))
}

fn closing(mut res: Response) -> Response {
    res.headers_mut().insert(
        axum::http::header::CONNECTION,
        axum::http::HeaderValue::from_static("close"),
    );
    res
}

fn body_error(r: &BytesRejection) -> ApiError {
    if let Some(t) = timed_out(r) {
        return ApiError {
            status: 408,
            message: t.to_string(),
            kind: ErrorKind::InvalidRequest,
            param: None,
        };
    }
    let status = r.status().as_u16();
    ApiError {
        status: if (400..500).contains(&status) {
            status
        } else {
            400
        },
        message: format!("could not read the body: {r} (limit {MAX_BODY_BYTES} bytes)"),
        kind: if status == 413 {
            ErrorKind::TooLarge
        } else {
            ErrorKind::InvalidRequest
        },
        param: None,
    }
}
