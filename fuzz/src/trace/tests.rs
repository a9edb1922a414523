use super::*;

#[test]
fn line_counting_matches_the_reader() {
    let input = b"a\nb\r\n\nlast";
    assert_eq!(lines_through(input, 0), 0);
    assert_eq!(lines_through(input, 2), 1);
    assert_eq!(lines_through(input, 5), 2);
    assert_eq!(lines_through(input, input.len()), 4);
    assert_eq!(line_text(input, 2), b"b");
    assert_eq!(line_text(input, 4), b"last");
    assert_eq!(longest_line(input), 4);
}

#[test]
fn seeds_pass_every_check() {
    let mut t = TraceTarget::default();
    for s in t.seeds() {
        t.run(&s);
    }
    assert!(t.stats.records > 10);
    assert!(t.stats.kinds.keys().any(|k| k.starts_with("json: Syntax")));
}

#[test]
fn value_end_skips_nested_values() {
    let b = br#"{"a": [1, {"b": 2}], "c": "x,y"}"#;
    assert_eq!(value_end(b, 6), 19);
    assert_eq!(value_end(b, 26), 31);
}

#[test]
fn chunky_reads_everything_despite_interruptions() {
    let data: Vec<u8> = (0..=255).collect();
    let mut r = BufReader::with_capacity(3, Chunky::new(&data, Rng::new(1), 5));
    let mut got = Vec::new();
    loop {
        match r.read_to_end(&mut got) {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(got, data);
}
