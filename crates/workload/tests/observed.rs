//! The observed-run readers on the committed samples (values checked),
//! format detection, located errors, token-id numbering, and arbitrary
//! bytes never panicking.

use handoff_workload::observed::{
    parse_observed, read_observed, BenchArray, Location, ObservedError, ObservedFormat,
    ObservedOptions, ObservedRun, PlainField, Problem,
};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn sample(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/observed")
        .join(name)
}

fn parse(name: &str, text: &str, format: ObservedFormat) -> Result<ObservedRun, ObservedError> {
    let options = ObservedOptions {
        format,
        block_size: 2,
        record: None,
    };
    parse_observed(Path::new(name), text, &options)
}

/// The error's location and problem, and its message.
fn fail(name: &str, text: &str, format: ObservedFormat) -> (Location, Problem, String) {
    let e = parse(name, text, format).expect_err("the input is refused");
    let shown = e.to_string();
    assert!(shown.starts_with(&format!("{name}: ")), "{shown}");
    (e.location().unwrap(), e.problem().unwrap().clone(), shown)
}

const LINE: &str =
    r#"{"arrival": 1, "first_token": 1.5, "last_token": 2, "input_tokens": 4, "output_tokens": 3}"#;

#[test]
fn plain_jsonl_is_read_sorted_with_token_ids_numbered_in_arrival_order() {
    let run = read_observed(&sample("plain.jsonl"), ObservedFormat::Auto, 2).unwrap();
    assert_eq!(run.format, ObservedFormat::Plain);
    assert_eq!(run.skipped_failed, 0);
    let ids: Vec<&str> = run.requests.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["r0", "r1", "r2"]);
    let r0 = &run.requests[0];
    assert_eq!(r0.arrival_s, 100.0);
    assert_eq!((r0.input_tokens, r0.output_tokens), (5, 11));
    assert_eq!(r0.ttft_ms, 250.0);
    assert_eq!(r0.e2e_ms, 1250.0);
    // scheduled - queued.
    assert!((r0.queue_ms.unwrap() - 40.0).abs() < 1e-9);
    assert_eq!(r0.tpot_ms(), Some(100.0));
    // r1 shares r0's first two blocks, then its full third block differs
    // from r0's partial one; r2 shares only the first block.
    assert_eq!(r0.hash_ids, Some(vec![0, 1, 2]));
    assert_eq!(run.requests[1].hash_ids, Some(vec![0, 1, 3]));
    assert_eq!(run.requests[1].queue_ms, Some(0.0));
    assert_eq!(run.requests[2].hash_ids, Some(vec![0, 4]));
    assert_eq!(run.requests[2].queue_ms, None);
    assert_eq!(run.requests[2].tpot_ms(), None);
}

#[test]
fn plain_csv_is_read_with_space_separated_hash_ids() {
    let run = read_observed(&sample("plain.csv"), ObservedFormat::Auto, 512).unwrap();
    assert_eq!(run.format, ObservedFormat::Plain);
    let ids: Vec<&str> = run.requests.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["b", "a", "c"]);
    let b = &run.requests[0];
    assert_eq!((b.arrival_s, b.ttft_ms, b.e2e_ms), (0.0, 125.0, 625.0));
    assert_eq!(b.hash_ids, Some(vec![7, 9]));
    assert!((b.queue_ms.unwrap() - 10.0).abs() < 1e-9);
    assert_eq!(run.requests[1].hash_ids, Some(vec![7, 8]));
    assert_eq!(run.requests[2].hash_ids, None);
    assert_eq!(run.requests[2].e2e_ms, 500.0);
}

#[test]
fn trace_items_are_the_requests_in_order_like_a_mooncake_line() {
    let run = read_observed(&sample("plain.csv"), ObservedFormat::Plain, 512).unwrap();
    let items = run.trace_items();
    assert_eq!(items.len(), 3);
    for (i, item) in items.iter().enumerate() {
        let r = &item.request;
        assert_eq!(r.id.0, i as u64);
        assert_eq!(r.prompt_tokens, run.requests[i].input_tokens);
        assert_eq!(r.max_output_tokens, run.requests[i].output_tokens);
        assert_eq!(r.hash_block_tokens, 512);
        assert_eq!((item.turn, item.delay, r.session), (None, None, None));
    }
    // Arrivals count from the first request's.
    assert_eq!(items[0].request.arrival.0, 0);
    assert_eq!(items[1].request.arrival.0, 500_000_000);
    assert_eq!(items[2].request.arrival.0, 1_500_000_000);
    assert_eq!(items[0].request.prefix_hashes, vec![7, 9]);
    // Without hashes, no prefix: every block is the request's own.
    assert!(items[2].request.prefix_hashes.is_empty());
}

#[test]
fn vllm_bench_is_read_skipping_failures() {
    let run = read_observed(&sample("vllm_bench.json"), ObservedFormat::Auto, 16).unwrap();
    assert_eq!(run.format, ObservedFormat::VllmBench);
    assert_eq!(run.skipped_failed, 1);
    let ids: Vec<&str> = run.requests.iter().map(|r| r.id.as_str()).collect();
    // By start time: request 4 was sent between 0 and 1.
    assert_eq!(ids, ["0", "4", "1", "2"]);
    let r0 = &run.requests[0];
    assert_eq!(r0.arrival_s, 12345.5);
    assert_eq!((r0.input_tokens, r0.output_tokens), (100, 4));
    assert_eq!((r0.ttft_ms, r0.e2e_ms), (250.0, 750.0));
    assert_eq!(r0.queue_ms, None);
    assert_eq!(r0.hash_ids, None);
    assert_eq!(r0.tpot_ms(), Some(500.0 / 3.0));
    let r2 = &run.requests[3];
    assert_eq!((r2.ttft_ms, r2.e2e_ms, r2.output_tokens), (125.0, 125.0, 1));
    let items = run.trace_items();
    assert_eq!(items[1].request.arrival.0, 125_000_000);
}

#[test]
fn vllm_bench_without_latencies_sums_itls() {
    let text = std::fs::read_to_string(sample("vllm_bench.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("latencies");
    let run = parse("r.json", &v.to_string(), ObservedFormat::VllmBench).unwrap();
    let e2e: Vec<f64> = run.requests.iter().map(|r| r.e2e_ms).collect();
    assert_eq!(e2e, [750.0, 875.0, 1000.0, 125.0]);
}

#[test]
fn vllm_bench_without_details_or_start_times_is_refused() {
    let text = std::fs::read_to_string(sample("vllm_bench.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut summary = v.clone();
    for k in [
        "input_lens",
        "output_lens",
        "start_times",
        "ttfts",
        "itls",
        "errors",
    ] {
        summary.as_object_mut().unwrap().remove(k);
    }
    let (at, p, shown) = fail("r.json", &summary.to_string(), ObservedFormat::Auto);
    assert_eq!(at, Location::Record { line: 1 });
    assert_eq!(
        p,
        Problem::NoDetails {
            flag: "--save-detailed"
        }
    );
    assert!(shown.contains("--save-detailed"), "{shown}");
    let mut old = v;
    old.as_object_mut().unwrap().remove("start_times");
    let (at, p, shown) = fail("r.json", &old.to_string(), ObservedFormat::VllmBench);
    assert!(matches!(
        at,
        Location::Array {
            array: BenchArray::StartTimes,
            index: None,
            ..
        }
    ));
    assert!(matches!(p, Problem::NoArrivals { .. }));
    assert!(shown.contains("start_times: missing"), "{shown}");
}

#[test]
fn sglang_bench_names_the_missing_arrivals() {
    let path = sample("sglang_bench.jsonl");
    let e = read_observed(&path, ObservedFormat::Auto, 16).unwrap_err();
    let shown = e.to_string();
    assert!(matches!(
        e.location(),
        Some(Location::Array {
            line: 2,
            array: BenchArray::StartTimes,
            index: None
        })
    ));
    assert!(shown.contains("start_times: missing"), "{shown}");
    assert!(shown.contains("SGLang"), "{shown}");
}

#[test]
fn sglang_bench_with_start_times_is_read_from_the_chosen_line() {
    let text = std::fs::read_to_string(sample("sglang_bench.jsonl")).unwrap();
    let patched: String = text
        .lines()
        .map(|l| {
            let starts = r#""start_times": [5.0, 5.25, 5.5, 5.75, 6.0], "ttfts""#;
            format!("{}\n", l.replacen("\"ttfts\"", starts, 1))
        })
        .collect();
    let run = parse("s.jsonl", &patched, ObservedFormat::Auto).unwrap();
    assert_eq!(run.format, ObservedFormat::SglangBench);
    assert_eq!(run.skipped_failed, 1);
    let r = &run.requests[3];
    assert_eq!((r.id.as_str(), r.arrival_s, r.e2e_ms), ("4", 6.0, 875.0));
    let options = ObservedOptions {
        format: ObservedFormat::SglangBench,
        block_size: 16,
        record: Some(3),
    };
    let e = parse_observed(Path::new("s.jsonl"), &patched, &options).unwrap_err();
    assert_eq!(
        e.problem(),
        Some(&Problem::NoSuchRecord {
            asked: 3,
            records: 2
        })
    );
}

#[test]
fn auto_detection_tells_the_formats_apart() {
    let auto = |name: &str, text: &str| parse(name, text, ObservedFormat::Auto).map(|r| r.format);
    assert_eq!(auto("x.jsonl", LINE).unwrap(), ObservedFormat::Plain);
    let csv = "arrival,first_token,last_token,input_tokens,output_tokens\n0,1,2,3,4\n";
    assert_eq!(auto("x.txt", csv).unwrap(), ObservedFormat::Plain);
    let (at, p, _) = fail("x.json", r#"{"foo": 1}"#, ObservedFormat::Auto);
    assert_eq!((at, p), (Location::File, Problem::Undetected));
    let (_, p, _) = fail("x.json", "hello", ObservedFormat::Auto);
    assert_eq!(p, Problem::Undetected);
    assert_eq!("sglang".parse(), Ok(ObservedFormat::SglangBench));
    assert!("vllm-bench".parse::<ObservedFormat>().is_err());
}

#[test]
fn plain_errors_name_line_and_field() {
    let plain = ObservedFormat::Plain;
    let two = |second: &str| format!("{LINE}\n{second}\n");
    let (at, p, shown) = fail("p.jsonl", &two("{\"arrival\": "), plain);
    assert_eq!(
        at,
        Location::Line {
            line: 2,
            field: None
        }
    );
    assert!(matches!(p, Problem::Syntax(_)), "{shown}");
    let missing = LINE.replace(r#", "output_tokens": 3"#, "");
    let (at, p, shown) = fail("p.jsonl", &two(&missing), plain);
    let output = Some(PlainField::OutputTokens);
    assert_eq!(
        (at, p),
        (
            Location::Line {
                line: 2,
                field: output
            },
            Problem::Missing
        )
    );
    assert_eq!(shown, "p.jsonl: line 2: output_tokens: missing");
    let typo = LINE.replace("\"arrival\"", "\"arival\"");
    let (_, p, shown) = fail("p.jsonl", &typo, plain);
    assert_eq!(p, Problem::UnknownKey("arival".into()));
    assert!(
        shown.starts_with("p.jsonl: line 1: unknown key \"arival\""),
        "{shown}"
    );
    let late = LINE.replace("\"first_token\": 1.5", "\"first_token\": 2.5");
    let (at, p, _) = fail("p.jsonl", &late, plain);
    let field = Some(PlainField::LastToken);
    assert_eq!(at, Location::Line { line: 1, field });
    assert_eq!(
        p,
        Problem::FirstAfterLast {
            first: 2.5,
            last: 2.0
        }
    );
    let negative = LINE.replace("\"arrival\": 1", "\"arrival\": -1");
    assert_eq!(fail("p.jsonl", &negative, plain).1, Problem::Negative);
    let nan = "arrival,first_token,last_token,input_tokens,output_tokens\nNaN,1,2,3,4\n";
    let (at, p, _) = fail("p.csv", nan, plain);
    let field = Some(PlainField::Arrival);
    assert_eq!(
        (at, p),
        (Location::Line { line: 2, field }, Problem::NonFinite)
    );
    let dup = format!("{}, \"arrival\": 1}}", &LINE[..LINE.len() - 1]);
    assert_eq!(fail("p.jsonl", &dup, plain).1, Problem::Duplicate);
    let both = LINE.replace("}", r#", "hash_ids": [1], "token_ids": [1]}"#);
    assert_eq!(fail("p.jsonl", &both, plain).1, Problem::BothPrefixes);
    let hashed = LINE.replace("}", r#", "hash_ids": [1]}"#);
    let tokened = LINE.replace("}", r#", "token_ids": [1]}"#);
    let (at, p, _) = fail("p.jsonl", &format!("{hashed}\n{tokened}\n"), plain);
    let field = Some(PlainField::TokenIds);
    assert_eq!(at, Location::Line { line: 2, field });
    assert_eq!(p, Problem::MixedPrefixes { other_line: 1 });
}

#[test]
fn plain_csv_errors_name_the_header_or_the_row() {
    let plain = ObservedFormat::Plain;
    let (at, p, _) = fail(
        "p.csv",
        "arrival,first_token,last_token,input_tokens,outputs\n",
        plain,
    );
    assert_eq!(at, Location::Header { field: None });
    assert_eq!(p, Problem::UnknownColumn("outputs".into()));
    let (at, p, _) = fail(
        "p.csv",
        "arrival,first_token,last_token,input_tokens\n",
        plain,
    );
    let field = Some(PlainField::OutputTokens);
    assert_eq!((at, p), (Location::Header { field }, Problem::Missing));
    let short = "arrival,first_token,last_token,input_tokens,output_tokens\n0,1,2,3\n";
    let (at, p, _) = fail("p.csv", short, plain);
    assert_eq!(
        at,
        Location::Line {
            line: 2,
            field: None
        }
    );
    assert_eq!(
        p,
        Problem::FieldCount {
            got: 4,
            expected: 5
        }
    );
    let zero = "arrival,first_token,last_token,input_tokens,output_tokens\n0,1,2,0,4\n";
    assert_eq!(fail("p.csv", zero, plain).1, Problem::Zero);
    let big = "arrival,first_token,last_token,input_tokens,output_tokens\n0,1,2,1000001,4\n";
    let p = fail("p.csv", big, plain).1;
    assert_eq!(p, Problem::TooLarge { max: 1_000_000 });
}

#[test]
fn bench_errors_name_the_array_and_element() {
    let text = std::fs::read_to_string(sample("vllm_bench.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let with = |key: &str, value: serde_json::Value| {
        let mut v = v.clone();
        v[key] = value;
        v.to_string()
    };
    let vllm = ObservedFormat::VllmBench;
    let short = with("ttfts", serde_json::json!([0.25, 0.5]));
    let (at, p, shown) = fail("r.json", &short, vllm);
    let array = BenchArray::Ttfts;
    let whole = Location::Array {
        line: 1,
        array,
        index: None,
    };
    assert_eq!(
        (at, p),
        (
            whole,
            Problem::UnequalLength {
                len: 2,
                expected: 5
            }
        )
    );
    assert_eq!(
        shown,
        "r.json: record at line 1: ttfts: 2 elements, but input_lens has 5"
    );
    let negative = with("start_times", serde_json::json!([1.0, -2.0, 3.0, 4.0, 5.0]));
    let (at, p, shown) = fail("r.json", &negative, vllm);
    let array = BenchArray::StartTimes;
    let index = Some(1);
    assert_eq!(
        (at, p),
        (
            Location::Array {
                line: 1,
                array,
                index
            },
            Problem::Negative
        )
    );
    assert!(shown.contains("start_times[1]: negative"), "{shown}");
    // Python's bare NaN token is read, and refused where a time belongs.
    let nan = text.replace("\"ttfts\": [0.25", "\"ttfts\": [NaN");
    let (at, p, _) = fail("r.json", &nan, vllm);
    let (array, index) = (BenchArray::Ttfts, Some(0));
    assert_eq!(
        (at, p),
        (
            Location::Array {
                line: 1,
                array,
                index
            },
            Problem::NonFinite
        )
    );
    let first_after_last = with(
        "latencies",
        serde_json::json!([0.1, 1.0, 0.125, 0.0, 0.875]),
    );
    let (_, p, _) = fail("r.json", &first_after_last, vllm);
    assert_eq!(
        p,
        Problem::FirstAfterLast {
            first: 0.25,
            last: 0.1
        }
    );
    let (at, p, _) = fail("r.json", "[1, 2]", vllm);
    assert_eq!(
        (at, p),
        (Location::Record { line: 1 }, Problem::NotAnObject)
    );
    let (at, p, _) = fail("r.json", "", vllm);
    assert_eq!((at, p), (Location::File, Problem::Empty));
}

#[test]
fn a_missing_file_is_a_file_error() {
    let e = read_observed(Path::new("/nonexistent/run.json"), ObservedFormat::Auto, 16);
    assert!(matches!(e, Err(ObservedError::File(_))));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let text = String::from_utf8_lossy(&bytes);
        for format in ObservedFormat::ALL {
            for name in ["x.json", "x.csv"] {
                if let Ok(run) = parse(name, &text, format) {
                    prop_assert!(run.requests.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
                    prop_assert!(run.requests.iter().all(|r| r.ttft_ms <= r.e2e_ms));
                    let _ = run.trace_items();
                }
            }
        }
    }

    #[test]
    fn plain_like_lines_never_panic(
        fields in proptest::collection::vec(
            (0usize..12, prop_oneof![
                Just("1".to_string()), Just("-1".to_string()), Just("NaN".to_string()),
                Just("1e400".to_string()), Just("[1, 2]".to_string()), Just("\"a\"".to_string()),
                Just("null".to_string()), Just("0.5".to_string()), Just("18446744073709551616".to_string()),
            ]),
            0..12,
        )
    ) {
        let keys = ["id", "arrival", "first_token", "last_token", "input_tokens", "output_tokens",
            "queued", "scheduled", "hash_ids", "token_ids", "x", "arrival"];
        let body: Vec<String> = fields.iter().map(|(k, v)| format!("\"{}\": {v}", keys[*k])).collect();
        let line = format!("{{{}}}", body.join(", "));
        let _ = parse("p.jsonl", &line, ObservedFormat::Plain);
        let _ = parse("p.jsonl", &line, ObservedFormat::Auto);
    }
}
