//! The reader must turn any byte stream into records or typed errors, never
//! a panic; and anything it accepts must satisfy its documented rules.

use handoff_workload::{
    write_trace, ReaderOptions, SyntheticConfig, SyntheticWorkload, TraceFormat, TraceItem,
    TraceReader,
};
use proptest::prelude::*;

fn check(bytes: &[u8], skip: bool, max_line: usize) {
    check_format(bytes, skip, max_line, TraceFormat::Mooncake);
}

fn check_format(bytes: &[u8], skip: bool, max_line: usize, format: TraceFormat) {
    let mut opts = ReaderOptions::new("fuzz.jsonl").with_format(format);
    opts.skip_bad_lines = skip;
    opts.max_line_bytes = max_line;
    let mut reader = TraceReader::new(bytes, opts);
    let mut last = None;
    for item in reader.by_ref() {
        match item {
            Ok(it) => {
                let r = &it.request;
                assert!(r.prompt_tokens >= 1 && r.max_output_tokens >= 1);
                assert!(
                    r.prefix_hashes.len() as u64 <= u64::from(r.prompt_tokens).div_ceil(512) + 1
                );
                assert_eq!(it.turn.is_some(), r.session.is_some());
                if let Some(prev) = last {
                    assert!(r.arrival >= prev);
                }
                last = Some(r.arrival);
            }
            Err(e) => {
                let text = e.to_string();
                assert!(text.starts_with("fuzz.jsonl:"), "{text}");
            }
        }
    }
    let s = reader.stats();
    assert!(s.records + s.blank_lines + s.bad_lines <= s.lines + 1);
}

fn valid_lines() -> Vec<u8> {
    let items: Vec<TraceItem> = SyntheticWorkload::new(SyntheticConfig {
        requests: 4,
        ..SyntheticConfig::default()
    })
    .collect();
    let mut buf = Vec::new();
    write_trace(&mut buf, &items).unwrap();
    buf.extend_from_slice(
        br#"{"timestamp": 1e9, "input_length": 700, "output_length": 2, "hash_ids": [1, 2], "session_id": "a\u00e9\n", "delay": 3.25}"#,
    );
    buf.push(b'\n');
    buf
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Delete(usize),
    Truncate(usize),
    Splice(usize, &'static str),
}

const FRAGMENTS: &[&str] = &[
    "-",
    "1e999",
    "-0",
    "0.5",
    "18446744073709551616",
    "null",
    "true",
    "\"",
    "\\",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    "\n",
    "\r\n",
    "\"hash_ids\": ",
    "\"timestamp\": ",
    "\"session_id\": [",
    "\u{0}",
    "\u{fffd}",
    "\"delay\": -1",
    "4294967296",
    "[[[[[[[[",
    "\"input_length\": 0",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        any::<usize>().prop_map(Mutation::Delete),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), proptest::sample::select(FRAGMENTS))
            .prop_map(|(i, f)| Mutation::Splice(i, f)),
    ]
}

fn apply(buf: &mut Vec<u8>, m: &Mutation) {
    if buf.is_empty() {
        return;
    }
    match *m {
        Mutation::Flip(i, b) => {
            let n = buf.len();
            buf[i % n] ^= b;
        }
        Mutation::Insert(i, b) => {
            let n = buf.len();
            buf.insert(i % (n + 1), b);
        }
        Mutation::Delete(i) => {
            let n = buf.len();
            buf.remove(i % n);
        }
        Mutation::Truncate(i) => {
            let n = buf.len();
            buf.truncate(i % (n + 1));
        }
        Mutation::Splice(i, f) => {
            let n = buf.len();
            let at = i % (n + 1);
            buf.splice(at..at, f.bytes());
        }
    }
}

fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        any::<u64>().prop_map(|v| v.to_string()),
        any::<i64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        "[a-z0-9 ]{0,8}".prop_map(|s| format!("\"{s}\"")),
        Just("null".to_string()),
        Just("false".to_string()),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4)
                .prop_map(|v| format!("[{}]", v.join(", "))),
            proptest::collection::vec(("[a-z_]{1,14}", inner), 0..4).prop_map(|kv| {
                let body: Vec<String> = kv
                    .into_iter()
                    .map(|(k, v)| format!("\"{k}\": {v}"))
                    .collect();
                format!("{{{}}}", body.join(", "))
            }),
        ]
    })
}

fn record() -> impl Strategy<Value = String> {
    let key = proptest::sample::select(
        &[
            "timestamp",
            "input_length",
            "output_length",
            "hash_ids",
            "session_id",
            "delay",
            "other",
        ][..],
    );
    proptest::collection::vec((key, json_value()), 0..8).prop_map(|kv| {
        let body: Vec<String> = kv
            .into_iter()
            .map(|(k, v)| format!("\"{k}\": {v}"))
            .collect();
        format!("{{{}}}", body.join(", "))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600), skip in any::<bool>()) {
        check(&bytes, skip, 64);
        check(&bytes, skip, 1 << 20);
    }

    #[test]
    fn mutated_valid_lines_never_panic(muts in proptest::collection::vec(mutation(), 1..6), skip in any::<bool>()) {
        let mut buf = valid_lines();
        for m in &muts {
            apply(&mut buf, m);
        }
        check(&buf, skip, 1 << 20);
        check(&buf, skip, 200);
    }

    #[test]
    fn mutated_azure_csv_never_panics(muts in proptest::collection::vec(mutation(), 1..6), skip in any::<bool>()) {
        let mut buf = b"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,4808,10\n2023-11-16 18:15:47.0000000+01:00,100,2\n3.5,7,7\n".to_vec();
        for m in &muts {
            apply(&mut buf, m);
        }
        check_format(&buf, skip, 1 << 20, TraceFormat::AzureCsv);
        check_format(&buf, skip, 40, TraceFormat::AzureCsv);
    }

    #[test]
    fn structured_records_never_panic(lines in proptest::collection::vec(record(), 1..6), skip in any::<bool>()) {
        let text = lines.join("\n");
        check(text.as_bytes(), skip, 1 << 20);
    }
}

#[test]
fn unmutated_lines_are_all_accepted() {
    let buf = valid_lines();
    let items: Vec<_> = TraceReader::new(&buf[..], ReaderOptions::new("fuzz.jsonl"))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(items.len(), 5);
}
