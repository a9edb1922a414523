"""Abuse checks of issue 42 against a release `serve` on loopback.

Usage: abuse.py PATH-TO-handoff-mocker

Every attack is bounded in count and time and goes to 127.0.0.1 only.
While the HTTP and ZMQ attacks run, a watcher polls /health every 100 ms:
each answer must be a 200 within HEALTH_LIMIT_S. Prints one line per check
and 'N passed, N failed'; exits 1 if any failed.
"""

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

HEALTH_LIMIT_S = 1.0
REFUSE_LIMIT_S = 1.0
FLAG_LIMIT_S = 10.0
BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/handoff-mocker"
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def free_ports(n):
    """A base port with n consecutive free ports after it (bounded tries)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


def http(port, method, path, body=None, timeout=10.0):
    data = None if body is None else body.encode() if isinstance(body, str) else body
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class HealthWatch(threading.Thread):
    """Polls /health every 100 ms until stopped; keeps the slowest answer
    and every failure."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.stop = port, threading.Event()
        self.slowest, self.failures, self.polls = 0.0, [], 0

    def run(self):
        while not self.stop.is_set() and self.polls < 5000:
            t = time.monotonic()
            try:
                status, _ = http(self.port, "GET", "/health", timeout=5.0)
                if status != 200:
                    self.failures.append(f"status {status}")
            except Exception as e:  # noqa: BLE001 - any failure counts
                self.failures.append(repr(e))
            self.slowest = max(self.slowest, time.monotonic() - t)
            self.polls += 1
            self.stop.wait(0.1)


def greeting():
    # ZMTP 3.0 (RFC 23): signature, version 3.0, mechanism NULL, as-server 0.
    return b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32


def zmq_bomb(port, flags):
    """Greeting then a long frame header claiming 2^62 bytes; True when the
    socket closes the connection within 5 s."""
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as s:
        s.sendall(greeting() + bytes([flags]) + struct.pack(">Q", 1 << 62))
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                if not s.recv(4096):
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
            except socket.timeout:
                return False
    return False


def zmq_parts_flood(port):
    """After a proper handshake, parts of one message without end (libzmq
    keeps them all until the last); True when the connection is closed
    before 10,000 parts of 4 kB were taken."""
    with socket.create_connection(("127.0.0.1", port), timeout=5.0) as s:
        s.sendall(greeting())
        ready = b"\x05READY\x0bSocket-Type" + struct.pack(">I", 6) + b"DEALER"
        s.sendall(bytes([0x04, len(ready)]) + ready)
        part = bytes([0x03]) + struct.pack(">Q", 4000) + b"x" * 4000
        try:
            for _ in range(10_000):
                s.sendall(part)
        except OSError:
            return True
    return False


def timed_post(port, path, body):
    t = time.monotonic()
    status, text = http(port, "POST", path, body, timeout=30.0)
    return status, text, time.monotonic() - t


def http_attacks(port):
    prompt = " ," * 320_000  # 640 KB, the quadratic prompt
    body = json.dumps({"model": "handoff-mocker", "prompt": prompt, "max_tokens": 4})
    status, text, took = timed_post(port, "/v1/completions", body)
    check(
        "640 KB quadratic prompt refused fast",
        status == 400 and took < REFUSE_LIMIT_S,
        f"{status} in {took:.3f} s: {text[:120]!r}",
    )
    msgs = [{"role": "user", "content": " , ," * 7} for _ in range(60_000)]
    chat = json.dumps({"model": "handoff-mocker", "messages": msgs, "max_tokens": 4})
    took_all = []

    def one():
        took_all.append(timed_post(port, "/v1/chat/completions", chat))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    ok = len(took_all) == 4 and all(s == 400 and d < 5 * REFUSE_LIMIT_S for s, _, d in took_all)
    check(
        f"four {len(chat) >> 20} MB chats of 60,000 messages refused at once",
        ok,
        ", ".join(f"{s} in {d:.3f} s" for s, _, d in took_all),
    )
    status, text, took = timed_post(
        port,
        "/v1/completions",
        json.dumps({"model": "handoff-mocker", "prompt": "hello there", "max_tokens": 4.0}),
    )
    check("an ordinary request answers (max_tokens 4.0)", status == 200, f"{status} in {took:.3f} s")


def zmq_attacks(pub, rep):
    for name, port in [("PUB --kv-events", pub), ("ROUTER --kv-replay", rep)]:
        for flags in (0x02, 0x06):
            check(f"ZMQ bomb on {name} (flags {flags:#04x}) disconnected", zmq_bomb(port, flags))
        check(f"ZMQ endless parts on {name} disconnected", zmq_parts_flood(port))


def flag_products():
    tmp = tempfile.mkdtemp(prefix="abuse-")
    cases = [
        ("schedulers", ["replay", "--dp-size", "256", "--prefill", "128", "--decode", "128", "--requests", "50"], "schedulers"),
        ("sessions x turns", ["experiment", "run", "--sessions", "1000", "--session-turns", "10000"], "session turns"),
        ("sweep --jobs", ["sweep", "--jobs", "99999999999", "--set", "prefill=1,2", "--out", tmp], "--jobs"),
        ("live latency", ["live", "--message-latency-us", "99999999999", "--requests", "5"], "--message-latency-us"),
        ("trace /dev/zero", ["replay", "--trace", "/dev/zero"], "not a file of lines"),
        ("block-hash-seed NaN", ["serve", "--block-hash", "vllm", "--block-hash-seed", "NaN"], "PYTHONHASHSEED"),
        ("serve latency", ["serve", "--http", "127.0.0.1:0", "--message-latency-us", "100000000"], "--message-latency-us"),
    ]
    for name, args, want in cases:
        t = time.monotonic()
        try:
            p = subprocess.run([BIN, *args], capture_output=True, text=True, timeout=FLAG_LIMIT_S)
            took = time.monotonic() - t
            ok = p.returncode in (1, 2) and want in p.stderr
            last = (p.stderr.strip().splitlines() or [""])[-1]
            check(f"{name} refused up front", ok, f"exit {p.returncode} in {took:.2f} s: {last[:160]}")
        except subprocess.TimeoutExpired:
            check(f"{name} refused up front", False, f"still running after {FLAG_LIMIT_S} s")


def main():
    http_port = free_ports(1)
    pub = free_ports(2)
    rep = free_ports(2)
    serve = subprocess.Popen(
        [BIN, "serve", "--prefill", "1", "--decode", "1", "--http", f"127.0.0.1:{http_port}",
         "--kv-events", f"tcp://127.0.0.1:{pub}", "--kv-replay", f"tcp://127.0.0.1:{rep}"],
        stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if http(http_port, "GET", "/health", timeout=1.0)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or serve.poll() is not None:
                check("serve starts", False)
                return
            time.sleep(0.1)
        watch = HealthWatch(http_port)
        watch.start()
        zmq_attacks(pub, rep)
        # Three rounds, so the watcher polls through a few seconds of it.
        for _ in range(3):
            http_attacks(http_port)
        watch.stop.set()
        watch.join(10)
        check("serve still running after the attacks", serve.poll() is None)
        check(
            f"/health answered throughout ({watch.polls} polls)",
            not watch.failures and watch.slowest < HEALTH_LIMIT_S,
            f"slowest {watch.slowest:.3f} s, failures {watch.failures[:3]}",
        )
        serve.send_signal(signal.SIGTERM)
        try:
            code = serve.wait(20)
            check("serve stops on SIGTERM", code == 0, f"exit {code}")
        except subprocess.TimeoutExpired:
            check("serve stops on SIGTERM", False, "still running after 20 s")
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait(10)
    flag_products()


if __name__ == "__main__":
    main()
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
