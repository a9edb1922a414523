"""One engine per process (`handoff-mocker serve --engine ...`, docs/pods.md)
behind real routers (run by tests/python/run.sh): four engine processes,
2 prefill + 2 decode, each with its own HTTP port and side channel; the
vLLM PD handoff crosses processes (the decode engine dials the prefill
engine named in kv_transfer_params and reads from it).

- vLLM's toy proxy (tests/v1/kv_connector/nixl_integration/
  toy_proxy_server.py, in a few lines as in test_serve.py): prefill with
  do_remote_decode, then the decode with the returned params;
- vllm-router --vllm-pd-disaggregation;
- smg --pd-disaggregation --backend vllm (its passthrough: two plain
  requests, each served whole, as vLLM sees them);
- sglang-router in front of four aggregated SGLang engines (SGLang's
  bootstrap-room PD between engine processes is not modelled yet).

Each runs REQUESTS requests at CONCURRENCY, then every engine is drained
(/debug/workers on each). One run SIGKILLs a prefill engine mid-load: every
request still ends with a status (a response or a refused connection), a
decode reading from the dead engine ends with the loss's reason, and the
survivors drain. Every engine stops on SIGTERM with exit status 0."""

import concurrent.futures
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import zmq

from harness import BIN, MODEL, Checks, Skip, free_port, get

REQUESTS = 200
CONCURRENCY = 16
VLLM_ROUTER = shlex.split(os.environ.get("VLLM_ROUTER", "target/venv/bin/vllm-router"))
SMG = shlex.split(os.environ.get("SMG", "target/venv-smg/bin/python -m smg"))
SILENCE_MS = 1500


def post(url: str, body: dict, timeout: float = 30) -> tuple[int, dict]:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, {"raw": raw.decode(errors="replace")}


class Engine:
    """One `serve --engine ROLE` process on free loopback ports, ready once
    constructed."""

    def __init__(self, role: str, backend: str = "vllm", *extra: str):
        self.role = role
        self.port = free_port()
        self.side = free_port()
        self.kv = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [
            BIN, "serve", "--engine", role, "--backend", backend,
            "--http", f"127.0.0.1:{self.port}", "--model", MODEL,
            "--side-channel-port", str(self.side), "--disaggregation-bootstrap-port", str(self.side),
            "--peer-silence-ms", str(SILENCE_MS), "--grace-period-s", "5",
            "--kv-events", f"tcp://127.0.0.1:{self.kv}", *extra,
        ]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{role} engine exited: {self.proc.stderr.read()}")
            try:
                if get(self.url + "/ready")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{role} engine not ready")

    def workers(self) -> dict:
        return json.loads(get(self.url + "/debug/workers")[1])

    def wait_drained(self, timeout: float = 30) -> dict:
        deadline = time.time() + timeout
        while True:
            v = self.workers()
            if v["in_flight"] == 0 and v["workers"] and all(
                    w["drained"] and w["live_handoffs"] == 0 for w in v["workers"]):
                for w in v["workers"]:
                    c = w["capacity"]
                    assert c["active_blocks"] == c["pinned_source_blocks"] == 0, w
                    assert c["reserved_destination_blocks"] == 0, w
                return v
            if time.time() > deadline:
                raise AssertionError(f"{self.role} engine {self.url} not drained: {v}")
            time.sleep(0.1)

    def metric(self, name: str) -> float:
        text = get(self.url + "/metrics")[1].decode()
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name) and not line.startswith("#"))

    def terminate(self) -> None:
        """SIGTERM: the engine finishes and exits 0."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise
            err = self.proc.stderr.read()
            assert self.proc.returncode == 0, (self.role, self.proc.returncode, err)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


class Pods:
    """2 prefill + 2 decode engine processes (or `aggregated` of them)."""

    def __init__(self, backend: str = "vllm", aggregated: int = 0, *extra: str):
        self.engines: list[Engine] = []
        try:
            if aggregated:
                for _ in range(aggregated):
                    self.engines.append(Engine("aggregated", backend, *extra))
            else:
                for role in ("prefill", "prefill", "decode", "decode"):
                    self.engines.append(Engine(role, backend, *extra))
        except Exception:
            self.close()
            raise

    def urls(self, role: str) -> list[str]:
        return [e.url for e in self.engines if e.role == role]

    def alive(self) -> list[Engine]:
        return [e for e in self.engines if e.proc.poll() is None]

    def drained(self) -> None:
        for e in self.alive():
            e.wait_drained()

    def close(self) -> None:
        """SIGTERM to every engine still alive; each must exit 0."""
        errors = []
        for e in self.engines:
            try:
                e.terminate()
            except Exception as x:  # noqa: BLE001 - stop every engine, then report
                errors.append(x)
        if errors:
            raise errors[0]


def counters(engines: list[Engine], backend: str = "vllm") -> tuple[float, float]:
    """Generated tokens and finished requests on `engines`, from /metrics
    (vLLM's `request_success`, SGLang's `num_requests`)."""
    ok = "num_requests_total" if backend == "sglang" else "request_success_total"
    return (sum(e.metric(f"{backend}:generation_tokens_total") for e in engines),
            sum(e.metric(f"{backend}:{ok}") for e in engines))


class Gauges:
    """Samples the running-batch gauge of `engines` on a thread while a
    load runs; `peak` is the largest sum seen."""

    def __init__(self, engines: list[Engine], backend: str = "vllm"):
        name = "sglang:num_running_reqs" if backend == "sglang" else "vllm:num_requests_running"
        self.peak = 0.0
        self.stop = threading.Event()

        def sample() -> None:
            while not self.stop.is_set():
                try:
                    self.peak = max(self.peak, sum(e.metric(name) for e in engines))
                except OSError:
                    pass
                time.sleep(0.01)

        self.thread = threading.Thread(target=sample, daemon=True)
        self.thread.start()

    def done(self) -> float:
        self.stop.set()
        self.thread.join(timeout=10)
        return self.peak


def body(i: int) -> tuple[dict, int]:
    n = 4 + i % 5
    return {"model": MODEL, "prompt": f"A system prompt shared by all. Question {i % 7}: part {i}?",
            "max_tokens": n, "ignore_eos": True}, n


def toy_proxy(prefills: list[str], decodes: list[str], i: int,
              timeout: float = 30, between=None) -> tuple[str, str]:
    """vLLM's toy proxy for request i: round robin over each pool. Returns
    (status, detail): "ok", an HTTP status, or the connection error.
    `between(prefill_url)` runs after the prefill answered, before the
    decode is sent."""
    b, n = body(i)
    pre = dict(b, max_tokens=1, stream=False, kv_transfer_params={
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None})
    try:
        status, p = post(prefills[i % len(prefills)] + "/v1/completions", pre, min(timeout, 3))
        if status != 200:
            return f"prefill-{status}", json.dumps(p)[:200]
        params = p["kv_transfer_params"]
        assert params["remote_host"] and params["remote_port"] and params["remote_num_tokens"], params
        if between:
            between(prefills[i % len(prefills)])
        status, d = post(decodes[i % len(decodes)] + "/v1/completions",
                         dict(b, kv_transfer_params=params), timeout)
    except OSError as e:
        return "connect-error", str(e)
    if status != 200:
        return f"decode-{status}", json.dumps(d)[:300]
    u = d["usage"]
    assert u["completion_tokens"] == n, (i, u)
    assert u["prompt_tokens_details"]["cached_tokens"] > 0, (i, u)
    return "ok", ""


def run_load(fn, requests: int = REQUESTS) -> dict[str, int]:
    statuses: dict[str, int] = {}
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
        for status, _ in pool.map(fn, range(requests)):
            statuses[status] = statuses.get(status, 0) + 1
    print(f"     {requests} requests, {CONCURRENCY} concurrent, {time.time() - t0:.1f}s: {statuses}",
          flush=True)
    assert sum(statuses.values()) == requests
    return statuses


def test_toy_proxy() -> None:
    pods = Pods()
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    try:
        # Each engine publishes its own KV events on its own port.
        sub.connect(f"tcp://127.0.0.1:{pods.engines[0].kv}")
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        time.sleep(0.3)
        p, d = pods.urls("prefill"), pods.urls("decode")
        decodes = [e for e in pods.engines if e.role == "decode"]
        prefills = [e for e in pods.engines if e.role == "prefill"]
        gauges = Gauges(decodes)
        statuses = run_load(lambda i: toy_proxy(p, d, i))
        assert statuses == {"ok": REQUESTS}, statuses
        # The decode engines' gauges moved while they decoded.
        assert gauges.done() > 0, "vllm:num_requests_running never left 0 under load"
        assert sub.poll(5000), "the prefill engine published no KV event"
        parts = sub.recv_multipart()
        assert len(parts) == 3, parts
        pods.drained()
        ended = sum(e.metric("vllm:e2e_request_latency_seconds_count")
                    for e in pods.engines if e.role == "decode")
        assert ended == REQUESTS, ended
        # The counters are what the clients got: every decode's tokens, and
        # each prefill's one token with its params.
        want = sum(body(i)[1] for i in range(REQUESTS))
        assert counters(decodes) == (want, REQUESTS), (counters(decodes), want)
        assert counters(prefills) == (REQUESTS, REQUESTS), counters(prefills)
    finally:
        sub.close(linger=0)
        ctx.term()
        pods.close()


def lose_prefill_mid_load(how: str, requests: int, *extra: str) -> None:
    """`how` ("kill": SIGKILL, "stop": SIGSTOP) one prefill engine once a
    quarter of the load has ended: every request still ends with a status
    (a response, or the proxy's refused or timed-out call to the lost
    engine), a decode that was reading from it ends with the loss's reason
    in its response and in the failure metric, and the survivors drain.
    `extra`: the engines' flags (a SIGSTOP run makes reads outlast the
    liveness bound, so that the loss, not the read, ends them)."""
    pods = Pods("vllm", 0, *extra)
    victim = pods.engines[0]
    try:
        p, d = pods.urls("prefill"), pods.urls("decode")
        done: list[tuple[str, str]] = []
        lost: list[bool] = []
        lock = threading.Lock()

        def lose(prefill: str) -> None:
            # Right after the victim pinned this request's KV: its decode
            # reads from an engine that is gone (or silent).
            with lock:
                if len(done) >= requests // 4 and not lost and prefill == victim.url:
                    lost.append(True)
                    victim.proc.send_signal(signal.SIGKILL if how == "kill" else signal.SIGSTOP)

        def one(i: int) -> tuple[str, str]:
            # A lost engine's HTTP port refuses (SIGKILL) or never answers
            # (SIGSTOP, cut at a short timeout); the decode call waits longer
            # than the liveness bound.
            out = toy_proxy(p, d, i, timeout=3 * SILENCE_MS / 1000 + 3, between=lose)
            done.append(out)
            return out

        statuses = run_load(one, requests)
        assert lost, "the prefill engine was never lost"
        assert statuses.get("ok", 0) >= requests // 4, statuses
        details = [x for s, x in done if s.startswith("decode-")]
        assert details, f"no decode read from the lost engine: {statuses}"
        for x in details:
            assert "peer-lost" in x or "kv-load-failed" in x, x
        for e in pods.engines[1:]:
            e.wait_drained()
        failed = sum(e.metric("vllm:handoff_requests_failed_total") for e in pods.engines[2:])
        print(f"     decode failures with a reason: {len(details)}; failure metric {failed}",
              flush=True)
        assert failed >= len(details), (failed, details)
    finally:
        if victim.proc.poll() is None:
            victim.proc.send_signal(signal.SIGCONT)
            victim.kill()
        pods.close()


def lose_decode_mid_load() -> None:
    """SIGKILL a decode engine once a quarter of the load has ended: the
    prefill engines free the sources it was reading (the transport sees
    the loss) or would have read (their lease runs out: --lease-ttl-s 2
    here, vLLM's kv_lease_duration), and drain; every request ends with a
    status."""
    pods = Pods("vllm", 0, "--lease-ttl-s", "2")
    victim = pods.engines[2]
    try:
        p, d = pods.urls("prefill"), pods.urls("decode")
        done: list[tuple[str, str]] = []
        lock = threading.Lock()

        def lose(_prefill: str) -> None:
            with lock:
                if len(done) >= REQUESTS // 4 and victim.proc.poll() is None:
                    victim.kill()

        def one(i: int) -> tuple[str, str]:
            out = toy_proxy(p, d, i, timeout=10, between=lose)
            done.append(out)
            return out

        statuses = run_load(one)
        assert victim.proc.poll() is not None
        assert statuses.get("ok", 0) >= REQUESTS // 4, statuses
        for e in pods.alive():
            e.wait_drained(timeout=15)
        expired = sum(e.metric("vllm:handoff_lease_expiries") for e in pods.engines[:2])
        print(f"     prefill leases expired: {expired}", flush=True)
        # At least the sources pinned for the decode calls that found the
        # engine gone.
        assert expired >= 1, expired
    finally:
        pods.close()


def router_argv(kind: str, port: int, pods: Pods) -> list[str]:
    pd = []
    for u in pods.urls("prefill"):
        pd += ["--prefill", u]
    for u in pods.urls("decode"):
        pd += ["--decode", u]
    if kind == "vllm-router":
        return VLLM_ROUTER + [
            "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(free_port()),
            "--vllm-pd-disaggregation", *pd, "--worker-startup-timeout-secs", "30",
            "--log-level", "warning"]
    if kind == "smg":
        return SMG + [
            "launch", "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-port", str(free_port()), "--pd-disaggregation", "--backend", "vllm",
            *pd, "--worker-startup-timeout-secs", "30", "--log-level", "warn"]
    if kind == "smg-sglang":
        sg = []
        for e in pods.engines:
            sg += ["--prefill", e.url, str(e.side)] if e.role == "prefill" else ["--decode", e.url]
        return SMG + [
            "launch", "--host", "127.0.0.1", "--port", str(port),
            "--prometheus-port", str(free_port()), "--pd-disaggregation", "--backend", "sglang",
            *sg, "--worker-startup-timeout-secs", "30", "--log-level", "warn"]
    base = [sys.executable, "-m", "sglang_router.launch_router", "--host", "127.0.0.1",
            "--port", str(port), "--policy", "round_robin", "--log-level", "warn",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())]
    if kind == "sglang-router-aggregated":
        return base + ["--worker-urls", *pods.urls("aggregated")]
    # SGLang PD: each prefill engine's bootstrap server is its side channel.
    sg = ["--pd-disaggregation"]
    for e in pods.engines:
        sg += ["--prefill", e.url, str(e.side)] if e.role == "prefill" else ["--decode", e.url]
    return base + sg


def through_router(url: str, i: int) -> tuple[str, str]:
    b, n = body(i)
    try:
        status, r = post(url + "/v1/completions", b)
    except OSError as e:
        return "connect-error", str(e)
    if status != 200:
        return f"http-{status}", json.dumps(r)[:300]
    assert r["usage"]["completion_tokens"] == n, (i, r["usage"])
    return "ok", ""


def behind(kind: str, pods: Pods, log_dir: str) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = router_argv(kind, port, pods)
    if not os.path.exists(argv[0]) and not argv[0].endswith("python"):
        raise Skip(f"{argv[0]} is not installed")
    with open(os.path.join(log_dir, f"pods-{kind}.log"), "w") as log:
        r = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                             env=dict(os.environ, NO_COLOR="1"))
        try:
            deadline = time.time() + 60
            while True:
                assert r.poll() is None, f"{kind} exited {r.returncode}"
                try:
                    if through_router(url, 0)[0] == "ok":
                        break
                except (OSError, AssertionError):
                    pass
                assert time.time() < deadline, f"{kind} never answered"
                time.sleep(0.3)
            backend = "sglang" if "sglang" in kind else "vllm"
            # The engines the clients' tokens come from (smg's passthrough
            # serves each of its two calls whole: the decode call's reach
            # the client).
            streaming = [e for e in pods.engines if e.role != "prefill"]
            before = counters(streaming, backend)
            gauges = Gauges(streaming, backend)
            statuses = run_load(lambda i: through_router(url, i))
            assert statuses == {"ok": REQUESTS}, statuses
            assert gauges.done() > 0, f"{kind}: the running gauge never left 0 under load"
            pods.drained()
            after = counters(streaming, backend)
            want = sum(body(i)[1] for i in range(REQUESTS))
            got = (after[0] - before[0], after[1] - before[1])
            assert got == (want, REQUESTS), (kind, got, want)
        finally:
            r.kill()
            r.wait(timeout=10)


def test_router(kind: str, log_dir: str) -> None:
    if kind == "sglang-router-aggregated":
        pods = Pods("sglang", 4)
    elif kind in ("sglang-router", "smg-sglang"):
        pods = Pods("sglang")
    else:
        pods = Pods()
    try:
        behind(kind, pods, log_dir)
        if kind in ("vllm-router", "sglang-router", "smg-sglang"):
            # The handoff crossed processes: the decode engines ended every
            # request (and the readiness probe), the prefill engines none.
            e2e = ("sglang" if "sglang" in kind else "vllm") + ":e2e_request_latency_seconds_count"
            on = {r: sum(e.metric(e2e) for e in pods.engines if e.role == r)
                  for r in ("prefill", "decode")}
            assert on["prefill"] == 0 and on["decode"] >= REQUESTS, on
    finally:
        pods.close()


def sglang_prefill_killed_behind_router(log_dir: str) -> None:
    """SGLang PD through sglang-router with a prefill engine SIGKILLed once
    a quarter of the load has ended: every request ends with a status, a
    decode leg whose prefill is gone aborts (the reason is counted), and
    the surviving engines drain."""
    pods = Pods("sglang")
    victim = pods.engines[0]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(os.path.join(log_dir, "pods-sglang-kill.log"), "w") as log:
        r = subprocess.Popen(router_argv("sglang-router", port, pods), stdout=log,
                             stderr=subprocess.STDOUT, env=dict(os.environ, NO_COLOR="1"))
        try:
            deadline = time.time() + 60
            while through_router(url, 0)[0] != "ok":
                assert r.poll() is None and time.time() < deadline, "sglang-router never answered"
                time.sleep(0.3)
            done: list[tuple[str, str]] = []
            lock = threading.Lock()

            def one(i: int) -> tuple[str, str]:
                with lock:
                    if len(done) >= REQUESTS // 4 and victim.proc.poll() is None:
                        victim.kill()
                out = through_router(url, i)
                done.append(out)
                return out

            statuses = run_load(one)
            assert victim.proc.poll() is not None
            assert statuses.get("ok", 0) >= REQUESTS // 4, statuses
            for e in pods.alive():
                e.wait_drained()
            aborted = sum(e.metric("sglang:handoff_requests_failed_total")
                          for e in pods.alive() if e.role == "decode")
            print(f"     decode legs ended with a reason: {aborted}", flush=True)
        finally:
            r.kill()
            r.wait(timeout=10)
            pods.close()


def main() -> int:
    log_dir = os.environ.get("ROUTER_LOG_DIR", "target/router-logs")
    os.makedirs(log_dir, exist_ok=True)
    checks = Checks(fail_note=f" (router logs in {log_dir})")
    checks.run("pods: vLLM toy proxy, 2P+2D processes", test_toy_proxy)
    checks.run("pods: SIGKILL of a prefill engine mid-load", lose_prefill_mid_load, "kill",
               REQUESTS)
    checks.run("pods: SIGKILL of a decode engine mid-load", lose_decode_mid_load)
    slow_reads = ("--transfer", "fixed", "--transfer-ms", str(2 * SILENCE_MS))
    checks.run("pods: SIGSTOP of a prefill engine mid-load", lose_prefill_mid_load, "stop", 48,
               *slow_reads)
    checks.run("pods: vllm-router --vllm-pd-disaggregation", test_router, "vllm-router", log_dir)
    checks.run("pods: smg --backend vllm", test_router, "smg", log_dir)
    checks.run("pods: sglang-router --pd-disaggregation, 2P+2D SGLang processes", test_router,
               "sglang-router", log_dir)
    checks.run("pods: smg --backend sglang, 2P+2D SGLang processes", test_router, "smg-sglang",
               log_dir)
    checks.run("pods: SIGKILL of an SGLang prefill engine behind sglang-router",
               sglang_prefill_killed_behind_router, log_dir)
    checks.run("pods: sglang-router, 4 aggregated SGLang engines", test_router,
               "sglang-router-aggregated", log_dir)
    return checks.report(skipped=True)


if __name__ == "__main__":
    sys.exit(main())
