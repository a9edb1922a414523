#!/usr/bin/env bash
# Real-client tests of `handoff-mocker serve`: the official `openai` client,
# a pyzmq + msgspec KV event subscriber with vLLM's struct layout, and the
# Prometheus OpenMetrics parser (test_serve.py); a subscriber hashing
# prompts as vLLM does with cbor2 and Hugging Face tokenizers
# (test_vllm_hash.py); then real routers in front
# of the per-worker listeners: vllm-router (target/venv) and smg (its own
# venv, target/venv-smg: smg and sglang-router both install an `smg`
# command) for vLLM, with vllm-router's kv_aware prefill policy routing on
# the overlap it computes (test_routers.py), and sglang-router for SGLang's
# bootstrap-room flow (test_sglang_pd.py); engines as processes of their
# own (`serve --engine`) behind the toy proxy, vllm-router, smg and
# sglang-router, with a prefill engine killed and stopped mid-load
# (test_pods.py); what llm-d, AIBrix and the other gateways read, as
# contracts naming their source (test_gateway_contracts.py). Creates the
# venvs on first use,
# pinned versions. HANDOFF_MOCKER=path overrides the binary (default: a
# release build).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=target/venv
if ! "$VENV/bin/python" -c "import openai, zmq, msgspec, prometheus_client, requests, sglang_router, cbor2, tokenizers
from importlib.metadata import version
assert version('sglang-router') == '0.3.2'" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q openai pyzmq msgspec prometheus_client requests sglang-router==0.3.2 \
        cbor2 tokenizers
fi
VLLM_ROUTER_VERSION=0.1.17
SMG_VERSION=1.13.0
SMG_VENV=target/venv-smg
pinned() { # VENV PACKAGE VERSION: the venv has exactly that version
    "$1/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('$2') != '$3')" 2>/dev/null
}
if ! pinned "$VENV" vllm-router "$VLLM_ROUTER_VERSION"; then
    "$VENV/bin/pip" install -q "vllm-router==$VLLM_ROUTER_VERSION"
fi
if ! pinned "$SMG_VENV" smg "$SMG_VERSION"; then
    python3 -m venv "$SMG_VENV"
    "$SMG_VENV/bin/pip" install -q "smg==$SMG_VERSION"
fi
if [ -z "${HANDOFF_MOCKER:-}" ]; then
    cargo build --release --locked -q -p handoff-mocker
    HANDOFF_MOCKER="${CARGO_TARGET_DIR:-target}/release/handoff-mocker"
fi
export HANDOFF_MOCKER
rc=0
timeout 300 "$VENV/bin/python" tests/python/test_serve.py || rc=1
timeout 120 "$VENV/bin/python" tests/python/test_vllm_hash.py || rc=1
VLLM_ROUTER="$VENV/bin/vllm-router" SMG="$SMG_VENV/bin/python -m smg" \
    timeout 300 "$VENV/bin/python" tests/python/test_routers.py || rc=1
timeout 300 "$VENV/bin/python" tests/python/test_sglang_pd.py || rc=1
VLLM_ROUTER="$VENV/bin/vllm-router" SMG="$SMG_VENV/bin/python -m smg" \
    timeout 300 "$VENV/bin/python" tests/python/test_pods.py || rc=1
timeout 300 "$VENV/bin/python" tests/python/test_gateway_contracts.py || rc=1
exit $rc
