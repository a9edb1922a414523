#!/usr/bin/env bash
# Builds handoff-fuzz with LLVM SanitizerCoverage edge counters on the stable
# toolchain and runs it with the given arguments, e.g.
#   fuzz/coverage.sh all --iterations 1000000 --seed 1
# The fuzzer then keeps inputs that reach new edges (see fuzz/src/coverage.rs).
#
# The flags are what cargo-fuzz passes minus its nightly-only sanitizer; the
# explicit --target keeps them off build scripts and proc macros (which
# would otherwise be instrumented without the callback the fuzzer defines),
# and puts the instrumented build in its own directory,
# $CARGO_TARGET_DIR/<host>/release, apart from the ordinary one.
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=3 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters ${RUSTFLAGS:-}"
cargo build --release -q -p handoff-fuzz --target "$host"
exec "${CARGO_TARGET_DIR:-target}/$host/release/handoff-fuzz" "$@"
