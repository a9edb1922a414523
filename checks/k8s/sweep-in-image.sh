#!/usr/bin/env bash
# Runs deploy/k8s/sweep/'s Jobs as a cluster would, in the image with podman:
# each shard of sweep-job.yaml with its arguments read from the file and its
# completion index put for $(SHARD_INDEX), then merge-job.yaml's arguments,
# as the image's user (65532) with a read-only root, no network and a
# shared folder as /out. The merged summary.json must be byte-identical to
# the unsharded sweep's. Needs podman and runc (checks/image/run.sh installs
# them) and target/venv-k8s (checks/k8s/run.sh makes it). About 10 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/handoff-mocker}
PY=target/venv-k8s/bin/python
export PODMAN="podman --storage-driver vfs --runtime runc"
TAG=$(deploy/image/build-local.sh "$BIN" localhost/handoff-mocker:k8s-sweep)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
mkdir "$OUT/shared" "$OUT/whole"
chown 65532:65532 "$OUT/shared"   # what the Jobs' fsGroup does for the volume
# One line a pod: the Job's arguments, tab-separated; the last line is the
# unsharded sweep's (the shard's flags without --shard and --out).
"$PY" - > "$OUT/pods.tsv" <<'PY'
import re, yaml
def args(path):
    job = next(d for d in yaml.safe_load_all(open(path)) if d and d["kind"] == "Job")
    return job["spec"], job["spec"]["template"]["spec"]["containers"][0]["args"]
spec, sweep = args("deploy/k8s/sweep/sweep-job.yaml")
for i in range(spec["completions"]):
    print("\t".join(re.sub(r"\$\(SHARD_INDEX\)", str(i), a) for a in sweep))
print("\t".join(args("deploy/k8s/sweep/merge-job.yaml")[1]))
whole, skip = [], 0
for a in sweep:
    if skip:
        skip -= 1
    elif a in ("--shard", "--out"):
        skip = 1
    else:
        whole.append(a)
print("\t".join(whole))
PY
PODS=$(($(wc -l < "$OUT/pods.tsv") - 1))
head -n "$PODS" "$OUT/pods.tsv" | while IFS=$'\t' read -r -a ARGS; do
    $PODMAN run --rm --network none --read-only --user 65532:65532 \
        --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 \
        -v "$OUT/shared:/out" "$TAG" "${ARGS[@]}" 2> "$OUT/pod.log" \
        || { cat "$OUT/pod.log" >&2; echo "sweep in image: a pod failed: ${ARGS[*]}" >&2; exit 1; }
done
IFS=$'\t' read -r -a WHOLE < <(tail -n 1 "$OUT/pods.tsv")
"$BIN" "${WHOLE[@]}" --out "$OUT/whole" 2> /dev/null
cmp "$OUT/shared/summary.json" "$OUT/whole/summary.json" \
    || { echo "sweep in image: the merged summary differs from the unsharded one" >&2; exit 1; }
echo "sweep in image: $((PODS - 1)) shard pods and the merge pod, summary.json byte-identical to the unsharded sweep"
