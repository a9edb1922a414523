"""What the real-client tests share (test_serve.py, test_vllm_hash.py,
test_routers.py, test_sglang_pd.py; run by tests/python/run.sh): free
loopback ports, `handoff-mocker serve` started on them and stopped, its
/metrics as samples, and the loop that runs each check and counts."""

import json
import os
import socket
import subprocess
import time
import traceback
import urllib.error
import urllib.request

import openai
from prometheus_client.openmetrics.parser import text_string_to_metric_families

BIN = os.environ["HANDOFF_MOCKER"]
MODEL = "mock-model"


def free_port(n: int = 1) -> int:
    """A base port with n free consecutive ports after it."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n >= 65535:
            continue
        ok = True
        for p in range(base, base + n):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", p))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no free ports")


def get(url: str) -> tuple[int, bytes]:
    """Status and body of a GET, an HTTP error status included."""
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def read_stream(port: int, body: dict, events: int) -> socket.socket:
    """POSTs `body` to /v1/completions on `port` over a raw connection and
    reads the streamed answer until `events` SSE events came; returns the
    connection, still open."""
    data = json.dumps(body).encode()
    conn = socket.create_connection(("127.0.0.1", port))
    conn.sendall(
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode() + data
    )
    got = b""
    while got.count(b"data: ") < events:
        chunk = conn.recv(4096)
        assert chunk, "the stream ended early"
        got += chunk
    return conn


def metric_samples(text: bytes) -> dict:
    """Every sample of an OpenMetrics text, by (name, engine label)."""
    samples = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            samples[(s.name, s.labels.get("engine"))] = s.value
    return samples


class Server:
    """`handoff-mocker serve` on free loopback ports, ready (`/ready`) once
    constructed: `prefill` + `decode` workers, model MODEL, with vLLM's ZMQ
    KV event and replay sockets unless `kv` is false, then `extra`
    arguments. `stop` ends it and asserts it exited cleanly."""

    def __init__(self, *extra: str, prefill: int = 1, decode: int = 1, kv: bool = True):
        workers = prefill + decode
        self.port = free_port()
        args = [
            BIN, "serve", "--http", f"127.0.0.1:{self.port}", "--model", MODEL,
            "--prefill", str(prefill), "--decode", str(decode),
        ]
        if kv:
            self.kv = free_port(workers)
            self.replay = free_port(workers)
            args += [
                "--kv-events", f"tcp://127.0.0.1:{self.kv}",
                "--kv-replay", f"tcp://127.0.0.1:{self.replay}",
            ]
        args += extra
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                if self.get("/ready")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited: {self.proc.stderr.read()}")
            time.sleep(0.05)
        raise RuntimeError("serve did not become ready")

    def get(self, path: str) -> tuple[int, bytes]:
        return get(self.url + path)

    def post(self, path: str, body: bytes) -> tuple[int, bytes]:
        req = urllib.request.Request(
            self.url + path, data=body, headers={"content-type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0)

    def workers(self) -> dict:
        return json.loads(self.get("/debug/workers")[1])

    def wait_drained(self, timeout: float = 20) -> dict:
        deadline = time.time() + timeout
        while True:
            v = self.workers()
            if v["in_flight"] == 0 and all(w["drained"] for w in v["workers"]):
                return v
            if time.time() > deadline:
                raise AssertionError(f"workers not drained: {v}")
            time.sleep(0.05)

    def metrics(self) -> dict:
        status, text = self.get("/metrics")
        assert status == 200
        return metric_samples(text)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        assert self.proc.returncode == 0, self.proc.stderr.read()


class Skip(Exception):
    """The case cannot run on this build (says why)."""


class Checks:
    """Runs checks one after another, printing "ok", "FAIL" (with the
    traceback, and `fail_note`) or "skip" for each, and counts them."""

    def __init__(self, fail_note: str = "") -> None:
        self.passed = self.failed = self.skipped = 0
        self.fail_note = fail_note

    def run(self, name: str, fn, *args) -> None:
        t0 = time.time()
        try:
            fn(*args)
            self.passed += 1
            print(f"ok   {name} ({time.time() - t0:.1f}s)", flush=True)
        except Skip as e:
            self.skipped += 1
            print(f"skip {name}: {e}", flush=True)
        except Exception:  # noqa: BLE001 - report every failure and go on
            self.failed += 1
            print(f"FAIL {name}{self.fail_note}", flush=True)
            traceback.print_exc()

    def report(self, skipped: bool = False) -> int:
        """Prints "N passed, N failed" (", N skipped" too if asked); the
        exit status: 1 if any check failed."""
        line = f"{self.passed} passed, {self.failed} failed"
        if skipped:
            line += f", {self.skipped} skipped"
        print(line)
        return 1 if self.failed else 0
