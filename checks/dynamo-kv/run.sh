#!/usr/bin/env bash
# Replays tests/data/conversation_2000.jsonl on 2 prefill + 2 decode workers
# with --backend vllm and --backend sglang, writes the Dynamo RouterEvent
# JSONL (--kv-events-out), and checks each file with Dynamo's own router
# code (see src/main.rs). Then the same for serve traffic on both backends
# (drive.py: HTTP requests through serve's front port and, with vLLM, the
# workers' own listeners; their token ids from serve's render endpoints;
# each worker's cached tokens once drained). HANDOFF_MOCKER=path overrides
# the binary (default: a release build of the workspace). Exits non-zero on
# any disagreement.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
if [ -z "${HANDOFF_MOCKER:-}" ]; then
    (cd "$root" && cargo build --release --locked -q -p handoff-mocker)
    HANDOFF_MOCKER="$target/release/handoff-mocker"
fi
(cd "$root/checks/dynamo-kv" && CARGO_TARGET_DIR="$target/dynamo-kv-check" \
    cargo build --release --locked -q)
check="$target/dynamo-kv-check/release/dynamo-kv-check"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
trace="$root/tests/data/conversation_2000.jsonl"
# The workers' KV event block sizes: vLLM's block (16), SGLang's event
# block (64 tokens over its page-1 radix cache).
for run in "vllm 16" "sglang 64"; do
    set -- $run
    "$HANDOFF_MOCKER" replay --backend "$1" --trace "$trace" --prefill 2 --decode 2 \
        --kv-events-out "$out/$1.jsonl" --json > "$out/$1.report.json"
    echo "== $1"
    "$check" --events "$out/$1.jsonl" --trace "$trace" --block-size "$2"
done
for run in "vllm 16" "sglang 64"; do
    set -- $run
    echo "== serve $1"
    python3 "$root/checks/dynamo-kv/drive.py" "$HANDOFF_MOCKER" "$1" "$out"
    "$check" --events "$out/serve-$1.jsonl" --prompts "$out/serve-$1.prompts.jsonl" \
        --cached "$out/serve-$1.workers.json" --block-size "$2"
done
