//! ARCHITECTURE.md stays true in what a test can see: every path it names
//! from the repository root exists, and it stays short.

use std::path::Path;

const ROOTS: [&str; 8] = [
    "crates/",
    "tests/",
    "xtask/",
    "docs/",
    "profiles/",
    "checks/",
    "examples/",
    "fuzz/",
];

/// The backticked spans of `text` that name a path from the repository
/// root.
fn root_paths(text: &str) -> Vec<&str> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| ROOTS.iter().any(|r| s.starts_with(r)) && !s.contains(' '))
        .collect()
}

#[test]
fn every_path_architecture_names_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let paths = root_paths(&text);
    assert!(paths.len() > 40, "only {} paths found", paths.len());
    let missing: Vec<&str> = paths
        .into_iter()
        .filter(|p| !root.join(p).exists())
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md names missing paths: {missing:?}"
    );
    assert!(
        text.lines().count() <= 300,
        "ARCHITECTURE.md is over 300 lines"
    );
}

#[test]
fn the_path_reader_finds_only_backticked_root_paths() {
    let p = root_paths("see `crates/x.rs` and `step.rs`, not crates/y.rs or `a b`");
    assert_eq!(p, vec!["crates/x.rs"]);
}
