//! Framing: a 4-byte big-endian body length, then the bincode body of one
//! [`Frame`].
//!
//! The length is checked against [`MAX_FRAME`] before any body byte is read,
//! and the body buffer grows only as bytes actually arrive, so a peer
//! claiming a huge frame costs nothing (as ai-dynamo's
//! `lib/runtime/src/pipeline/network/codec/two_part.rs`
//! `TwoPartCodec::decode_header` rejects an over-size length before buffering
//! the message). Lengths inside the body cost nothing either: bincode runs
//! with the same limit, which caps the decoded primitives at [`MAX_FRAME`]
//! bytes, and every vector a frame carries is pre-sized from at most 4 KiB
//! of its claimed length ([`handoff_core::serde_vec`]), not from serde's
//! default of up to 1 MiB, so what a frame costs follows the bytes that
//! arrived (`tests/decode_alloc.rs`).

use crate::frame::{Frame, PeerRole};
use handoff_core::{Generation, WorkerId};
use std::fmt;
use std::io::{self, Read};

/// Largest body a frame may have, in bytes.
pub const MAX_FRAME: usize = 4 << 20;

/// Bytes of the length prefix.
pub const HEADER_LEN: usize = 4;

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_FRAME>()
}

/// A frame that could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The body would exceed [`MAX_FRAME`]; the peer would refuse it.
    TooLarge {
        /// Body length in bytes.
        len: usize,
    },
    /// The serialiser failed.
    Body(String),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::TooLarge { len } => {
                write!(f, "frame body of {len} bytes exceeds {MAX_FRAME}")
            }
            EncodeError::Body(e) => write!(f, "cannot encode frame: {e}"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// Appends `frame`, length prefix included, to `out`. On error `out` is left
/// as it was. Reusing `out` across calls makes steady-state encoding
/// allocation-free.
pub fn encode_frame(frame: &Frame, out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_LEN]);
    let written = match bincode::serde::encode_into_std_write(frame, out, config()) {
        Ok(n) => n,
        Err(e) => {
            out.truncate(start);
            return Err(EncodeError::Body(e.to_string()));
        }
    };
    let len = match u32::try_from(written) {
        Ok(len) if written <= MAX_FRAME => len,
        _ => {
            out.truncate(start);
            return Err(EncodeError::TooLarge { len: written });
        }
    };
    out[start..start + HEADER_LEN].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// What was wrong with a byte stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeErrorKind {
    /// The length prefix claims more than [`MAX_FRAME`].
    TooLarge {
        /// The claimed body length.
        len: u64,
    },
    /// The stream ended inside a frame.
    Truncated {
        /// Bytes the header or body needed.
        expected: u64,
        /// Bytes that arrived.
        got: u64,
    },
    /// The body is not a valid frame.
    BadBody {
        /// Body length.
        len: u64,
        /// The deserialiser's complaint.
        reason: String,
    },
    /// The body decoded to a frame shorter than its length prefix.
    TrailingBytes {
        /// Body length.
        len: u64,
        /// Bytes the frame used.
        used: u64,
    },
    /// A connection's first frame was not `Hello`.
    NotHello {
        /// The frame that came instead.
        got: &'static str,
    },
    /// `Hello` came again after the handshake.
    UnexpectedHello,
}

/// A stream that cannot be decoded: at which byte offset (the start of the
/// offending frame's length prefix, counted from the start of the stream)
/// and what was wrong. After one, the stream is out of sync and must be
/// dropped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodeError {
    /// Stream offset of the offending frame.
    pub offset: u64,
    /// What was wrong.
    pub kind: DecodeErrorKind,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: ", self.offset)?;
        match &self.kind {
            DecodeErrorKind::TooLarge { len } => {
                write!(f, "frame length {len} exceeds the maximum {MAX_FRAME}")
            }
            DecodeErrorKind::Truncated { expected, got } => {
                write!(f, "stream ended after {got} of {expected} bytes")
            }
            DecodeErrorKind::BadBody { len, reason } => {
                write!(f, "bad {len}-byte frame body: {reason}")
            }
            DecodeErrorKind::TrailingBytes { len, used } => {
                write!(f, "frame used {used} of its {len} bytes")
            }
            DecodeErrorKind::NotHello { got } => {
                write!(f, "first frame is {got}, not Hello")
            }
            DecodeErrorKind::UnexpectedHello => f.write_str("Hello after the handshake"),
        }
    }
}

impl std::error::Error for DecodeError {}

/// Reading a frame failed: the bytes were wrong, or the stream was.
#[derive(Debug)]
pub enum ReadError {
    /// The bytes are not a frame.
    Decode(DecodeError),
    /// The stream failed (reset, shut down, timed out).
    Io(io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Decode(e) => e.fmt(f),
            ReadError::Io(e) => write!(f, "i/o: {e}"),
        }
    }
}

impl std::error::Error for ReadError {}

impl From<DecodeError> for ReadError {
    fn from(e: DecodeError) -> Self {
        ReadError::Decode(e)
    }
}

/// Decodes frames from a byte stream, one at a time, with blocking reads.
/// Works on sockets and on `&[u8]` alike.
#[derive(Debug)]
pub struct FrameReader<R> {
    inner: R,
    offset: u64,
    frame_start: u64,
    body: Vec<u8>,
}

impl<R: Read> FrameReader<R> {
    /// A reader at offset 0 of `inner`.
    pub fn new(inner: R) -> Self {
        FrameReader {
            inner,
            offset: 0,
            frame_start: 0,
            body: Vec::new(),
        }
    }

    /// Bytes consumed so far.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Stream offset of the last frame read (or attempted).
    pub fn frame_start(&self) -> u64 {
        self.frame_start
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    fn error(&self, kind: DecodeErrorKind) -> ReadError {
        ReadError::Decode(DecodeError {
            offset: self.frame_start,
            kind,
        })
    }

    /// The next frame; `Ok(None)` when the stream ends cleanly between
    /// frames.
    pub fn read_frame(&mut self) -> Result<Option<Frame>, ReadError> {
        self.frame_start = self.offset;
        let mut header = [0u8; HEADER_LEN];
        let mut got = 0;
        while got < HEADER_LEN {
            match self.inner.read(&mut header[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(ReadError::Io(e)),
            }
        }
        self.offset += got as u64;
        if got == 0 {
            return Ok(None);
        }
        if got < HEADER_LEN {
            return Err(self.error(DecodeErrorKind::Truncated {
                expected: HEADER_LEN as u64,
                got: got as u64,
            }));
        }
        let len = u64::from(u32::from_be_bytes(header));
        if len > MAX_FRAME as u64 {
            return Err(self.error(DecodeErrorKind::TooLarge { len }));
        }
        // Growing with the bytes that arrive (rather than reserving `len`)
        // keeps a peer that lies about the length from costing memory.
        self.body.clear();
        let read = (&mut self.inner)
            .take(len)
            .read_to_end(&mut self.body)
            .map_err(ReadError::Io)?;
        self.offset += read as u64;
        if (read as u64) < len {
            return Err(self.error(DecodeErrorKind::Truncated {
                expected: len,
                got: read as u64,
            }));
        }
        match bincode::serde::decode_from_slice::<Frame, _>(&self.body, config()) {
            Ok((frame, used)) if used as u64 == len => Ok(Some(frame)),
            Ok((_, used)) => Err(self.error(DecodeErrorKind::TrailingBytes {
                len,
                used: used as u64,
            })),
            Err(e) => Err(self.error(DecodeErrorKind::BadBody {
                len,
                reason: e.to_string(),
            })),
        }
    }

    /// Reads the first frame of a connection, which must be `Hello`.
    pub fn read_hello(&mut self) -> Result<(WorkerId, Generation, PeerRole), ReadError> {
        match self.read_frame()? {
            Some(Frame::Hello {
                worker,
                generation,
                role,
            }) => Ok((worker, generation, role)),
            Some(other) => Err(self.error(DecodeErrorKind::NotHello { got: other.name() })),
            None => Err(self.error(DecodeErrorKind::Truncated {
                expected: HEADER_LEN as u64,
                got: 0,
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::samples::{arb_frame, every_frame};
    use proptest::prelude::*;

    fn encode_all(frames: &[Frame]) -> Vec<u8> {
        let mut out = Vec::new();
        for f in frames {
            encode_frame(f, &mut out).expect("sample frames encode");
        }
        out
    }

    /// Every frame up to the first error, and that error.
    fn decode_all(bytes: &[u8]) -> (Vec<Frame>, Option<DecodeError>) {
        let mut r = FrameReader::new(bytes);
        let mut frames = Vec::new();
        loop {
            match r.read_frame() {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => return (frames, None),
                Err(ReadError::Decode(e)) => return (frames, Some(e)),
                Err(ReadError::Io(e)) => panic!("a slice cannot fail: {e}"),
            }
        }
    }

    #[test]
    fn every_frame_kind_round_trips() {
        let frames = every_frame();
        let bytes = encode_all(&frames);
        let (back, err) = decode_all(&bytes);
        assert_eq!(err, None);
        assert_eq!(back, frames);
    }

    #[test]
    fn header_is_big_endian_body_length() {
        let mut out = Vec::new();
        encode_frame(&Frame::Bye, &mut out).unwrap();
        let len = u32::from_be_bytes([out[0], out[1], out[2], out[3]]) as usize;
        assert_eq!(len, out.len() - HEADER_LEN);
        assert!(len > 0);
    }

    #[test]
    fn oversize_length_is_refused_before_reading_the_body() {
        // Claims 2 GiB and supplies 8 bytes: the error must name the length,
        // not a truncation, and the body buffer must not have grown.
        let mut bytes = 0x8000_0000u32.to_be_bytes().to_vec();
        bytes.extend_from_slice(&[0; 8]);
        let mut r = FrameReader::new(&bytes[..]);
        match r.read_frame() {
            Err(ReadError::Decode(DecodeError {
                offset: 0,
                kind: DecodeErrorKind::TooLarge { len: 0x8000_0000 },
            })) => {}
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(r.body.capacity(), 0);
        assert_eq!(r.offset(), HEADER_LEN as u64);
    }

    #[test]
    fn length_just_over_the_limit_is_refused() {
        let bytes = (MAX_FRAME as u32 + 1).to_be_bytes();
        let (_, err) = decode_all(&bytes);
        assert!(matches!(
            err,
            Some(DecodeError {
                kind: DecodeErrorKind::TooLarge { .. },
                ..
            })
        ));
    }

    #[test]
    fn truncation_names_the_frame_offset() {
        let frames = every_frame();
        let bytes = encode_all(&frames[..3]);
        let first_two = encode_all(&frames[..2]).len();
        let (back, err) = decode_all(&bytes[..bytes.len() - 1]);
        assert_eq!(back, frames[..2]);
        let err = err.expect("truncated");
        assert_eq!(err.offset, first_two as u64);
        assert!(matches!(err.kind, DecodeErrorKind::Truncated { .. }));
        // A cut inside the length prefix is a truncation too.
        let (_, err) = decode_all(&bytes[..2]);
        assert_eq!(
            err.map(|e| e.kind),
            Some(DecodeErrorKind::Truncated {
                expected: 4,
                got: 2
            })
        );
    }

    #[test]
    fn garbage_body_is_a_bad_body() {
        let bytes = [0, 0, 0, 3, 0xff, 0xff, 0xff];
        let (_, err) = decode_all(&bytes);
        let err = err.expect("garbage");
        assert_eq!(err.offset, 0);
        assert!(matches!(err.kind, DecodeErrorKind::BadBody { len: 3, .. }));
        assert!(err.to_string().starts_with("at byte 0: "));
    }

    #[test]
    fn padded_body_is_trailing_bytes() {
        let mut one = Vec::new();
        encode_frame(&Frame::Bye, &mut one).unwrap();
        let body_len = one.len() - HEADER_LEN;
        let mut bytes = ((body_len + 2) as u32).to_be_bytes().to_vec();
        bytes.extend_from_slice(&one[HEADER_LEN..]);
        bytes.extend_from_slice(&[0, 0]);
        let (_, err) = decode_all(&bytes);
        assert_eq!(
            err.map(|e| e.kind),
            Some(DecodeErrorKind::TrailingBytes {
                len: body_len as u64 + 2,
                used: body_len as u64
            })
        );
    }

    #[test]
    fn first_frame_must_be_hello() {
        let bytes = encode_all(&[Frame::Bye]);
        let mut r = FrameReader::new(&bytes[..]);
        match r.read_hello() {
            Err(ReadError::Decode(DecodeError {
                offset: 0,
                kind: DecodeErrorKind::NotHello { got: "Bye" },
            })) => {}
            other => panic!("unexpected {other:?}"),
        }
        let bytes = encode_all(&[Frame::Hello {
            worker: WorkerId(2),
            generation: Generation(5),
            role: PeerRole::Any,
        }]);
        let mut r = FrameReader::new(&bytes[..]);
        assert_eq!(
            r.read_hello().unwrap(),
            (WorkerId(2), Generation(5), PeerRole::Any)
        );
        let mut r = FrameReader::new(&[][..]);
        assert!(matches!(
            r.read_hello(),
            Err(ReadError::Decode(DecodeError {
                kind: DecodeErrorKind::Truncated { .. },
                ..
            }))
        ));
    }

    #[test]
    fn inner_length_claims_are_bounded() {
        // A Kv event whose block-hash vector claims u64::MAX entries: the
        // body is tiny, bincode must refuse rather than reserve.
        let frames = every_frame();
        let kv = frames
            .iter()
            .find(|f| matches!(f, Frame::Event(handoff_core::WorkerEvent::Kv { .. })))
            .unwrap();
        let mut bytes = encode_all(std::slice::from_ref(kv));
        // The Stored event's vector has two entries; its varint length is
        // the byte `2` followed by the hashes `2`, `3`: widen the count to a
        // u64 varint (marker 253, then eight bytes).
        let pos = bytes
            .windows(3)
            .rposition(|w| w == [2, 2, 3])
            .expect("vector length");
        bytes.splice(
            pos..pos + 1,
            [0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
        );
        let len = (bytes.len() - HEADER_LEN) as u32;
        bytes[..HEADER_LEN].copy_from_slice(&len.to_be_bytes());
        let (_, err) = decode_all(&bytes);
        assert!(matches!(
            err,
            Some(DecodeError {
                kind: DecodeErrorKind::BadBody { .. },
                ..
            })
        ));
    }

    #[test]
    fn encoding_reuses_the_buffer() {
        let mut out = Vec::with_capacity(256);
        let cap = out.capacity();
        for f in every_frame()
            .iter()
            .filter(|f| !matches!(f, Frame::Request(_)))
        {
            out.clear();
            encode_frame(f, &mut out).unwrap();
        }
        assert_eq!(out.capacity(), cap);
    }

    #[test]
    fn too_large_frames_are_refused_on_encode() {
        let mut req = crate::frame::samples::request(1);
        req.prefix_hashes = vec![u64::MAX; MAX_FRAME / 8];
        let mut out = vec![9];
        let err = encode_frame(
            &Frame::Request(handoff_core::WorkerRequest::Ordinary(req)),
            &mut out,
        )
        .unwrap_err();
        assert!(matches!(
            err,
            EncodeError::TooLarge { .. } | EncodeError::Body(_)
        ));
        assert_eq!(out, vec![9]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn valid_frames_round_trip(frames in proptest::collection::vec(arb_frame(), 0..12)) {
            let bytes = encode_all(&frames);
            let (back, err) = decode_all(&bytes);
            prop_assert_eq!(err, None);
            prop_assert_eq!(back, frames);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let (_, err) = decode_all(&bytes);
            if let Some(e) = err {
                prop_assert!(e.offset <= bytes.len() as u64);
            }
        }

        #[test]
        fn mutated_streams_never_panic(
            frames in proptest::collection::vec(arb_frame(), 1..6),
            edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8),
        ) {
            let mut bytes = encode_all(&frames);
            for (at, byte, op) in edits {
                if bytes.is_empty() { break; }
                let i = at.index(bytes.len());
                match op {
                    0 => bytes[i] ^= byte | 1,
                    1 => bytes.truncate(i),
                    _ => bytes.insert(i, byte),
                }
            }
            let (back, err) = decode_all(&bytes);
            // Whatever decodes before the first error is a prefix of
            // valid-looking frames; the error, if any, points into the stream.
            prop_assert!(back.len() <= bytes.len() / (HEADER_LEN + 1) + 1);
            if let Some(e) = err {
                prop_assert!(e.offset <= bytes.len() as u64);
            }
        }
    }
}
