"""SGLang's PD flow of `handoff-mocker serve --backend sglang` behind the
real SGLang PD router (`sglang-router` 0.3.2 from PyPI, run from the venv
tests/python/run.sh makes). Run by tests/python/run.sh.

The router sends every request twice at once, the same body with
`bootstrap_host`, `bootstrap_port` and `bootstrap_room` added, to a
prefill worker's and a decode worker's own listener; the mock pairs the
two legs in their bootstrap room and runs one destination-first handoff.
Checks: 200 requests at 16 concurrent through the router with the official
`openai` client (completions and chat, streamed and not) all complete with
usage, the handoff gauges moved while they ran, and every worker ends
drained; SGLang's native `/generate` goes through too; a leg whose partner never comes (sent by hand) fails after the
bootstrap timeout and frees everything; a client that leaves mid-stream
frees both sides. Then a deployment with `--dp-size 2` (one prefill and one
decode worker of two attention-DP ranks each) behind the same router: every
request completes, each prefill leg lands on rank `bootstrap_room % 2` and
the decode legs round-robin over the decode worker's ranks (SGLang's `auto`
on each engine, `ServerArgs._handle_load_balance_method`; per-rank counters
of `/debug/workers`, with rooms chosen by hand too), and the workers' own
`/server_info` says `dp_size` 2 and the method each resolved.

Prints "N passed, N failed" and exits non-zero on any failure.
"""

import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import openai
import requests

from harness import MODEL, Checks, Server, free_port, get, read_stream

PREFILL, DECODE = 2, 2
TIMEOUT_S = 2.0
WAITING_S = 2
PROMPTS = [
    "You are a support assistant for a storage company. " * 8 + f"Question {i}: which cable?"
    for i in range(20)
]


class Deployment:
    """`serve --backend sglang` with per-worker listeners, and
    `sglang-router` in PD mode in front of them."""

    def __init__(self, prefill: int = PREFILL, decode: int = DECODE, dp_size: int = 1,
                 extra: tuple = ()) -> None:
        self.base = free_port(prefill + decode)
        self.serve = Server(
            "--backend", "sglang",
            "--dp-size", str(dp_size),
            "--worker-http-base-port", str(self.base),
            "--bootstrap-timeout-s", str(TIMEOUT_S),
            # A visible transfer, so the reservation gauges can be seen.
            "--transfer", "fixed", "--transfer-ms", "40",
            *extra,
            prefill=prefill, decode=decode, kv=False,
        )
        self.port, self.url = self.serve.port, self.serve.url
        self.workers = [f"http://127.0.0.1:{self.base + i}" for i in range(prefill + decode)]
        self.router_port = free_port()
        self.router_log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        args = [
            sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation",
            "--host", "127.0.0.1", "--port", str(self.router_port),
            "--policy", "round_robin", "--log-level", "warn",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
        ]
        for i in range(prefill):
            # The bootstrap port is only passed through to both legs.
            args += ["--prefill", self.workers[i], str(8998 + i)]
        for i in range(prefill, prefill + decode):
            args += ["--decode", self.workers[i]]
        self.router = subprocess.Popen(args, stdout=self.router_log, stderr=subprocess.STDOUT)
        self.router_url = f"http://127.0.0.1:{self.router_port}"
        # Ready when a request goes through (worker registration runs in
        # the background after the router listens).
        self.wait(self.one_request_works, self.router, "sglang-router")
        self.wait_drained()

    def one_request_works(self) -> bool:
        try:
            r = requests.post(
                self.router_url + "/v1/completions",
                json={"model": MODEL, "prompt": "warm up", "max_tokens": 2}, timeout=10,
            )
            return r.status_code == 200
        except requests.RequestException:
            return False

    def wait(self, ready, proc: subprocess.Popen, name: str) -> None:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if ready():
                    return
            except OSError:
                pass
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited: {self.logs()}")
            time.sleep(0.1)
        raise RuntimeError(f"{name} did not become ready: {self.logs()}")

    def logs(self) -> str:
        self.router_log.flush()
        self.router_log.seek(0)
        return self.router_log.read()[-4000:] if hasattr(self, "router") else ""

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.router_url + "/v1", api_key="unused", max_retries=0)

    def debug(self) -> dict:
        return self.serve.workers()

    def wait_drained(self, timeout: float = 20) -> dict:
        deadline = time.time() + timeout
        while True:
            v = self.debug()
            if v["in_flight"] == 0 and v["open_streams"] == 0 and all(w["drained"] for w in v["workers"]):
                for w in v["workers"]:
                    cap = w["capacity"]
                    assert w["live_handoffs"] == 0, w
                    assert cap["active_blocks"] == 0, w
                    assert cap["pinned_source_blocks"] == 0, w
                    assert cap["reserved_destination_blocks"] == 0, w
                return v
            if time.time() > deadline:
                raise AssertionError(f"workers not drained: {v}")
            time.sleep(0.05)

    def metrics(self) -> dict:
        return self.serve.metrics()

    def stop(self) -> None:
        self.router.terminate()
        self.serve.stop()
        self.router.wait(timeout=30)
        self.router_log.close()
        os.unlink(self.router_log.name)


def one(c: openai.OpenAI, i: int) -> tuple[int, int]:
    """Request i through the router: completions or chat, streamed or not,
    i % 4 picks. Returns (completion tokens reported, asked)."""
    n = 4 + i % 9
    prompt = PROMPTS[i % len(PROMPTS)]
    extra = {"ignore_eos": True}
    kind = i % 4
    if kind == 0:
        r = c.completions.create(model=MODEL, prompt=prompt, max_tokens=n, extra_body=extra)
        assert r.choices[0].text and r.usage.prompt_tokens > 0
        return r.usage.completion_tokens, n
    if kind == 1:
        chunks = list(c.completions.create(
            model=MODEL, prompt=prompt, max_tokens=n, stream=True,
            stream_options={"include_usage": True}, extra_body=extra))
        assert sum(1 for k in chunks if k.choices and k.choices[0].text) == n
        return chunks[-1].usage.completion_tokens, n
    messages = [{"role": "user", "content": prompt}]
    if kind == 2:
        r = c.chat.completions.create(
            model=MODEL, messages=messages, max_completion_tokens=n, extra_body=extra)
        assert r.choices[0].message.content and r.usage.prompt_tokens > 0
        return r.usage.completion_tokens, n
    chunks = list(c.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=n, stream=True,
        stream_options={"include_usage": True}, extra_body=extra))
    assert chunks[-1].usage is not None
    return chunks[-1].usage.completion_tokens, n


def test_router_runs_200_requests(d: Deployment) -> None:
    before = d.metrics()
    seen = {"reserved": 0.0, "pinned": 0.0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            m = d.metrics()
            for w in range(PREFILL, PREFILL + DECODE):
                seen["reserved"] = max(seen["reserved"], m[("sglang:handoff_reserved_destination_blocks", str(w))])
            for w in range(PREFILL):
                seen["pinned"] = max(seen["pinned"], m[("sglang:handoff_pinned_source_blocks", str(w))])
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    c = d.client()
    try:
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda i: one(c, i), range(200)))
    finally:
        stop.set()
        sampler.join()
    for got, asked in results:
        assert got == asked, results
    print(f"     200 requests; peak reserved destination blocks {seen['reserved']:.0f}, "
          f"peak pinned source blocks {seen['pinned']:.0f}", flush=True)
    after = d.metrics()
    assert seen["reserved"] > 0, "no decode worker was seen holding a reservation"
    assert seen["pinned"] > 0, "no prefill worker was seen holding KV for its transfer"
    for w in range(PREFILL, PREFILL + DECODE):
        key = ("sglang:time_to_first_token_seconds_count", str(w))
        assert after[key] > before.get(key, 0), f"decode worker {w} streamed nothing"
    for w in range(PREFILL):
        key = ("sglang:prefix_cache_queries_total", str(w))
        assert after[key] > before.get(key, 0), f"prefill worker {w} prefilled nothing"
    d.wait_drained()


def test_native_generate_through_the_router(d: Deployment) -> None:
    for i in range(8):
        stream = i % 2 == 1
        body = {
            "text": PROMPTS[i], "stream": stream,
            "sampling_params": {"max_new_tokens": 6, "ignore_eos": True},
        }
        r = requests.post(d.router_url + "/generate", json=body, timeout=30, stream=stream)
        assert r.status_code == 200, (r.status_code, r.text)
        if stream:
            events = [ln[len("data: "):] for ln in r.iter_lines(decode_unicode=True)
                      if ln.startswith("data: ")]
            assert events[-1] == "[DONE]", events
            out = json.loads(events[-2])
        else:
            out = r.json()
        meta = out["meta_info"]
        assert meta["completion_tokens"] == 6 and meta["prompt_tokens"] > 0, out
        assert meta["finish_reason"] == {"type": "length", "length": 6}, out
        assert out["text"], out
    d.wait_drained()


def leg(url: str, room: int, stream: bool) -> requests.Response:
    body = {
        "model": MODEL, "prompt": PROMPTS[0], "max_tokens": 4, "stream": stream,
        "bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": room,
    }
    return requests.post(url + "/v1/completions", json=body, timeout=30)


def failed_total(d: Deployment) -> float:
    return sum(v for (k, _), v in d.metrics().items() if k == "sglang:handoff_requests_failed_total")


def lone_leg_fails(d: Deployment, worker: str, room: int, timeout_s: float, *says: str) -> None:
    """A leg sent alone to `worker`, plain and streamed: a 500 saying each
    of `says`, after at least `timeout_s`; the deployment drains after each."""
    for stream in (False, True):
        t0 = time.time()
        r = leg(worker, room, stream)
        waited = time.time() - t0
        assert r.status_code == 500, (r.status_code, r.text)
        msg = r.json()["error"]["message"]
        assert all(s in msg for s in says), msg
        assert waited >= timeout_s * 0.9, waited
        d.wait_drained()


def test_a_leg_without_its_partner_times_out(d: Deployment) -> None:
    """A prefill leg alone waits for its decode leg up to the bootstrap
    timeout and never reaches the engine."""
    before = failed_total(d)
    lone_leg_fails(
        d, d.workers[0], 424242, TIMEOUT_S, "bootstrap_room", "its decode leg did not arrive"
    )
    # Nothing reached the engine: no request was counted as failed.
    assert failed_total(d) == before


def test_a_decode_leg_alone_reserves_until_the_waiting_timeout(d: Deployment) -> None:
    """SGLang's decode preallocates on its own leg's arrival
    (`disaggregation/decode.py`, `DecodePreallocQueue`) and fails the
    request after SGLANG_DISAGGREGATION_WAITING_TIMEOUT
    (`common/conn.py`, `CommonKVReceiver._check_waiting_timeout`) with a
    500; here the waiting timeout is `--reservation-ttl-s`."""
    before = failed_total(d)
    lone_leg_fails(d, d.workers[1], 434343, WAITING_S, "in KVPoll.WaitingForInput")
    # The reservation reached the engine and ended there, once each.
    assert failed_total(d) == before + 2


def test_a_client_that_leaves_mid_stream_frees_both_sides(d: Deployment) -> None:
    conn = read_stream(d.router_port, {
        "model": MODEL, "prompt": PROMPTS[1], "max_tokens": 20000, "ignore_eos": True, "stream": True,
    }, 5)
    v = d.debug()
    assert v["in_flight"] == 1 and not all(w["drained"] for w in v["workers"]), v
    conn.close()
    d.wait_drained(timeout=10)


def rank_counts(d: Deployment) -> dict:
    """Requests each (worker, rank) took from its worker's listener."""
    return {(w["worker"], w["dp_rank"]): w["listener_requests"] for w in d.debug()["workers"]}


def test_dp2_prefill_by_room_decode_round_robin(d: Deployment) -> None:
    for w, method in zip(d.workers, ["follow_bootstrap_room", "round_robin"]):
        status, body = get(w + "/server_info")
        info = json.loads(body)
        assert status == 200 and info["dp_size"] == 2, info
        assert [s["dp_rank"] for s in info["internal_states"]] == [0, 1], info
        assert info["load_balance_method"] == method, info
    before = rank_counts(d)
    c = d.client()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda i: one(c, i), range(40)))
    for got, asked in results:
        assert got == asked, results
    d.wait_drained()
    after = rank_counts(d)
    delta = {k: after[k] - before.get(k, 0) for k in after}
    # The router picks rooms at random: both prefill ranks took legs; the
    # decode legs alternate, 20 on each rank.
    assert delta[(0, 0)] + delta[(0, 1)] == 40, delta
    assert delta[(0, 0)] > 0 and delta[(0, 1)] > 0, delta
    assert (delta[(1, 0)], delta[(1, 1)]) == (20, 20), delta
    # Rooms by hand: 11 -> prefill rank 1, 12 -> prefill rank 0; the two
    # decode legs take the decode worker's two ranks in turn.
    decode_ranks = []
    for room, prefill_rank in [(11, 1), (12, 0)]:
        before = rank_counts(d)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            legs = list(pool.map(lambda u: leg(u, room, False), d.workers))
        assert [r.status_code for r in legs] == [200, 200], [r.text for r in legs]
        d.wait_drained()
        after = rank_counts(d)
        moved = {k for k in after if after[k] != before.get(k, 0)}
        assert (0, prefill_rank) in moved and len(moved) == 2, (room, before, after)
        decode_ranks += [r for (w, r) in moved if w == 1]
    assert sorted(decode_ranks) == [0, 1], decode_ranks


def main() -> int:
    checks = Checks()
    run = checks.run
    d = Deployment()
    try:
        run("sglang-router runs 200 requests", test_router_runs_200_requests, d)
        run("native /generate through the router", test_native_generate_through_the_router, d)
        run("a leg without its partner times out", test_a_leg_without_its_partner_times_out, d)
        run("a client that leaves mid-stream frees both sides",
            test_a_client_that_leaves_mid_stream_frees_both_sides, d)
    except Exception:  # noqa: BLE001
        print(d.logs())
        raise
    finally:
        d.stop()
    if checks.failed:
        print(d.logs() if not d.router_log.closed else "")
    d2 = Deployment(prefill=1, decode=1, dp_size=2)
    try:
        run("dp-size 2: prefill legs by room, decode legs round robin",
            test_dp2_prefill_by_room_decode_round_robin, d2)
    finally:
        d2.stop()
    # One prefill worker: a lone decode leg knows its prefill and reserves.
    d3 = Deployment(prefill=1, decode=1, extra=("--reservation-ttl-s", str(WAITING_S)))
    try:
        run("a decode leg alone reserves until the waiting timeout",
            test_a_decode_leg_alone_reserves_until_the_waiting_timeout, d3)
    finally:
        d3.stop()
    return checks.report()


if __name__ == "__main__":
    sys.exit(main())
