"""Real routers from PyPI in front of `handoff-mocker serve` (run by
tests/python/run.sh): vllm-router with --vllm-pd-disaggregation, and smg
(Shepherd Model Gateway) in PD mode, with workers given on its command line
and registered by POST /workers.

vllm-router's `kv_aware` prefill policy is checked on its own: it renders
each prompt on the prefill workers (`/v1/completions/render`), subscribes
to their KV events (`--pd-kv-events`, map-form events from `serve
--kv-event-encoding map`), and must credit the prefix a worker holds and
send the request there, as its decision log shows.

For each router:
- its start-up polling is recorded: the router first runs in front of
  logging forwarders (one per worker port, passing every GET through to the
  worker), and the paths it polled are printed with our status codes; none
  may be a 404;
- then it runs in front of the workers themselves and the official
  `openai` client sends 200 requests, 16 at a time, through it (completions
  and chat, streamed and whole); every one completes with usage;
- the handoff metrics moved (prefill workers' prefix-cache queries, decode
  workers' end-to-end latency counts), and afterwards every worker on
  /debug/workers is drained with no block in use.

VLLM_ROUTER and SMG_PYTHON name the router commands (run.sh sets them).
Prints "N passed, N failed, N skipped" and exits non-zero on any failure.
"""

import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import openai

sys.path.insert(0, os.path.dirname(__file__))
from harness import MODEL, Checks, Server, free_port  # noqa: E402
from test_serve import SYSTEM  # noqa: E402
from wordlevel import WORDS, tokenizer_json  # noqa: E402

VLLM_ROUTER = shlex.split(os.environ.get("VLLM_ROUTER", "target/venv/bin/vllm-router"))
SMG = shlex.split(os.environ.get("SMG", "target/venv-smg/bin/python -m smg"))
REQUESTS = 200
CONCURRENCY = 16


def http(url: str, body: dict | None = None, timeout: float = 10) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class Forwarders:
    """One logging HTTP forwarder per worker port: every GET goes through to
    the worker and (port, path, status) is recorded."""

    def __init__(self, targets: list[str]):
        self.log: list[tuple[int, str, int]] = []
        self.servers = []
        self.urls = []
        for i, target in enumerate(targets):
            log = self.log

            class H(BaseHTTPRequestHandler):
                protocol_version = "HTTP/1.1"

                def do_GET(self, target=target, i=i) -> None:  # noqa: N802
                    status, body = http(target + self.path)
                    log.append((i, self.path, status))
                    self.send_response(status)
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

                def do_POST(self, i=i) -> None:  # noqa: N802
                    log.append((i, "POST " + self.path, 405))
                    self.send_response(405)
                    self.send_header("content-length", "0")
                    self.end_headers()

                def log_message(self, *args) -> None:
                    pass

            srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
            threading.Thread(target=srv.serve_forever, daemon=True).start()
            self.servers.append(srv)
            self.urls.append(f"http://127.0.0.1:{srv.server_address[1]}")

    def close(self) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()

    def summary(self) -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for _, path, status in self.log:
            out.setdefault(path, set()).add(status)
        return out


class Router:
    """A router process on a free port, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log_dir: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            argv(self.port) if callable(argv) else argv, stdout=self.log, stderr=subprocess.STDOUT,
            env=dict(os.environ, NO_COLOR="1", RUST_LOG_STYLE="never"),
        )

    def wait(self, ready, timeout: float = 60) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"router exited {self.proc.returncode}: {self.text()[-3000:]}")
            try:
                if ready(self):
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise AssertionError(f"router not ready: {self.text()[-3000:]}")

    def text(self) -> str:
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


def workers_of(s: Server, base: int, n: int) -> dict[str, list[str]]:
    """The worker URLs by role, as each worker's /server_info reports it."""
    roles: dict[str, list[str]] = {"prefill": [], "decode": []}
    for i in range(n):
        url = f"http://127.0.0.1:{base + i}"
        status, body = http(url + "/server_info")
        assert status == 200, body
        roles[json.loads(body)["disaggregation_mode"]].append(url)
    return roles


def pd_args(roles: dict[str, list[str]], urls: dict[str, str] | None = None) -> list[str]:
    urls = urls or {}
    args = []
    for u in roles["prefill"]:
        args += ["--prefill", urls.get(u, u)]
    for u in roles["decode"]:
        args += ["--decode", urls.get(u, u)]
    return args


def models_ready(r: Router) -> bool:
    status, body = http(r.url + "/v1/models", timeout=2)
    return status == 200 and any(m.get("id") == MODEL for m in json.loads(body).get("data", []))


def one_request(c: openai.OpenAI, i: int) -> int:
    """Request i: a completion or a chat, streamed or whole; returns its
    completion tokens after checking its usage."""
    prompt = SYSTEM + f" Question {i % 7}: how do I replace part {i}?"
    n = 4 + i % 5
    stream = i % 2 == 1
    if i % 4 < 2:
        if stream:
            chunks = list(c.completions.create(
                model=MODEL, prompt=prompt, max_tokens=n, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
            usage = chunks[-1].usage
            text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        else:
            r = c.completions.create(model=MODEL, prompt=prompt, max_tokens=n,
                                     extra_body={"ignore_eos": True})
            usage, text = r.usage, r.choices[0].text
    else:
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt[-60:]}]
        if stream:
            chunks = list(c.chat.completions.create(
                model=MODEL, messages=msgs, max_tokens=n, stream=True,
                stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
            usage = chunks[-1].usage
            text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        else:
            r = c.chat.completions.create(model=MODEL, messages=msgs, max_tokens=n,
                                          extra_body={"ignore_eos": True})
            usage, text = r.usage, r.choices[0].message.content
    assert usage is not None, f"request {i}: no usage"
    assert usage.completion_tokens == n, (i, usage)
    assert usage.prompt_tokens > 0 and usage.total_tokens == usage.prompt_tokens + n, (i, usage)
    assert text, f"request {i}: no text"
    return n


def sums(s: Server, name: str, workers: list[int]) -> float:
    m = s.metrics()
    return sum(m.get((name, str(w)), 0.0) for w in workers)


def drive(s: Server, router_url: str, roles_ids: dict[str, list[int]], prefix: str,
          prefill_whole: bool = False) -> None:
    """REQUESTS requests, CONCURRENCY at a time, through the router; then
    the handoff metrics moved and every worker drained. `prefill_whole`: the
    router sends each prefill as a plain request (smg's passthrough), which
    the prefill worker serves whole, so it ends as many requests as it got;
    else a prefill worker ends none (its prefill hands off)."""
    queries = f"{prefix}:prefix_cache_queries_total"
    e2e = f"{prefix}:e2e_request_latency_seconds_count"
    generated = f"{prefix}:generation_tokens_total"
    success = f"{prefix}:" + ("num_requests_total" if prefix == "sglang" else "request_success_total")
    running = f"{prefix}:" + ("num_running_reqs" if prefix == "sglang" else "num_requests_running")
    ended_on_prefill = sums(s, e2e, roles_ids["prefill"])
    before = (sums(s, queries, roles_ids["prefill"]), sums(s, e2e, roles_ids["decode"]))
    counted = (sums(s, generated, roles_ids["decode"]), sums(s, success, roles_ids["decode"]))
    c = openai.OpenAI(base_url=router_url + "/v1", api_key="unused", max_retries=0, timeout=60)
    t0 = time.time()
    peak = [0.0]
    done = threading.Event()

    def sample() -> None:
        # The decode workers' running gauge, while the load runs.
        while not done.is_set():
            peak[0] = max(peak[0], sums(s, running, roles_ids["decode"]))
            time.sleep(0.01)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
        tokens = list(pool.map(lambda i: one_request(c, i), range(REQUESTS)))
    done.set()
    sampler.join(timeout=10)
    assert peak[0] > 0, f"{running} never left 0 under load"
    print(f"     {REQUESTS} requests, {sum(tokens)} output tokens, {CONCURRENCY} concurrent, "
          f"{time.time() - t0:.1f}s", flush=True)
    v = s.wait_drained()
    after = (sums(s, queries, roles_ids["prefill"]), sums(s, e2e, roles_ids["decode"]))
    assert after[0] > before[0], ("prefill workers saw no prompts", before, after)
    assert after[1] - before[1] >= REQUESTS, ("decode workers ended too few requests", before, after)
    # The decode workers counted what the clients got from them.
    got = (sums(s, generated, roles_ids["decode"]) - counted[0],
           sums(s, success, roles_ids["decode"]) - counted[1])
    assert got == (sum(tokens), REQUESTS), (got, sum(tokens), REQUESTS)
    ended_on_prefill = sums(s, e2e, roles_ids["prefill"]) - ended_on_prefill
    if prefill_whole:
        assert ended_on_prefill >= REQUESTS, ("prefill workers served too few whole", ended_on_prefill)
    else:
        assert ended_on_prefill == 0, ("a prefill worker ended requests itself", ended_on_prefill)
    for w in v["workers"]:
        cap = w["capacity"]
        assert w["drained"] and w["live_handoffs"] == 0, w
        assert cap["active_blocks"] == cap["pinned_source_blocks"] == cap["reserved_destination_blocks"] == 0, w
    m = s.metrics()
    for w in range(len(v["workers"])):
        assert m[(f"{prefix}:handoff_pinned_source_blocks", str(w))] == 0
        assert m[(f"{prefix}:handoff_reserved_destination_blocks", str(w))] == 0


def check_polled(name: str, fw: Forwarders) -> None:
    seen = fw.summary()
    print(f"     {name} polled: " + ", ".join(
        f"{p} {'/'.join(map(str, sorted(st)))}" for p, st in sorted(seen.items())), flush=True)
    assert seen, f"{name} polled nothing"
    bad = {p: st for p, st in seen.items() if 404 in st or 405 in st}
    assert not bad, f"{name} got 404/405 from us: {bad}"


def start_pd(backend: str) -> tuple[Server, int, dict[str, list[str]], dict[str, list[int]]]:
    base = free_port(4)
    s = Server("--backend", backend, "--worker-http-base-port", str(base), prefill=2, decode=2)
    roles = workers_of(s, base, 4)
    assert len(roles["prefill"]) == 2 and len(roles["decode"]) == 2, roles
    ids = {r: [int(u.rsplit(":", 1)[1]) - base for u in us] for r, us in roles.items()}
    return s, base, roles, ids


def test_vllm_router(log_dir: str) -> None:
    s, base, roles, ids = start_pd("vllm")
    try:
        def argv(worker_urls: dict[str, str] | None):
            return lambda port: VLLM_ROUTER + [
                "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(free_port()),
                "--vllm-pd-disaggregation", *pd_args(roles, worker_urls),
                "--worker-startup-timeout-secs", "30", "--log-level", "info",
            ]

        # Start-up polling, through the forwarders.
        fw = Forwarders(roles["prefill"] + roles["decode"])
        fmap = dict(zip(roles["prefill"] + roles["decode"], fw.urls))
        r = Router("vllm-router-polling", argv(fmap), log_dir)
        try:
            r.wait(models_ready)
        finally:
            r.stop()
            fw.close()
        check_polled("vllm-router", fw)
        assert r.text().count("reports 1 engine(s)") == 4, "vllm-router did not count 1 engine per worker"
        # The load, straight to the workers.
        r = Router("vllm-router", argv(None), log_dir)
        try:
            r.wait(models_ready)
            drive(s, r.url, ids, "vllm")
        finally:
            r.stop()
    finally:
        s.stop()


# vllm-router's PD decision line (src/routers/http/pd_router.rs, "P/D
# admission"): its fallback, the prefix tokens it credited, and the prefill
# worker it picked.
ADMISSION = re.compile(
    r'P/D admission .*?fallback=(\S+) .*?credited_prefix_tokens=Some\((\d+)\)'
    r'.*?prefill: StageDecision \{.*?http_url: "([^"]+)"')
# Its terminal colours, which it writes to a file too.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def prefix(step: int, n: int = 80) -> str:
    """n words of the test tokenizer, a different sequence per step."""
    return " ".join(WORDS[(i * step) % len(WORDS)] for i in range(n))


def counter(text: str, name: str, **labels: str) -> float:
    """The Prometheus counter `name` with exactly these labels in text."""
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf'^{re.escape(name)}\{{{re.escape(want)}\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def test_vllm_router_kv_aware(log_dir: str) -> None:
    """Two prompts of 81 tokens (5 blocks of 16) are served whole on
    different prefill workers, so each holds one prefix. Requests extending
    them then go through vllm-router with `--prefill-policy kv_aware`: each
    must be rendered (not `render_unavailable`), credited the 80 cached
    tokens and sent to the worker holding its prefix (the policy's tie
    between two idle workers would pick the first); a cold prompt is
    credited nothing."""
    base = free_port(4)
    with tempfile.TemporaryDirectory() as d:
        tok = os.path.join(d, "tokenizer.json")
        with open(tok, "w") as f:
            json.dump(tokenizer_json(), f)
        s = Server("--backend", "vllm", "--worker-http-base-port", str(base), "--tokenizer", tok,
                   "--block-hash", "vllm", "--kv-event-encoding", "map", prefill=2, decode=2)
    try:
        roles = workers_of(s, base, 4)
        events = [f"{u}=tcp://127.0.0.1:{s.kv + int(u.rsplit(':', 1)[1]) - base}"
                  for u in roles["prefill"]]
        metrics_port = free_port()
        r = Router("vllm-router-kv-aware", lambda port: VLLM_ROUTER + [
            "--host", "127.0.0.1", "--port", str(port), "--prometheus-port", str(metrics_port),
            "--vllm-pd-disaggregation", *pd_args(roles),
            "--prefill-policy", "kv_aware", "--decode-policy", "round_robin",
            *[a for e in events for a in ("--pd-kv-events", e)],
            "--worker-startup-timeout-secs", "30", "--log-level", "debug",
        ], log_dir)
        try:
            r.wait(models_ready)
            r.wait(lambda r: r.text().count("kv_index subscriber for") == 2)
            time.sleep(1)  # the SUB sockets' connections settle
            holder = {7: roles["prefill"][1], 3: roles["prefill"][0]}
            for step, worker in holder.items():
                status, body = http(worker + "/v1/completions",
                                    {"model": MODEL, "prompt": prefix(step), "max_tokens": 2})
                assert status == 200, body
            s.wait_drained()
            # Their BlockStored batches reached the router's subscribers.
            r.wait(lambda r: all(f"live sequence advanced source={u}" in ANSI.sub("", r.text())
                                 for u in holder.values()))
            seen = ANSI.sub("", r.text()).count("P/D admission")
            c = openai.OpenAI(base_url=r.url + "/v1", api_key="unused", max_retries=0, timeout=30)
            sent = []
            for q in range(3):
                for step in holder:
                    p = f"{prefix(step)} w{300 + q} w{350 + q}"
                    c.completions.create(model=MODEL, prompt=p, max_tokens=4)
                    sent.append(step)
            c.completions.create(model=MODEL, prompt=prefix(11), max_tokens=4)
            sent.append(None)
            log = ANSI.sub("", r.text())
            lines = [ln for ln in log.splitlines() if "P/D admission" in ln][seen:]
            decisions = [ADMISSION.search(ln).groups() for ln in lines]
            assert len(decisions) == len(sent), (len(decisions), sent)
            print("     vllm-router decisions (fallback, credited prefix tokens, prefill worker):",
                  flush=True)
            for step, (fallback, credited, url) in zip(sent, decisions):
                print(f"       {'cold' if step is None else f'prefix {step}'}: "
                      f"{fallback} {credited} {url}", flush=True)
                assert fallback == "None", (step, fallback)
                if step is None:
                    assert credited == "0", ("a cold prompt was credited", credited)
                else:
                    assert credited == "80", (step, credited)
                    assert url == holder[step], (step, url, holder)
            print("     " + ADMISSION.search(lines[0]).group(0)[:200] + " ...", flush=True)
            m = http(f"http://127.0.0.1:{metrics_port}/metrics")[1].decode()
            inputs = "vllm_router_kv_routing_inputs_total"
            assert counter(m, inputs, transport="pd", result="render") >= 2 * len(sent), m
            assert counter(m, inputs, transport="pd", result="render_unavailable") == 0
            assert counter(m, "vllm_router_kv_placement_lookups_total", result="hit") > 0
            assert counter(m, "vllm_router_prefix_routing_decisions_total", policy="kv_aware",
                           stage="prefill", outcome="load_fallback") == 0
        finally:
            r.stop()
        s.wait_drained()
    finally:
        s.stop()


def smg_workers(r: Router) -> list[dict]:
    status, body = http(r.url + "/workers", timeout=2)
    if status != 200:
        return []
    v = json.loads(body)
    return v.get("workers", v) if isinstance(v, dict) else v


def smg_ready(n: int):
    def ready(r: Router) -> bool:
        ws = smg_workers(r)
        healthy = [w for w in ws if w.get("is_healthy")]
        return len(healthy) == n and models_ready(r)
    return ready


def smg_argv(backend: str, cli_workers: list[str]):
    return lambda port: SMG + [
        "launch", "--host", "127.0.0.1", "--port", str(port),
        "--prometheus-port", str(free_port()), "--pd-disaggregation", "--backend", backend,
        *cli_workers, "--worker-startup-timeout-secs", "30", "--log-level", "info",
        "--load-monitor-interval", "1",
    ]


def register(r: Router, roles: dict[str, list[str]], runtime: str, connector: str) -> None:
    for role, urls in roles.items():
        for u in urls:
            status, body = http(r.url + "/workers", {
                "url": u, "worker_type": role, "runtime": runtime, "kv_connector": connector,
            })
            assert status in (200, 201, 202), (status, body)


def check_smg_runtime(r: Router, runtime: str) -> None:
    ws = smg_workers(r)
    kinds = sorted({(w.get("worker_type"), w.get("runtime_type")) for w in ws})
    print(f"     smg workers: {kinds}", flush=True)
    assert all(w.get("runtime_type") == runtime for w in ws), ws


def check_smg_loads(r: Router, fmap: dict[str, str]) -> None:
    """smg's own /get_loads carries what it read from each worker's /loads:
    the worker's pool as its /server_info gives it."""
    status, body = http(r.url + "/get_loads", timeout=5)
    assert status == 200, body
    by_url = {x["worker"]: x for x in json.loads(body)["loads"]}
    print(f"     smg /get_loads: " + ", ".join(
        f"{x['worker_type']} {x['max_total_num_tokens']} tokens usage {x['token_usage']}"
        for x in by_url.values()), flush=True)
    for worker, forwarder in fmap.items():
        info = json.loads(http(worker + "/server_info")[1])
        got = by_url.get(forwarder)
        assert got is not None, (forwarder, by_url.keys())
        assert got["max_total_num_tokens"] == info["max_total_num_tokens"], (got, info)
        assert got["worker_type"] == info["disaggregation_mode"], (got, info)


def conformance(s: Server) -> dict[str, int]:
    """Each kind's count in the server's P/D conformance report."""
    status, body = http(s.url + "/debug/conformance")
    assert status == 200, (status, body)
    return {k: v["count"] for k, v in json.loads(body)["kinds"].items()}


def check_conformance(before: dict[str, int], after: dict[str, int], plain: bool) -> None:
    """smg's plain mode shows in the conformance report: every decode came
    without kv_transfer_params and prefilled its prompt a second time; with
    a registered NIXL connector, nothing."""
    moved = {k: after[k] - before[k] for k in after}
    print(f"     conformance: {moved}", flush=True)
    if plain:
        assert moved["decode_without_params"] >= REQUESTS, moved
        assert moved["duplicate_prefill"] > 0, moved
    else:
        assert moved["decode_without_params"] == 0, moved
        assert moved["duplicate_prefill"] == 0, moved


def test_smg_vllm(log_dir: str, registered: bool) -> None:
    s, base, roles, ids = start_pd("vllm")
    name = "smg-vllm-" + ("post-workers" if registered else "cli")
    try:
        def argv(urls: dict[str, str] | None):
            return smg_argv("vllm", [] if registered else pd_args(roles, urls))

        def start(urls: dict[str, str] | None, log_name: str) -> Router:
            r = Router(log_name, argv(urls), log_dir)
            if registered:
                r.wait(lambda r: http(r.url + "/health", timeout=2)[0] == 200)
                mapped = {k: [urls.get(u, u) if urls else u for u in v] for k, v in roles.items()}
                register(r, mapped, "vllm", "NixlConnector")
            r.wait(smg_ready(4))
            return r

        fw = Forwarders(roles["prefill"] + roles["decode"])
        fmap = dict(zip(roles["prefill"] + roles["decode"], fw.urls))
        r = start(fmap, name + "-polling")
        try:
            check_smg_runtime(r, "vllm")
            time.sleep(2.5)  # two load-monitor rounds (--load-monitor-interval 1)
            check_smg_loads(r, fmap)
        finally:
            r.stop()
            fw.close()
        check_polled(name, fw)
        r = start(None, name)
        try:
            check_smg_runtime(r, "vllm")
            before = conformance(s)
            # Command-line workers have no kv_connector in smg (it learns one
            # only from a registration or a discovery annotation), so smg runs
            # PD as a passthrough: the request with max_tokens 1 and no
            # kv_transfer_params to the prefill worker, then the plain request
            # to the decode worker; each serves its call whole.
            drive(s, r.url, ids, "vllm", prefill_whole=not registered)
            check_conformance(before, conformance(s), plain=not registered)
        finally:
            r.stop()
    finally:
        s.stop()


def test_smg_sglang(log_dir: str) -> None:
    s, base, roles, ids = start_pd("sglang")
    try:
        cli = []
        for u in roles["prefill"]:
            cli += ["--prefill", u, "none"]
        for u in roles["decode"]:
            cli += ["--decode", u]
        r = Router("smg-sglang", smg_argv("sglang", cli), log_dir)
        try:
            r.wait(smg_ready(4))
            check_smg_runtime(r, "sglang")
            drive(s, r.url, ids, "sglang")
        finally:
            r.stop()
    finally:
        s.stop()


def main() -> int:
    log_dir = os.environ.get("ROUTER_LOG_DIR", "target/router-logs")
    os.makedirs(log_dir, exist_ok=True)
    checks = Checks(fail_note=f" (router logs in {log_dir})")
    run = checks.run
    run("vllm-router --vllm-pd-disaggregation", test_vllm_router, log_dir)
    run("vllm-router kv_aware prefill policy", test_vllm_router_kv_aware, log_dir)
    run("smg PD --backend vllm, command-line workers", test_smg_vllm, log_dir, False)
    run("smg PD --backend vllm, POST /workers", test_smg_vllm, log_dir, True)
    run("smg PD --backend sglang", test_smg_sglang, log_dir)
    return checks.report(skipped=True)


if __name__ == "__main__":
    sys.exit(main())
