#!/usr/bin/env bash
# The image as a user runs it: built from the release binary
# (deploy/image/build-local.sh), started with podman on loopback, asked for
# a completion, its /metrics read and one KV event received on its ZMQ
# port, then stopped with SIGTERM (it must exit 0). Prints the image's
# size. Needs podman and runc (installed here from Debian if missing) and
# target/venv's pyzmq (tests/python/run.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v podman > /dev/null && command -v runc > /dev/null \
    || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc > /dev/null)
export PODMAN="podman --storage-driver vfs --runtime runc"
PY=target/venv/bin/python
"$PY" -c "import zmq" || { echo "image check: $PY with pyzmq is needed (tests/python/run.sh)" >&2; exit 1; }
TAG=$(deploy/image/build-local.sh "${1:-target/release/handoff-mocker}" localhost/handoff-mocker:ci)
SIZE=$($PODMAN image inspect --format '{{.Size}}' "$TAG")
echo "image $TAG: $SIZE bytes ($((SIZE / 1024 / 1024)) MiB) uncompressed"
read -r HTTP ZMQ REPLAY < <("$PY" - <<'PY'
import socket
ports = []
socks = []
for _ in range(3):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); ports.append(s.getsockname()[1]); socks.append(s)
print(*ports)
PY
)
NAME=handoff-mocker-ci-$$
$PODMAN run -d --name "$NAME" --network host \
    --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$TAG" \
    serve --prefill 1 --decode 0 --http "127.0.0.1:$HTTP" \
    --kv-events "tcp://127.0.0.1:$ZMQ" --kv-replay "tcp://127.0.0.1:$REPLAY" > /dev/null
cleanup() { $PODMAN rm -f "$NAME" > /dev/null 2>&1 || true; }
trap cleanup EXIT
"$PY" - "$HTTP" "$ZMQ" <<'PY'
import json, sys, time, urllib.request, zmq
http, zport = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{http}"
deadline = time.time() + 30
while True:
    try:
        urllib.request.urlopen(base + "/ready", timeout=1).read()
        break
    except Exception:
        if time.time() > deadline:
            sys.exit("the container never became ready")
        time.sleep(0.2)
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.setsockopt(zmq.RCVTIMEO, 10000)
sub.connect(f"tcp://127.0.0.1:{zport}")
time.sleep(0.5)  # the subscription reaches the publisher first
body = json.dumps({"model": "handoff-mocker", "prompt": "hello " * 64, "max_tokens": 8}).encode()
req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
resp = json.load(urllib.request.urlopen(req, timeout=30))
assert resp["usage"]["completion_tokens"] == 8, resp
frames = sub.recv_multipart()
assert len(frames) == 3 and len(frames[2]) > 0, frames
metrics = urllib.request.urlopen(base + "/metrics", timeout=5).read().decode()
assert "vllm:num_requests_running" in metrics and "vllm:e2e_request_latency_seconds" in metrics
print(f"image check: completion ok ({resp['usage']['prompt_tokens']} prompt tokens), "
      f"a {len(frames[2])}-byte KV event batch, /metrics has the engine's names")
PY
$PODMAN stop -t 20 "$NAME" > /dev/null
CODE=$($PODMAN inspect --format '{{.State.ExitCode}}' "$NAME")
if [ "$CODE" != 0 ]; then
    $PODMAN logs "$NAME" | tail -20 >&2
    echo "image check: the container exited $CODE after SIGTERM" >&2
    exit 1
fi
echo "image check: stopped with SIGTERM, exit 0"
