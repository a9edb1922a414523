#!/usr/bin/env bash
# Times handoff-mocker against Dynamo's mocker 1.6.1 (src/main.rs, built
# from crates.io with this folder's lockfile) on the same Mooncake trace
# with matched settings: Dynamo's MockerConfig defaults (vLLM workers, 64-
# token blocks, 16,384 blocks, 256 sequences, 8,192 batched tokens, its
# polynomial), the trace's 512-token hash blocks, its kv router; for
# handoff-mocker the same limits and, disaggregated, an instant transfer.
# Prints each run's wall and CPU seconds and peak RSS (/usr/bin/time -v),
# their medians, the wall ratio handoff/dynamo, and both reports' latencies.
#
#   bash checks/dynamo-mocker/run.sh TRACE [RUNS]
#
# HANDOFF_MOCKER=path overrides the binary (default: a release build of the
# workspace). Not in CI: Dynamo's tree builds for minutes.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
trace="${1:?usage: run.sh TRACE [RUNS]}"
runs="${2:-3}"
if [ -z "${HANDOFF_MOCKER:-}" ]; then
    (cd "$root" && cargo build --release --locked -q -p handoff-mocker)
    HANDOFF_MOCKER="$target/release/handoff-mocker"
fi
if [ -z "${DYNAMO_MOCKER_BENCH:-}" ]; then
    (cd "$root/checks/dynamo-mocker" && CARGO_TARGET_DIR="$target/dynamo-mocker-bench" \
        cargo build --release --locked -q)
    DYNAMO_MOCKER_BENCH="$target/dynamo-mocker-bench/release/dynamo-mocker-bench"
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
matched=(--trace "$trace" --trace-block-size 512 --router kv --block-size 64
    --prefill-kv-tokens 1048576 --decode-kv-tokens 1048576 --max-running 256
    --max-batched-tokens 8192 --perf dynamo-polynomial --json)
instant=(--transfer fixed --transfer-ms 0 --message-latency-us 0)
# name | handoff-mocker flags | Dynamo's arguments
cases=(
    "disagg-4p4d|--prefill 4 --decode 4 ${instant[*]}|disagg 4 4 kv"
    "agg-8|--prefill 8 --decode 0|agg 8 kv"
)
timed() { # OUT CMD...: the command's stdout to OUT, "wall cpu rss_mib" printed
    local o="$1"; shift
    /usr/bin/time -v -o "$o.time" "$@" > "$o"
    awk -F': ' '/Elapsed \(wall/ {n=split($2,t,":"); w=(n==3)?t[1]*3600+t[2]*60+t[3]:t[1]*60+t[2]}
        /User time/ {u=$2} /System time/ {s=$2} /Maximum resident/ {m=$2/1024}
        END {printf "%.3f %.3f %.1f\n", w, u+s, m}' "$o.time"
}
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2)?v[(NR+1)/2]:(v[NR/2]+v[NR/2+1])/2}'; }
for c in "${cases[@]}"; do
    IFS='|' read -r name flags dyn <<< "$c"
    : > "$out/h"; : > "$out/d"
    for r in $(seq "$runs"); do
        # shellcheck disable=SC2086
        timed "$out/h.json" "$HANDOFF_MOCKER" replay "${matched[@]}" $flags >> "$out/h"
        # shellcheck disable=SC2086
        timed "$out/d.json" "$DYNAMO_MOCKER_BENCH" "$trace" $dyn >> "$out/d"
    done
    echo "== $name ($runs runs each, alternating): wall s, cpu s, peak MiB per run"
    echo "handoff-mocker: $(tr '\n' ';' < "$out/h")"
    echo "dynamo-mocker:  $(tr '\n' ';' < "$out/d")"
    hw=$(cut -d' ' -f1 "$out/h" | median); dw=$(cut -d' ' -f1 "$out/d" | median)
    hc=$(cut -d' ' -f2 "$out/h" | median); dc=$(cut -d' ' -f2 "$out/d" | median)
    hm=$(cut -d' ' -f3 "$out/h" | median); dm=$(cut -d' ' -f3 "$out/d" | median)
    echo "medians: handoff wall $hw cpu $hc rss $hm | dynamo wall $dw cpu $dc rss $dm"
    awk -v a="$hw" -v b="$dw" -v c="$hc" -v d="$dc" \
        'BEGIN {printf "handoff/dynamo: wall %.3f cpu %.3f\n", a/b, c/d}'
    python3 - "$out/h.json" "$out/d.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1])); d = json.load(open(sys.argv[2]))
print("dynamo report:", json.dumps({k: v for k, v in d.items() if k != "wall_s"}))
lat = {m: {s: h.get(f"{s}_{m}_ms") for s in ("mean", "median", "p90", "p99")}
       for m in ("ttft", "ttst", "tpot", "itl")}
print("handoff report:", json.dumps({"requests": h.get("completed_requests"),
      "duration_ms": h.get("duration_ms"), **lat}))
names = {"mean": "mean", "median": "p50", "p90": "p90", "p99": "p99"}
worst = max(
    (abs(lat[m][s] - d[f"{m}_ms"][names[s]]) / d[f"{m}_ms"][names[s]], f"{m} {s}")
    for m in lat for s in lat[m] if d[f"{m}_ms"][names[s]])
print(f"agreement: largest latency difference {worst[0]:.1%} ({worst[1]}); "
      f"requests {h.get('completed_requests')} / {d['requests']}")
PY
done
