//! The accept loop every listener of `serve` runs (the frontend and each
//! per-worker listener): HTTP/1.1 connections served by hyper with a
//! bound on how long a client may take to send a request.
//!
//! - **Head**: hyper's `header_read_timeout` (`hyper::server::conn::http1::
//!   Builder`). Its clock starts whenever the connection waits for a
//!   request head, on a new connection or after the previous response
//!   ended, and a head not complete by then closes the connection. On an
//!   idle keep-alive connection this is uvicorn's `timeout_keep_alive`
//!   (`uvicorn/protocols/http/h11_impl.py`, `on_response_complete` arms
//!   `timeout_keep_alive_handler`), which vLLM sets from
//!   `VLLM_HTTP_TIMEOUT_KEEP_ALIVE` (`vllm/envs.py`, 5 s; passed in
//!   `vllm/entrypoints/openai/api_server.py`, `run_server`), so the default
//!   here is the same 5 s. Uvicorn does not bound a head in progress (a
//!   client that sends half its headers holds the connection); the same
//!   bound is applied to it here.
//! - **Body**: a request's whole body must arrive within the body timeout
//!   of its head ([`Deadline`]): one deadline, not a per-read idle timer,
//!   so a body trickled a byte at a time cannot hold a connection for
//!   longer. Neither uvicorn nor vLLM bounds the body read; the default is
//!   hyper's own default header timeout, 30 s. A late body fails its
//!   handler's extractor, which answers 408 with `Connection: close`
//!   ([`crate::http::error::body_error_response`]).
//!
//! A `Content-Length` over the body limit is answered 413 (with
//! `Connection: close`) at once, without buffering the body: it is read
//! and dropped while the answer goes out ([`drain`]), then the connection
//! closes.
//!
//! On stop, every connection is shut down gracefully (a request in
//! progress finishes, an idle connection closes) and the loop returns once
//! all have ended, as `axum::serve`'s graceful shutdown does.

use crate::http::error::BodyTimeout;
use axum::body::Bytes;
use axum::http::Request;
use axum::Router;
use futures_util::future::{ready, Either};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, Sleep};

/// The default head timeout: vLLM's `VLLM_HTTP_TIMEOUT_KEEP_ALIVE`
/// (uvicorn's `timeout_keep_alive`), in seconds.
pub const DEFAULT_HEADER_TIMEOUT_S: f64 = 5.0;

/// The default body timeout, in seconds (hyper's default head timeout;
/// uvicorn and vLLM have none).
pub const DEFAULT_BODY_TIMEOUT_S: f64 = 30.0;

/// The longest either timeout may be, in seconds.
pub const MAX_TIMEOUT_S: f64 = 3600.0;

/// How long a client may take to send a request (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpTimeouts {
    /// From waiting for a head (new connection, or the previous response
    /// sent) to the head's last byte.
    pub header: Duration,
    /// From the head's arrival to the body's last byte.
    pub body: Duration,
}

impl Default for HttpTimeouts {
    fn default() -> Self {
        HttpTimeouts {
            header: Duration::from_secs_f64(DEFAULT_HEADER_TIMEOUT_S),
            body: Duration::from_secs_f64(DEFAULT_BODY_TIMEOUT_S),
        }
    }
}

impl HttpTimeouts {
    /// Both timeouts from seconds, each finite and in `(0, MAX_TIMEOUT_S]`;
    /// an error names the flag (`--http-header-timeout-s`,
    /// `--http-body-timeout-s`).
    pub fn from_secs(header: f64, body: f64) -> Result<Self, crate::ServeError> {
        let one = |v: f64, flag: &str| {
            if v.is_finite() && v > 0.0 && v <= MAX_TIMEOUT_S {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(crate::ServeError::Flag {
                    flag: flag.to_string(),
                    value: v.to_string(),
                    expected: "a number of seconds in (0, 3600]",
                })
            }
        };
        Ok(HttpTimeouts {
            header: one(header, "--http-header-timeout-s")?,
            body: one(body, "--http-body-timeout-s")?,
        })
    }
}

/// A request body that fails with [`BodyTimeout`] once `at` passes before
/// its end. The timer is armed only when a read would wait, so a body
/// already in the buffer (or none) costs no timer.
pub struct Deadline {
    inner: Incoming,
    at: Instant,
    limit: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Deadline {
    /// `inner`, due `limit` from now.
    pub fn new(inner: Incoming, limit: Duration) -> Self {
        Deadline {
            inner,
            at: Instant::now() + limit,
            limit,
            sleep: None,
        }
    }
}

impl Body for Deadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(f) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(f.map(|r| r.map_err(Into::into)));
        }
        let at = this.at;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout(this.limit))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `app` on `listener` until `stop` turns true, then waits for the
/// open connections to end (module docs).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    timeouts: HttpTimeouts,
    mut stop: watch::Receiver<bool>,
) {
    let mut conns = tokio::task::JoinSet::new();
    let each = stop.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    conns.spawn(connection(stream, app.clone(), timeouts, each.clone()));
                }
                // Out of descriptors or a connection reset before it was
                // accepted: the listener itself is fine; back off briefly so
                // a descriptor shortage does not spin.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            () = stopped(&mut stop) => break,
            // Reaps ended connections so the set holds only open ones.
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// The `Content-Length` of `req` when it is over
/// [`crate::http::error::MAX_BODY_BYTES`]: such a body is refused before any of
/// it is read (every route has that limit), rather than after reading the
/// first 4 MiB of it.
fn announced_too_large<B>(req: &Request<B>) -> Option<u64> {
    let n: u64 = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (n > crate::http::error::MAX_BODY_BYTES as u64).then_some(n)
}

/// The most of a refused body [`drain`] reads before it gives up.
const MAX_DRAIN_BYTES: usize = 4 * crate::http::error::MAX_BODY_BYTES;

/// Reads and discards a refused body while its 413 goes out, until its
/// end, its deadline, or [`MAX_DRAIN_BYTES`]: a lingering close, as nginx
/// does after a 413. Closing at once would reset a client still sending
/// (most send the whole body before reading), and it would lose the 413.
async fn drain(mut body: Deadline) {
    let mut read = 0usize;
    while read <= MAX_DRAIN_BYTES {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            Some(Ok(f)) => read += f.data_ref().map_or(0, |d| d.len()),
            _ => return,
        }
    }
}

/// Resolves once `stop` is true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// One connection, until it closes (or, after `stop`, once its request in
/// progress is answered).
/// The first line of the HTTP/2 connection preface (RFC 9113, section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n";

/// uvicorn's answer to a request its HTTP/1.1 parser refuses, an HTTP/2
/// preface among them (`uvicorn/protocols/http/httptools_impl.py`,
/// `HttpToolsProtocol.data_received`: `send_400_response("Invalid HTTP
/// request received.")`), which vLLM's API server therefore gives.
const H2_ANSWER: &[u8] = b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n\
    content-length: 29\r\nconnection: close\r\n\r\nInvalid HTTP request received.";

/// How a connection opens, decided from its first bytes, peeked (not read).
#[derive(Debug, PartialEq, Eq)]
enum Opening {
    /// Anything but the HTTP/2 preface: hyper reads it.
    Http1,
    /// The HTTP/2 preface: answered with [`H2_ANSWER`] and closed.
    H2Preface,
    /// Nothing that decides came within the head timeout, or the peer
    /// closed: closed, as hyper closes a head that times out.
    Silent,
}

async fn opening(stream: &TcpStream, wait: Duration) -> Opening {
    let mut buf = [0u8; 16];
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => n,
            _ => return Opening::Silent,
        };
        if !H2_PREFACE.starts_with(&buf[..n.min(H2_PREFACE.len())]) {
            return Opening::Http1;
        }
        if n >= H2_PREFACE.len() {
            return Opening::H2Preface;
        }
        // A prefix of the preface: peek again once more bytes may be in.
        if tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_millis(5)))
            .await
            .is_err()
        {
            return Opening::Silent;
        }
    }
}

/// Reads what the HTTP/2 client sent so far (its preface and settings, at
/// most a few kilobytes: unread bytes would turn the close into a reset
/// that loses the answer), sends [`H2_ANSWER`] and closes.
async fn answer_h2(stream: TcpStream) {
    let mut scratch = [0u8; 4096];
    let _ = stream.try_read(&mut scratch);
    let mut sent = 0;
    while sent < H2_ANSWER.len() {
        if stream.writable().await.is_err() {
            return;
        }
        match stream.try_write(&H2_ANSWER[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
    if let Ok(s) = stream.into_std() {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
}

async fn connection(
    stream: TcpStream,
    app: Router,
    timeouts: HttpTimeouts,
    mut stop: watch::Receiver<bool>,
) {
    let _ = stream.set_nodelay(true);
    match opening(&stream, timeouts.header).await {
        Opening::Http1 => {}
        Opening::Silent => return,
        Opening::H2Preface => {
            let _ = tokio::time::timeout(timeouts.header, answer_h2(stream)).await;
            return;
        }
    }
    let body_limit = timeouts.body;
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        if let Some(n) = announced_too_large(&req) {
            tokio::spawn(drain(Deadline::new(req.into_body(), body_limit)));
            return Either::Left(ready(Ok(crate::http::error::announced_too_large(n))));
        }
        let mut app = app.clone();
        let req = req.map(|b| axum::body::Body::new(Deadline::new(b, body_limit)));
        Either::Right(tower_service::Service::call(&mut app, req))
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(timeouts.header)
        .keep_alive(true);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = stopped(&mut stop) => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_are_range_checked_and_name_the_flag() {
        let t = HttpTimeouts::from_secs(5.0, 30.0).unwrap();
        assert_eq!(t, HttpTimeouts::default());
        for (h, b, flag) in [
            (0.0, 1.0, "--http-header-timeout-s"),
            (-1.0, 1.0, "--http-header-timeout-s"),
            (f64::NAN, 1.0, "--http-header-timeout-s"),
            (1.0, f64::INFINITY, "--http-body-timeout-s"),
            (1.0, MAX_TIMEOUT_S + 1.0, "--http-body-timeout-s"),
        ] {
            let e = HttpTimeouts::from_secs(h, b).unwrap_err().to_string();
            assert!(e.starts_with(flag), "{e}");
        }
        assert!(HttpTimeouts::from_secs(0.001, MAX_TIMEOUT_S).is_ok());
    }
}
