//! A bounded ZMTP filter in front of each libzmq socket of
//! `kv_events::zmq`. libzmq refuses a frame over `ZMQ_MAXMSGSIZE` before
//! allocating it, but it keeps every part of a multipart message until
//! the last one comes (`src/ypipe.hpp`, `ypipe_t::write`: an incomplete
//! message is never flushed, and `pipe_t::check_hwm` counts whole
//! messages only), so a peer streaming parts without end grows the
//! process without bound: 400 MB of 4 kB parts took a `serve` from 22 MB
//! to 840 MB. The public TCP port is therefore this filter's: it reads what
//! a peer sends as ZMTP 3 (RFC 23: the 64-byte greeting, then frames of a
//! flags byte, a 1- or 8-byte size and the body), and closes a peer whose
//! frame is larger than [`MAX_FRAME`], whose message has more than
//! [`MAX_PARTS`] parts, or whose bytes are not ZMTP 3; what it accepts it
//! forwards unchanged to the libzmq socket, bound on a Unix socket in a
//! directory only this user can enter (loopback TCP elsewhere). What the
//! socket sends back is forwarded unread. At most [`MAX_PEERS`] peers are
//! connected to one port at once; more are closed on accept.

use crate::error::ServeError;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The largest frame a peer may send (a subscription topic, an 8-byte
/// replay request, the handshake's READY metadata).
pub const MAX_FRAME: u64 = 4096;
/// The most parts one message may have (a replay request has two or three).
pub const MAX_PARTS: u32 = 8;
/// The most peers connected to one port at once.
pub const MAX_PEERS: usize = 256;

/// Why a peer was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Violation {
    /// The greeting is not ZMTP 3's (signature or version) at this offset.
    Greeting(usize),
    /// A frame's flags byte has reserved bits, or a command claims more.
    Flags(u8),
    /// A frame claims this many bytes, over [`MAX_FRAME`].
    Frame(u64),
    /// A message went past [`MAX_PARTS`] parts.
    Parts,
}

#[derive(Clone, Copy, Debug)]
enum State {
    Greeting(usize),
    Flags,
    Size {
        flags: u8,
        need: usize,
        got: usize,
        size: u64,
    },
    Body(u64),
}

/// The peer-to-socket direction of one connection, checked byte by byte
/// as it streams (no frame is buffered).
#[derive(Debug)]
pub struct Inbound {
    state: State,
    parts: u32,
}

impl Default for Inbound {
    fn default() -> Self {
        Inbound {
            state: State::Greeting(0),
            parts: 0,
        }
    }
}

impl Inbound {
    /// Checks the next `bytes` the peer sent.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<(), Violation> {
        while let Some((&b, rest)) = bytes.split_first() {
            match self.state {
                State::Greeting(at) => {
                    // Signature 0xFF, padding, 0x7F; major version 3 or more.
                    let ok = match at {
                        0 => b == 0xff,
                        9 => b == 0x7f,
                        10 => b >= 3,
                        _ => true,
                    };
                    if !ok {
                        return Err(Violation::Greeting(at));
                    }
                    self.state = if at == 63 {
                        State::Flags
                    } else {
                        State::Greeting(at + 1)
                    };
                }
                State::Flags => {
                    let (more, long, command) = (b & 1 != 0, b & 2 != 0, b & 4 != 0);
                    if b & !7 != 0 || (command && more) {
                        return Err(Violation::Flags(b));
                    }
                    self.state = State::Size {
                        flags: b,
                        need: if long { 8 } else { 1 },
                        got: 0,
                        size: 0,
                    };
                }
                State::Size {
                    flags,
                    need,
                    got,
                    size,
                } => {
                    let size = (size << 8) | u64::from(b);
                    if got + 1 < need {
                        self.state = State::Size {
                            flags,
                            need,
                            got: got + 1,
                            size,
                        };
                    } else {
                        self.frame(flags, size)?;
                    }
                }
                State::Body(left) => {
                    // Skip the body in one step.
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::Flags
                    } else {
                        State::Body(left)
                    };
                    bytes = &bytes[n..];
                    continue;
                }
            }
            bytes = rest;
        }
        Ok(())
    }

    /// A frame header ended: its size and the message's part count.
    fn frame(&mut self, flags: u8, size: u64) -> Result<(), Violation> {
        if size > MAX_FRAME {
            return Err(Violation::Frame(size));
        }
        if flags & 4 == 0 {
            self.parts += 1;
            if self.parts > MAX_PARTS {
                return Err(Violation::Parts);
            }
            if flags & 1 == 0 {
                self.parts = 0;
            }
        }
        self.state = if size == 0 {
            State::Flags
        } else {
            State::Body(size)
        };
        Ok(())
    }
}

/// Where the guarded libzmq sockets listen: a private directory of Unix
/// sockets, removed when dropped.
#[derive(Debug)]
pub struct InnerDir {
    #[cfg(unix)]
    dir: std::path::PathBuf,
}

impl InnerDir {
    /// A fresh directory only this user may enter.
    pub fn new() -> Result<Self, ServeError> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::DirBuilderExt;
            use std::sync::atomic::{AtomicU64, Ordering};
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let dir = std::env::temp_dir().join(format!(
                "handoff-zmq-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|e| ServeError::socket("--kv-events", dir.display(), e))?;
            Ok(InnerDir { dir })
        }
        #[cfg(not(unix))]
        Ok(InnerDir {})
    }

    /// The endpoint libzmq binds socket `name` on.
    pub fn endpoint(&self, name: &str) -> String {
        #[cfg(unix)]
        {
            format!("ipc://{}", self.dir.join(name).display())
        }
        #[cfg(not(unix))]
        {
            let _ = name;
            "tcp://127.0.0.1:*".to_string()
        }
    }
}

impl Drop for InnerDir {
    fn drop(&mut self) {
        #[cfg(unix)]
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Binds the public `tcp://HOST:PORT` address `public` (the error names
/// `flag`).
pub async fn listen(public: &str, flag: &str) -> Result<TcpListener, ServeError> {
    let addr = public
        .strip_prefix("tcp://")
        .ok_or_else(|| ServeError::Flag {
            flag: flag.to_string(),
            value: public.to_string(),
            expected: "tcp://HOST:PORT",
        })?;
    TcpListener::bind(addr)
        .await
        .map_err(|e| ServeError::socket(flag, public, e))
}

/// Accepts peers on `listener` for ever, each forwarded to `inner` (a
/// libzmq endpoint, as [`InnerDir::endpoint`] or `get_last_endpoint`
/// gives it) through the checks of [`Inbound`].
pub async fn guard(listener: TcpListener, inner: String) {
    let peers = Arc::new(Semaphore::new(MAX_PEERS));
    loop {
        let Ok((peer, _)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let Ok(permit) = peers.clone().try_acquire_owned() else {
            continue;
        };
        let inner = inner.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _ = peer.set_nodelay(true);
            #[cfg(unix)]
            if let Some(path) = inner.strip_prefix("ipc://") {
                if let Ok(s) = tokio::net::UnixStream::connect(path).await {
                    pump(peer, s).await;
                }
                return;
            }
            if let Some(addr) = inner.strip_prefix("tcp://") {
                if let Ok(s) = tokio::net::TcpStream::connect(addr).await {
                    pump(peer, s).await;
                }
            }
        });
    }
}

/// Forwards `peer`'s checked bytes to `socket` and `socket`'s bytes back,
/// until either side closes or the peer breaks a rule.
async fn pump<S>(peer: tokio::net::TcpStream, socket: S)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let (mut peer_rd, mut peer_wr) = peer.into_split();
    let (mut sock_rd, mut sock_wr) = tokio::io::split(socket);
    let inbound = async {
        let mut check = Inbound::default();
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = match peer_rd.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if check.feed(&buf[..n]).is_err() || sock_wr.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    };
    let outbound = async {
        let _ = tokio::io::copy(&mut sock_rd, &mut peer_wr).await;
    };
    // Whichever ends first ends both: dropping the halves closes them.
    tokio::select! {
        () = inbound => {}
        () = outbound => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn greeting() -> Vec<u8> {
        let mut g = vec![0xff, 0, 0, 0, 0, 0, 0, 0, 0, 0x7f, 3, 1];
        g.extend_from_slice(b"NULL");
        g.resize(64, 0);
        g
    }

    fn frame(flags: u8, body: &[u8]) -> Vec<u8> {
        let mut f = vec![flags];
        if flags & 2 != 0 {
            f.extend_from_slice(&(body.len() as u64).to_be_bytes());
        } else {
            f.push(body.len() as u8);
        }
        f.extend_from_slice(body);
        f
    }

    /// A handshake and requests pass, fed whole or one byte at a time.
    #[test]
    fn a_normal_conversation_passes_in_any_slicing() {
        let mut bytes = greeting();
        bytes.extend(frame(4, b"\x05READY\x0bSocket-Type\x00\x00\x00\x06DEALER"));
        for _ in 0..3 {
            bytes.extend(frame(1, b""));
            bytes.extend(frame(0, &7u64.to_be_bytes()));
        }
        bytes.extend(frame(2, &[b'x'; 4096]));
        let mut whole = Inbound::default();
        assert_eq!(whole.feed(&bytes), Ok(()));
        let mut one = Inbound::default();
        for b in &bytes {
            assert_eq!(one.feed(std::slice::from_ref(b)), Ok(()));
        }
    }

    /// The bomb, one byte over the limit, endless parts, a
    /// command with MORE, reserved bits and a ZMTP 2 greeting are refused
    /// at the byte that decides, before any body is read.
    #[test]
    fn what_breaks_a_bound_is_refused_at_its_header() {
        let refused = |tail: Vec<u8>| {
            let mut i = Inbound::default();
            i.feed(&greeting()).expect("greeting");
            i.feed(&tail)
        };
        let mut bomb = vec![2];
        bomb.extend_from_slice(&(1u64 << 62).to_be_bytes());
        assert_eq!(refused(bomb), Err(Violation::Frame(1 << 62)));
        let mut over = vec![2];
        over.extend_from_slice(&4097u64.to_be_bytes());
        assert_eq!(refused(over), Err(Violation::Frame(4097)));
        let parts: Vec<u8> = (0..9).flat_map(|_| frame(1, b"p")).collect();
        assert_eq!(refused(parts), Err(Violation::Parts));
        assert_eq!(refused(vec![5, 0]), Err(Violation::Flags(5)));
        assert_eq!(refused(vec![8, 0]), Err(Violation::Flags(8)));
        let mut old = greeting();
        old[10] = 2;
        assert_eq!(Inbound::default().feed(&old), Err(Violation::Greeting(10)));
        assert_eq!(
            Inbound::default().feed(b"GET / HTTP/1.1"),
            Err(Violation::Greeting(0))
        );
    }
}
