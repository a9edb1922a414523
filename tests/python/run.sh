#!/usr/bin/env bash
# Real-client tests of `handoff-mocker serve`: the official `openai` client,
# a pyzmq + msgspec KV event subscriber with vLLM's struct layout, the
# Prometheus OpenMetrics parser, and SGLang's PD router (sglang-router
# 0.3.2) in front of the per-worker listeners. Creates a venv under
# target/venv on first use. HANDOFF_MOCKER=path overrides the binary
# (default: a release build).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=target/venv
if ! "$VENV/bin/python" -c "import openai, zmq, msgspec, prometheus_client, requests, sglang_router
from importlib.metadata import version
assert version('sglang-router') == '0.3.2'" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q openai pyzmq msgspec prometheus_client requests sglang-router==0.3.2
fi
if [ -z "${HANDOFF_MOCKER:-}" ]; then
    cargo build --release --locked -q -p handoff-mocker
    HANDOFF_MOCKER="${CARGO_TARGET_DIR:-target}/release/handoff-mocker"
fi
export HANDOFF_MOCKER
rc=0
timeout 300 "$VENV/bin/python" tests/python/test_serve.py || rc=1
timeout 300 "$VENV/bin/python" tests/python/test_sglang_pd.py || rc=1
exit $rc
