#!/usr/bin/env bash
# Abuse checks against a release `handoff-mocker serve` on loopback: the
# ZMQ frame bomb and an endless multipart message on the events and replay
# ports, the quadratic prompt and huge chats, and flag products that used
# to abort or hang; each must be refused quickly while /health keeps
# answering (abuse.py, standard library only; about a minute). HANDOFF_MOCKER=path overrides the binary (default:
# a release build).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${HANDOFF_MOCKER:-}" ]; then
    cargo build --release --locked -q -p handoff-mocker
    HANDOFF_MOCKER="${CARGO_TARGET_DIR:-target}/release/handoff-mocker"
fi
timeout 600 python3 checks/abuse/abuse.py "$HANDOFF_MOCKER"
timeout 600 python3 checks/abuse/rooms_shutdown.py "$HANDOFF_MOCKER"
timeout 300 python3 checks/abuse/side_channel.py "$HANDOFF_MOCKER"
timeout 600 python3 checks/abuse/files.py "$HANDOFF_MOCKER"
