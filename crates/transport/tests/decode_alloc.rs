//! A frame costs memory in proportion to the bytes that arrived, not to the
//! lengths they claim.
//!
//! Regression test for what `handoff-fuzz frame` found: a 990-byte frame
//! whose vector claimed a huge length made the decoder allocate 1 MiB
//! (serde pre-sizes a `Vec` from the claimed length up to 1 MiB, and
//! bincode's limit does not apply to serde sequences), 2 MiB with a claim
//! nested inside another. Every vector a frame carries is now pre-sized from
//! at most a few KiB's worth of its claim.

use handoff_transport::{encode_frame, DecodeErrorKind, Frame, FrameReader, HostReply, ReadError};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use handoff_core::{
    Duration, HostOutput, HostStatus, Instant, KvEvent, KvEventData, Request, RequestId,
    WorkerEvent, WorkerRequest,
};

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn grew(by: usize) {
    let _ = LIVE.try_with(|l| {
        l.set(l.get() + by as isize);
        let _ = PEAK.try_with(|p| p.set(p.get().max(l.get())));
    });
}

fn shrank(by: usize) {
    let _ = LIVE.try_with(|l| l.set(l.get() - by as isize));
}

// SAFETY: forwards to `System` unchanged; the bookkeeping only touches
// const-initialised thread-local cells and never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        shrank(layout.size());
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size);
        shrank(layout.size());
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Decodes the one frame in `bytes`; returns the error kind and the peak
/// bytes allocated meanwhile on this thread.
fn decode_peak(bytes: &[u8]) -> (Result<Frame, DecodeErrorKind>, usize) {
    let mut reader = FrameReader::new(bytes);
    let base = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let res = match reader.read_frame() {
        Ok(Some(f)) => Ok(f),
        Err(ReadError::Decode(e)) => Err(e.kind),
        other => panic!("unexpected {other:?}"),
    };
    let peak = PEAK.with(Cell::get) - base;
    (res, peak as usize)
}

fn body_of(frame: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(frame, &mut out).unwrap();
    out.split_off(4)
}

fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// bincode varint for 2^20: the u32 marker, then little-endian.
const HUGE: [u8; 5] = [252, 0, 0, 0x10, 0];

/// The most a frame of a few dozen bytes may cost while failing.
const SMALL: usize = 16 << 10;

fn request(hashes: Vec<u64>) -> Frame {
    Frame::Request(WorkerRequest::Ordinary(Request {
        id: RequestId(1),
        prompt_tokens: 1,
        max_output_tokens: 1,
        prefix_hashes: hashes,
        hash_block_tokens: 512,
        session: None,
        arrival: Instant(7),
        lora: None,
    }))
}

fn removed(hashes: Vec<u64>) -> WorkerEvent {
    WorkerEvent::Kv {
        event: KvEvent {
            event_id: 1,
            data: KvEventData::Removed {
                block_hashes: hashes,
            },
        },
        at: Instant(1),
    }
}

fn reply(outputs: Vec<HostOutput>) -> Frame {
    Frame::HostReply(HostReply {
        outputs,
        status: HostStatus::default(),
    })
}

/// The body of `frame` cut just after the vector length at `at`, which is
/// replaced by a claim of 2^20 elements.
fn lying(frame: &Frame, at: usize) -> Vec<u8> {
    let mut body = body_of(frame);
    body.truncate(at);
    body.extend_from_slice(&HUGE);
    framed(&body)
}

#[test]
fn layouts_are_as_assumed() {
    // Frame::Request, Ordinary, id 1, prompt 1, output 1, then the vector.
    assert_eq!(body_of(&request(vec![9]))[..7], [2, 0, 1, 1, 1, 1, 9]);
    // Frame::Event, WorkerEvent::Kv, event_id 1, Removed, then the vector.
    assert_eq!(
        body_of(&Frame::Event(removed(vec![9])))[..6],
        [3, 8, 1, 1, 1, 9]
    );
    // Frame::HostReply, then the outputs vector; HostOutput::Event is 1.
    let r = body_of(&reply(vec![HostOutput::Event(removed(vec![9]))]));
    assert_eq!(r[..7], [7, 1, 1, 8, 1, 1, 1]);
}

#[test]
fn a_lying_vector_length_costs_almost_nothing() {
    let cases = [
        ("prefix_hashes", lying(&request(vec![]), 5)),
        ("block_hashes", lying(&Frame::Event(removed(vec![])), 4)),
        ("outputs", lying(&reply(vec![]), 1)),
        // The vector ends the body: an empty one is its last byte.
        ("emissions", {
            let f = Frame::Event(WorkerEvent::Tokens { emissions: vec![] });
            let at = body_of(&f).len() - 1;
            lying(&f, at)
        }),
        // `passes` comes just before `prefill_tokens`, the last byte.
        ("passes", {
            let f = Frame::Event(WorkerEvent::Step {
                start: Instant(1),
                steps: 1,
                duration: Duration::from_nanos(1),
                first_step: Duration::from_nanos(1),
                last_step: Duration::from_nanos(1),
                passes: vec![],
                prefill_tokens: 0,
            });
            let at = body_of(&f).len() - 2;
            lying(&f, at)
        }),
    ];
    for (what, bytes) in cases {
        let (res, peak) = decode_peak(&bytes);
        assert!(
            matches!(res, Err(DecodeErrorKind::BadBody { .. })),
            "{what}: {res:?}"
        );
        assert!(
            peak < SMALL,
            "{what}: a {}-byte frame allocated {peak} bytes",
            bytes.len()
        );
    }
}

#[test]
fn nested_lying_lengths_cost_almost_nothing() {
    // outputs claims 2^20 elements; the first is a Kv event whose hashes
    // claim 2^20 too.
    let mut body = vec![7];
    body.extend_from_slice(&HUGE);
    body.extend_from_slice(&[1, 8, 1, 1]);
    body.extend_from_slice(&HUGE);
    let (res, peak) = decode_peak(&framed(&body));
    assert!(
        matches!(res, Err(DecodeErrorKind::BadBody { .. })),
        "{res:?}"
    );
    assert!(peak < SMALL, "allocated {peak} bytes");
}

#[test]
fn honest_long_vectors_still_decode() {
    let hashes: Vec<u64> = (0..100_000).collect();
    let f = request(hashes.clone());
    let mut bytes = Vec::new();
    encode_frame(&f, &mut bytes).unwrap();
    let (res, peak) = decode_peak(&bytes);
    assert_eq!(res, Ok(f));
    // The body buffer (< 2x the body) and the hashes growing by doubling
    // (< 3x their 800 KB across a moving realloc).
    assert!(peak < bytes.len() * 2 + 100_000 * 8 * 3, "{peak}");
    let outputs: Vec<HostOutput> = (0..5000)
        .map(|i| HostOutput::Event(removed(vec![i; 3])))
        .collect();
    let f = reply(outputs);
    let mut bytes = Vec::new();
    encode_frame(&f, &mut bytes).unwrap();
    assert_eq!(decode_peak(&bytes).0, Ok(f));
}
