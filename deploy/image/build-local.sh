#!/usr/bin/env bash
# Builds handoff-mocker's image from a release binary already on this
# machine, with no registry: FROM scratch, holding the binary, the shared
# libraries `ldd` names (glibc, libgcc, libstdc++, the loader), and an
# /etc/passwd naming the nonroot user (65532) it runs as. The same
# entrypoint, user, ports and default command as ../../Containerfile.
#
#   deploy/image/build-local.sh [BINARY] [TAG]
#
# BINARY defaults to target/release/handoff-mocker (built if absent); TAG
# to localhost/handoff-mocker:local. Needs podman (Debian: podman runc).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-target/release/handoff-mocker}
TAG=${2:-localhost/handoff-mocker:local}
if [ ! -x "$BIN" ]; then
    cargo build --release --locked -q -p handoff-mocker
fi
: "${PODMAN:=podman --storage-driver vfs --runtime runc}"
CTX=$(mktemp -d)
trap 'rm -rf "$CTX"' EXIT
mkdir -p "$CTX/root/usr/local/bin" "$CTX/root/etc" "$CTX/root/tmp"
cp "$BIN" "$CTX/root/usr/local/bin/handoff-mocker"
strip "$CTX/root/usr/local/bin/handoff-mocker" 2>/dev/null || true
# Every shared library the binary loads, at the path the loader looks for.
ldd "$BIN" | awk '/=> \// {print $3} /^[ \t]*\// {print $1}' | sort -u | while read -r lib; do
    mkdir -p "$CTX/root$(dirname "$lib")"
    cp -L "$lib" "$CTX/root$lib"
done
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    > "$CTX/root/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$CTX/root/etc/group"
chmod 1777 "$CTX/root/tmp"
cat > "$CTX/Containerfile" <<'CF'
FROM scratch
COPY root/ /
USER 65532:65532
EXPOSE 8000 5557 5567
ENTRYPOINT ["/usr/local/bin/handoff-mocker"]
CMD ["serve", "--prefill", "1", "--decode", "0", "--http", "0.0.0.0:8000", "--kv-events", "tcp://0.0.0.0:5557", "--kv-replay", "tcp://0.0.0.0:5567"]
CF
$PODMAN build -q -t "$TAG" "$CTX" > /dev/null
echo "$TAG"
