#!/usr/bin/env bash
# Real-client tests of `handoff-mocker serve`: the official `openai` client,
# a pyzmq + msgspec KV event subscriber with vLLM's struct layout, and the
# Prometheus OpenMetrics parser. Creates a venv under target/venv on first
# use. HANDOFF_MOCKER=path overrides the binary (default: a release build).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=target/venv
if ! "$VENV/bin/python" -c "import openai, zmq, msgspec, prometheus_client" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q openai pyzmq msgspec prometheus_client
fi
if [ -z "${HANDOFF_MOCKER:-}" ]; then
    cargo build --release --locked -q -p handoff-mocker
    HANDOFF_MOCKER="${CARGO_TARGET_DIR:-target}/release/handoff-mocker"
fi
export HANDOFF_MOCKER
exec timeout 300 "$VENV/bin/python" tests/python/test_serve.py
