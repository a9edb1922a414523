"""Side-channel abuse checks of issue 51 against release `serve --engine`.

Usage: side_channel.py PATH-TO-handoff-mocker

Starts one vLLM prefill engine and one decode engine on 127.0.0.1 and
attacks the prefill's side channel with raw frames (the wire format of
crates/transport/src/codec.rs: a 4-byte big-endian length, then the
bincode body, standard config: varint integers, enum variants by index)
and the decode's dial with hostile kv_transfer_params. After each attack
/health must answer 200 and a real PD request must succeed. Every attack
is bounded in count and time and goes to 127.0.0.1 only. Prints one line
per check and 'N passed, N failed'; exits 1 if any failed.
"""

import json
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/handoff-mocker"
U32_MAX = 0xFFFFFFFF
MAX_DP = 64
# Frame variants (crates/transport/src/frame.rs) and peer roles.
HELLO, REQUEST, CLOCK, PING = 0, 2, 10, 12
FRONTEND_ROLE, PREFILL_ROLE, DECODE_ROLE = 0, 1, 2
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def varint(n):
    if n < 251:
        return bytes([n])
    if n < 1 << 16:
        return b"\xfb" + struct.pack("<H", n)
    if n < 1 << 32:
        return b"\xfc" + struct.pack("<I", n)
    return b"\xfd" + struct.pack("<Q", n)


def frame(*fields):
    body = b"".join(varint(f) for f in fields)
    return struct.pack(">I", len(body)) + body


def hello(worker, generation, role):
    return frame(HELLO, worker, generation, role)


def request_frame(rid, prompt, output):
    # Frame::Request(WorkerRequest::Ordinary(Request { id, prompt_tokens,
    # max_output_tokens, prefix_hashes: [], hash_block_tokens: 16,
    # session: None, arrival: 0, lora: None })).
    return frame(REQUEST, 0, rid, prompt, output, 0, 16, 0, 0, 0)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(port, method, path, body=None, timeout=20.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, method=method,
        headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def said_hello(sock):
    """Reads the engine's hello (its first frame) within 5 s."""
    sock.settimeout(5.0)
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return False
        head += chunk
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return False
        body += chunk
    return body[:1] == bytes([HELLO])


def hung_up_within(sock, seconds):
    """True when the engine closes the connection within `seconds`
    (pings in between are read and ignored)."""
    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if not sock.recv(4096):
                return True
        except socket.timeout:
            continue
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


def connect_as(port, worker, generation, role):
    s = socket.create_connection(("127.0.0.1", port), timeout=5.0)
    s.sendall(hello(worker, generation, role))
    if not said_hello(s):
        raise RuntimeError("no hello from the engine")
    return s


def start(role, http_port, side_port, engine_id):
    return subprocess.Popen(
        [BIN, "serve", "--engine", role, "--http", f"127.0.0.1:{http_port}", "--model", "m",
         "--side-channel-port", str(side_port), "--engine-id", str(engine_id)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_ready(port, proc):
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if http(port, "GET", "/ready", timeout=2.0)[0] == 200:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


PROMPT = "the side channel takes only the engines it expects"


def pd(pp, dp):
    status, body = http(pp, "POST", "/v1/completions",
                        {"model": "m", "prompt": PROMPT, "max_tokens": 1,
                         "kv_transfer_params": {"do_remote_decode": True}})
    if status != 200:
        return status, body
    params = json.loads(body)["kv_transfer_params"]
    return http(dp, "POST", "/v1/completions",
                {"model": "m", "prompt": PROMPT, "max_tokens": 4, "ignore_eos": True,
                 "kv_transfer_params": params})


def still_serving(name, pp, dp):
    health = http(pp, "GET", "/health")[0] == 200 and http(dp, "GET", "/health")[0] == 200
    status, body = pd(pp, dp)
    check(f"{name}: /health and a PD request", health and status == 200,
          f"health {health}, PD {status} {body[:200]!r}")


def drained(port, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        v = json.loads(http(port, "GET", "/debug/workers")[1])
        if v["workers"] and all(w["drained"] for w in v["workers"]):
            return True
        time.sleep(0.05)
    return False


def hello_attacks(side, engine, pp, dp):
    rank = engine * MAX_DP
    for name, (w, g, role) in [
        ("own internal id (frontend, u32::MAX)", (U32_MAX, U32_MAX, FRONTEND_ROLE)),
        ("own rank id", (rank, U32_MAX, DECODE_ROLE)),
        ("a prefill role", (5, 1, PREFILL_ROLE)),
    ]:
        s = connect_as(side, w, g, role)
        check(f"hello claiming {name} is refused", hung_up_within(s, 2.0))
        s.close()
    still_serving("after hostile hellos", pp, dp)


def injection_attacks(side, pp, dp):
    s = connect_as(side, 424242, 1, DECODE_ROLE)
    s.sendall(b"".join(request_frame(i, 512, 1_000_000) for i in range(1100)))
    s.sendall(frame(CLOCK, 0, (1 << 64) - 1))
    check("injected frames decode (the link stays up)", not hung_up_within(s, 1.5))
    check("1,100 injected requests are ignored", drained(pp, 3.0))
    still_serving("after injected requests and clock", pp, dp)
    s.close()


def flood(side, pp, dp):
    socks, refused = [], 0
    try:
        for i in range(1000):
            try:
                socks.append(connect_as(side, 100000 + i, 1, DECODE_ROLE))
            except (OSError, RuntimeError):
                refused += 1
        still_serving(f"with 1,000 peers dialled ({refused} not answered)", pp, dp)
    finally:
        for s in socks:
            s.close()
    time.sleep(0.5)
    still_serving("after the peers left", pp, dp)


def dial_attacks(dp, mute_port):
    base = {"do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "3",
            "remote_block_ids": [0], "remote_request_id": "99", "handoff_id": "9"}

    def decode(**kw):
        t = time.monotonic()
        status, _ = http(dp, "POST", "/v1/completions",
                         {"model": "m", "prompt": PROMPT, "max_tokens": 2,
                          "kv_transfer_params": {**base, **kw}})
        return status, time.monotonic() - t

    status, took = decode(remote_host="8.8.8.8", remote_port=22)
    check("a remote_host outside --kv-peer-allow is refused at once",
          status == 403 and took < 1.0, f"{status} in {took:.2f} s")
    status, _ = decode(remote_host="evil\nhost", remote_port=22)
    check("a remote_host with a newline is a 400", status == 400, str(status))
    status, _ = decode(remote_host="127.0.0.1", remote_port=mute_port,
                       remote_block_ids=list(range(50_000)))
    check("50,000 remote_block_ids are a 400", status == 400, str(status))


def main():
    hp, hd = free_port(), free_port()
    sp, sd = free_port(), free_port()
    p = start("prefill", hp, sp, 11)
    d = start("decode", hd, sd, 12)
    mute = socket.socket()
    mute.bind(("127.0.0.1", 0))
    mute.listen(8)
    try:
        ready = wait_ready(hp, p) and wait_ready(hd, d)
        check("both engines start", ready)
        if not ready:
            return
        still_serving("before the attacks", hp, hd)
        hello_attacks(sp, 11, hp, hd)
        injection_attacks(sp, hp, hd)
        flood(sp, hp, hd)
        dial_attacks(hd, mute.getsockname()[1])
        still_serving("after every attack", hp, hd)
    finally:
        mute.close()
        for proc in (p, d):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (p, d):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        err = b"".join(proc.stderr.read() for proc in (p, d))
        check("no control character from a peer reaches stderr", b"evil\nhost" not in err)
    passed = sum(results)
    print(f"{passed} passed, {len(results) - passed} failed")
    sys.exit(0 if passed == len(results) else 1)


if __name__ == "__main__":
    main()
