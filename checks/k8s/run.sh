#!/usr/bin/env bash
# Validates every manifest under deploy/k8s/ offline (checks/k8s/validate.py):
# the Kubernetes JSON schemas that kubernetes-validate ships, strict, at the
# oldest and newest versions named there; InferencePool against
# inferencepool-v1.schema.json; then the cross-object checks. Its
# self-test breaks copies of the manifests in a dozen ways, each of which
# must be rejected, and a broken copy of the folder on disk must fail the whole
# run. The venv (target/venv-k8s, pinned) needs PyPI once; the validation
# then runs in a network namespace with no network at all, so nothing is
# fetched. Once the binary has the one-engine-per-process `serve --engine`,
# the engine pods' flags are checked against its `serve --help`; before, against
# the flags issue 40 names. About 10 s; 30 s when it first makes the venv.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=target/venv-k8s
PY=$VENV/bin/python
if ! "$PY" -c "from importlib.metadata import version as v
assert v('kubernetes-validate') == '1.37.0' and v('jsonschema') == '4.26.0' and v('PyYAML') == '6.0.4'" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q kubernetes-validate==1.37.0 jsonschema==4.26.0 PyYAML==6.0.4
fi
OFFLINE=()
if unshare --net true 2>/dev/null; then
    OFFLINE=(unshare --net)
else
    echo "k8s check: no network namespace here; validating with the network up" >&2
fi
ARGS=()
BIN=${HANDOFF_MOCKER:-target/release/handoff-mocker}
HELP=target/k8s-serve-help.txt
if [ -x "$BIN" ] && "$BIN" serve --help > "$HELP" 2>/dev/null && grep -q -- '--engine' "$HELP"; then
    ARGS=(--serve-help "$HELP")
fi
"${OFFLINE[@]}" "$PY" checks/k8s/validate.py --self-test "${ARGS[@]}" deploy/k8s
# A broken copy of the folder on disk: a Deployment whose replicas is a string.
BROKEN=$(mktemp -d)
trap 'rm -rf "$BROKEN"' EXIT
cp -r deploy/k8s/. "$BROKEN/"
sed -i '0,/replicas: 2/s//replicas: "2"/' "$BROKEN/vllm-pd.yaml"
if "${OFFLINE[@]}" "$PY" checks/k8s/validate.py "${ARGS[@]}" "$BROKEN" > "$BROKEN.log" 2>&1; then
    echo "k8s check: a copy with replicas: \"2\" validated" >&2
    exit 1
fi
grep -qF "vllm-pd.yaml: Deployment/vllm-prefill: spec.replicas: '2' is not of type 'integer'" "$BROKEN.log" \
    || { cat "$BROKEN.log" >&2; echo "k8s check: the broken copy failed for another reason" >&2; exit 1; }
rm -f "$BROKEN.log"
echo "k8s check: a broken copy on disk is rejected"
