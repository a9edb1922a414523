//! `POST /admin/scale` (`serve --admin`): adds or drains workers of the
//! in-process deployment, as a planner or an operator would.
//!
//! The body is one JSON object:
//!
//! - `{"action": "up", "pool": "prefill"|"decode"}`: the lowest absent (or
//!   gone) worker of the pool starts `provisioning` and becomes routable
//!   after the startup delay (`--startup-delay`);
//! - `{"action": "drain", "worker": N}`: a `ready` worker stops getting
//!   new work, finishes what it holds and is `gone` once it is empty;
//! - `{"action": "remove", "worker": N}`: the worker is `gone` now, as a
//!   kill (its handoffs unwind, its requests migrate or fail).
//!
//! `N` is the worker id `/debug/workers` shows. The answer is `200` with
//! the worker moved, its phase before and after and, for `up`, the model
//! time it becomes ready; `400` names the field at fault (bad JSON, a
//! missing, unknown or ill-typed field, an unknown action or pool), `404`
//! an unknown worker, `409` a pool at its ceiling (`--max-prefill`,
//! `--max-decode`) or a worker in the wrong phase, `413` a body over
//! [`ADMIN_MAX_BODY`] bytes, `405` another method. Without `--admin` the
//! route does not exist (`404`). The checks and the engine's side are
//! [`crate::director::fleet`].

use crate::director::driver::{Cmd, ScaleAnswer};
use crate::director::fleet::{ScaleDone, ScaleOp, ScaleRefused};
use crate::http::error::error;
use crate::http::state::AppState;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use handoff_core::WorkerId;
use handoff_engine::scale::ScalePool;
use handoff_openai::{ApiError, ErrorKind};
use serde_json::{json, Value};
use std::sync::Arc;

/// Largest admin body accepted: the largest valid one is under 100 bytes.
pub const ADMIN_MAX_BODY: usize = 4096;

/// The admin routes over `state`.
pub(crate) fn routes(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/admin/scale", post(scale))
        .method_not_allowed_fallback(|| async { error(&ApiError::method_not_allowed()) })
        .layer(axum::extract::DefaultBodyLimit::max(ADMIN_MAX_BODY))
        .with_state(state)
}

fn invalid(param: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(Some(param), message)
}

fn status(status: u16, param: Option<&'static str>, message: String) -> ApiError {
    ApiError {
        status,
        message,
        kind: if status == 503 {
            ErrorKind::Unavailable
        } else {
            ErrorKind::InvalidRequest
        },
        param,
    }
}

/// The field `name` of `o` as a string, if present.
fn text<'a>(
    o: &'a serde_json::Map<String, Value>,
    name: &'static str,
) -> Result<&'a str, ApiError> {
    match o.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(invalid(name, format!("`{name}` must be a string"))),
        None => Err(invalid(name, format!("`{name}` is required"))),
    }
}

/// The scale operation `body` asks for, or the 400 naming its field.
pub(crate) fn parse(body: &[u8]) -> Result<ScaleOp, ApiError> {
    let v: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::invalid(
            None,
            format!(
                "the body is not JSON: {e} (line {}, column {})",
                e.line(),
                e.column()
            ),
        )
    })?;
    let Value::Object(o) = v else {
        return Err(ApiError::invalid(None, "the body must be a JSON object"));
    };
    if let Some(k) = o
        .keys()
        .find(|k| !matches!(k.as_str(), "action" | "pool" | "worker"))
    {
        return Err(ApiError::invalid(
            None,
            format!(
                "unknown field `{}`: expected action, pool, worker",
                k.chars().take(64).collect::<String>()
            ),
        ));
    }
    let action = text(&o, "action")?;
    let worker = || -> Result<WorkerId, ApiError> {
        if o.contains_key("pool") {
            return Err(invalid(
                "pool",
                format!("`{action}` names a worker, not a pool"),
            ));
        }
        match o.get("worker") {
            Some(Value::Number(n)) => n
                .as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .map(WorkerId)
                .ok_or_else(|| invalid("worker", "`worker` must be a worker id (0..2^32)")),
            Some(_) => Err(invalid("worker", "`worker` must be a worker id (a number)")),
            None => Err(invalid(
                "worker",
                format!("`worker` is required for `{action}`"),
            )),
        }
    };
    match action {
        "up" => {
            if o.contains_key("worker") {
                return Err(invalid(
                    "worker",
                    "`up` names a pool; the lowest absent worker of it is provisioned",
                ));
            }
            let pool = text(&o, "pool")?;
            let pool = ScalePool::from_name(pool)
                .ok_or_else(|| invalid("pool", "`pool` must be prefill or decode"))?;
            Ok(ScaleOp::Up(pool))
        }
        "drain" => Ok(ScaleOp::Drain(worker()?)),
        "remove" => Ok(ScaleOp::Remove(worker()?)),
        _ => Err(invalid("action", "`action` must be up, drain or remove")),
    }
}

/// A refusal as its status: 404 an unknown worker, 409 a conflict with
/// the fleet's state, 400 a pool the deployment does not have.
fn refused(r: &ScaleRefused) -> ApiError {
    let (code, param) = match r {
        ScaleRefused::AtCeiling { .. } => (409, Some("pool")),
        ScaleRefused::NoPool(_) => (400, Some("pool")),
        ScaleRefused::NoSuchWorker { .. } => (404, Some("worker")),
        ScaleRefused::WrongPhase { .. } => (409, Some("worker")),
    };
    status(code, param, r.to_string())
}

fn done(d: &ScaleDone) -> Value {
    json!({
        "worker": d.worker.0,
        "pool": d.pool.name(),
        "from": d.from.name(),
        "state": d.to.name(),
        "ready_at_model_s": d.ready_at.map(|t| t.as_nanos() as f64 / 1e9),
    })
}

async fn scale(State(s): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(r) if r.status().as_u16() == 413 => {
            let e = ApiError {
                status: 413,
                message: format!("the admin body is over {ADMIN_MAX_BODY} bytes"),
                kind: ErrorKind::TooLarge,
                param: None,
            };
            return error(&e);
        }
        Err(r) => return crate::http::error::body_error_response(&r),
    };
    let op = match parse(&body) {
        Ok(op) => op,
        Err(e) => return error(&e),
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<ScaleAnswer>();
    let gone = || error(&status(503, None, "the engine has stopped".into()));
    if s.tx.send(Cmd::Scale { op, reply: tx }).is_err() {
        return gone();
    }
    match rx.await {
        Ok(Ok(d)) => Json(done(&d)).into_response(),
        Ok(Err(r)) => error(&refused(&r)),
        Err(_) => gone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(body: &str) -> (u16, Option<&'static str>) {
        let e = parse(body.as_bytes()).expect_err(body);
        (e.status, e.param)
    }

    #[test]
    fn parses_the_three_actions() {
        assert_eq!(
            parse(br#"{"action":"up","pool":"decode"}"#),
            Ok(ScaleOp::Up(ScalePool::Decode))
        );
        assert_eq!(
            parse(br#"{"worker":3,"action":"drain"}"#),
            Ok(ScaleOp::Drain(WorkerId(3)))
        );
        assert_eq!(
            parse(br#"{"action":"remove","worker":0}"#),
            Ok(ScaleOp::Remove(WorkerId(0)))
        );
    }

    #[test]
    fn every_bad_body_is_a_400_naming_its_field() {
        assert_eq!(param("{"), (400, None));
        assert_eq!(param("[1]"), (400, None));
        assert_eq!(
            param(r#"{"action":"up","pool":"decode","x":1}"#),
            (400, None)
        );
        assert_eq!(param(r#"{"pool":"decode"}"#), (400, Some("action")));
        assert_eq!(param(r#"{"action":7}"#), (400, Some("action")));
        assert_eq!(param(r#"{"action":"grow"}"#), (400, Some("action")));
        assert_eq!(param(r#"{"action":"up"}"#), (400, Some("pool")));
        assert_eq!(
            param(r#"{"action":"up","pool":"gpu"}"#),
            (400, Some("pool"))
        );
        assert_eq!(
            param(r#"{"action":"up","pool":"decode","worker":1}"#),
            (400, Some("worker"))
        );
        assert_eq!(param(r#"{"action":"drain"}"#), (400, Some("worker")));
        assert_eq!(
            param(r#"{"action":"drain","worker":"d1"}"#),
            (400, Some("worker"))
        );
        assert_eq!(
            param(r#"{"action":"drain","worker":-1}"#),
            (400, Some("worker"))
        );
        assert_eq!(
            param(r#"{"action":"drain","worker":1.5}"#),
            (400, Some("worker"))
        );
        assert_eq!(
            param(r#"{"action":"drain","worker":4294967296}"#),
            (400, Some("worker"))
        );
        assert_eq!(
            param(r#"{"action":"remove","worker":1,"pool":"decode"}"#),
            (400, Some("pool"))
        );
    }

    #[test]
    fn refusals_map_to_their_status() {
        let e = refused(&ScaleRefused::AtCeiling {
            pool: ScalePool::Decode,
            max: 2,
        });
        assert_eq!((e.status, e.param), (409, Some("pool")));
        assert!(e.message.contains("ceiling of 2"), "{}", e.message);
        let e = refused(&ScaleRefused::NoSuchWorker {
            worker: WorkerId(9),
            workers: 4,
        });
        assert_eq!(e.status, 404);
    }
}
