//! An input with no line end at all (`--trace /dev/zero`) used to be
//! skipped for ever as one over-long line; the reader now stops a bounded
//! way past the line limit with a located error, even when bad lines are
//! skipped.

use handoff_workload::{Problem, ReaderOptions, TraceReader};

#[test]
fn an_endless_line_is_fatal_even_when_skipping() {
    let mut opts = ReaderOptions::new("zero");
    opts.max_line_bytes = 4096;
    opts.skip_bad_lines = true;
    let input = std::io::BufReader::new(std::io::repeat(0));
    let mut r = TraceReader::new(input, opts);
    let e = match r.next() {
        Some(Err(e)) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(e.problem(), &Problem::Endless { limit: 4096 });
    assert_eq!(
        e.to_string(),
        "zero:1: line: longer than 4096 bytes with no line end in 4 times that: not a \
         file of lines"
    );
    assert!(r.next().is_none());
}
