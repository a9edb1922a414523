"""What gateways read from an engine, checked against `handoff-mocker serve`
(run by tests/python/run.sh). Each expectation names the consumer's file it
comes from, so a later version of a consumer can be diffed against this
table. llm-d's endpoint picker and AIBrix are Go (not installable here):
their expectations are written from their source; docs/gateways.md lists
the same table in prose.

- /metrics: every name and label set a consumer reads, parsed with
  prometheus_client's OpenMetrics parser, for both backends, on the front
  port and on a worker's own listener with `--dp-size 2` (one `engine`
  label per rank, as vLLM labels its data-parallel engines), and on an
  engine process of its own (`serve --engine`, its ranks by `dp_rank`)
  with its counters.
- KV events as llm-d subscribes (LLMD_KV): a topic `kv@<host>:<port>@<model>`
  per engine, split on `@` into three parts, on a SUB socket that binds one
  central endpoint every engine's PUB connects to; vLLM 0.26's replay
  answer with the topic frame (VLLM_KV); vLLM's `/kv_event_sources`
  table, keyed by DP rank (VLLM_SOURCES), whose endpoints a subscriber
  reaches.
- `/tokenize` and `/detokenize` (VLLM_TOKENIZE), as AIBrix's remote
  tokenizer posts them (AIBRIX_TOKENIZE), on the front port and a
  worker's listener: the ids the engine computes on (its render answer).
- SGLang's `/abort_request {rid}` (SGLANG_ABORT): the named request ends
  at once, answering 200 with finish_reason `abort`, and what it held is
  freed.
- LoRA (VLLM_LORA): with VLLM_ALLOW_RUNTIME_LORA_UPDATING set, an adapter
  loaded through `/v1/load_lora_adapter` is listed by the official
  `openai` client's `models.list()` with its `parent`, a completion naming
  it runs, `vllm:lora_requests_info` (LLMD, AIBRIX) names it in
  `running_lora_adapters` while it runs with `max_lora` = `--max-loras`,
  and unloading it twice answers 404.
- Faults a client asks for with `--client-faults` (AIBRIX_MOCK's header
  names, and the mocker's own): a status at once, a failure after N tokens
  (the engine drains), a delayed prefill leg; counted in
  `handoff_requests_failed_total{reason="client-injected"}`; ignored
  without the flag.
"""

import json
import sys
import time

import msgspec
import zmq

from harness import MODEL, Checks, Server, free_port, get
from prometheus_client.openmetrics.parser import text_string_to_metric_families

LLMD = "llm-d/llm-d-router pkg/epp/framework/plugins/datalayer/extractor/metrics/factories.go"
AIBRIX = "vllm-project/aibrix pkg/metrics/metrics.go"
VLLM = "vllm-project/vllm vllm/v1/metrics/loggers.py"
VLLM_NIXL = ("vllm-project/vllm vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py "
             "(NixlPromMetrics)")
DYNAMO_NIXL = ("ai-dynamo/dynamo components/src/dynamo/vllm/custom_connectors/"
               "nixl_with_pending_metrics.py (NixlPromMetricsWithPending)")

LLMD_KV = "llm-d/llm-d-router pkg/kvevents/engineadapter/common.go (parseTopic)"
VLLM_KV = "vllm-project/vllm vllm/distributed/kv_events.py (ZmqEventPublisher._service_replay, PR #45177)"
VLLM_SOURCES = "vllm-project/vllm vllm/entrypoints/serve/kv_events/api_router.py (PR #55844)"

VLLM_TOKENIZE = ("vllm-project/vllm vllm/entrypoints/openai/protocol.py (TokenizeResponse, "
                 "DetokenizeResponse)")
AIBRIX_TOKENIZE = "vllm-project/aibrix pkg/utils/tokenizer/adapter_vllm.go"
AIBRIX_MOCK = "vllm-project/aibrix test/e2e (x-aibrix-mock-delay-ms, x-aibrix-mock-delay-role)"
SGLANG_ABORT = "sgl-project/sglang python/sglang/srt/entrypoints/http_server.py (abort_request)"
VLLM_LORA = ("vllm-project/vllm vllm/entrypoints/openai/serving_models.py (load_lora_adapter, "
             "unload_lora_adapter, show_available_models)")

# (backend, family name as the parser reports it, type, labels a consumer
# reads, who reads it). The parser strips `_total` from counter families.
# `vllm:lora_requests_info` (LLMD, AIBRIX) exists only with LoRA served,
# as vLLM's (vllm/v1/metrics/loggers.py, gauge_lora_info): test_lora reads it.
METRICS = [
    ("vllm", "vllm:num_requests_waiting", "gauge", (), LLMD + "; " + AIBRIX),
    ("vllm", "vllm:num_requests_running", "gauge", (), LLMD + "; " + AIBRIX),
    ("vllm", "vllm:kv_cache_usage_perc", "gauge", (), LLMD + "; " + AIBRIX),
    ("vllm", "vllm:gpu_cache_usage_perc", "gauge", (), AIBRIX),
    ("vllm", "vllm:cache_config_info", "gauge", ("block_size", "num_gpu_blocks"), LLMD),
    ("vllm", "vllm:time_to_first_token_seconds", "histogram", (), AIBRIX),
    ("vllm", "vllm:time_per_output_token_seconds", "histogram", (), AIBRIX),
    ("vllm", "vllm:inter_token_latency_seconds", "histogram", (), AIBRIX),
    ("vllm", "vllm:e2e_request_latency_seconds", "histogram", (), AIBRIX),
    ("vllm", "vllm:request_queue_time_seconds", "histogram", (), AIBRIX),
    ("vllm", "vllm:prompt_tokens", "counter", (), AIBRIX),
    ("vllm", "vllm:generation_tokens", "counter", (), AIBRIX),
    ("vllm", "vllm:prefix_cache_queries", "counter", (), AIBRIX),
    ("vllm", "vllm:prefix_cache_hits", "counter", (), AIBRIX),
    ("vllm", "vllm:num_preemptions", "counter", (), AIBRIX),
    ("vllm", "vllm:nixl_xfer_time_seconds", "histogram", (), VLLM_NIXL),
    ("vllm", "vllm:nixl_post_time_seconds", "histogram", (), VLLM_NIXL),
    ("vllm", "vllm:nixl_bytes_transferred", "histogram", (), VLLM_NIXL),
    ("vllm", "vllm:nixl_num_descriptors", "histogram", (), VLLM_NIXL),
    ("vllm", "vllm:nixl_num_failed_transfers", "counter", (), VLLM_NIXL),
    ("vllm", "vllm:nixl_num_failed_notifications", "counter", (), VLLM_NIXL),
    ("vllm", "vllm:nixl_num_kv_expired_reqs", "counter", (), VLLM_NIXL),
    ("vllm", "vllm:nixl_num_pending_sends", "gauge", (), DYNAMO_NIXL),
    ("vllm", "vllm:nixl_num_in_process_reqs", "gauge", (), DYNAMO_NIXL),
    ("sglang", "sglang:num_queue_reqs", "gauge", (), LLMD),
    ("sglang", "sglang:num_waiting_reqs", "gauge", (), AIBRIX),
    ("sglang", "sglang:num_running_reqs", "gauge", (), LLMD + "; " + AIBRIX),
    ("sglang", "sglang:token_usage", "gauge", (), LLMD + "; " + AIBRIX),
    ("sglang", "sglang:cache_config_info", "gauge", ("page_size", "num_pages"), LLMD),
    ("sglang", "sglang:time_to_first_token_seconds", "histogram", (), AIBRIX),
    ("sglang", "sglang:inter_token_latency_seconds", "histogram", (), AIBRIX),
    ("sglang", "sglang:e2e_request_latency_seconds", "histogram", (), AIBRIX),
    ("sglang", "sglang:queue_time_seconds", "histogram", (), AIBRIX),
]

# vLLM's bucket boundaries (VLLM, `PrometheusStatLogger.__init__`).
BUCKETS = {
    "vllm:time_to_first_token_seconds": [
        0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
        7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0],
    "vllm:time_per_output_token_seconds": [
        0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
        10.0, 20.0, 40.0, 80.0],
    "vllm:e2e_request_latency_seconds": [
        0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
        120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0],
    # VLLM_NIXL: the transfer time drops the first of the shared time buckets.
    "vllm:nixl_xfer_time_seconds": [
        0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0],
    "vllm:nixl_post_time_seconds": [
        0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0],
    "vllm:nixl_bytes_transferred": [float(2 ** (10 + i)) for i in range(1, 25, 2)],
    "vllm:nixl_num_descriptors": [
        10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 200.0, 400.0, 1000.0, 2000.0, 4000.0,
        10000.0, 20000.0, 50000.0],
}


def families(text: bytes) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text.decode())}


def check_names(backend: str, fams: dict, engines: set) -> None:
    """Every name `backend`'s consumers read is there with its type, its
    labels, and one series per engine label in `engines`."""
    for b, name, kind, labels, who in METRICS:
        if b != backend:
            continue
        assert name in fams, f"{name} missing (read by {who})"
        f = fams[name]
        assert f.type == kind, f"{name} is a {f.type}, {who} reads a {kind}"
        seen = set()
        for s in f.samples:
            for label in labels:
                assert label in s.labels, f"{name} lacks label {label} ({who})"
            seen.add(s.labels.get("engine"))
        assert engines <= seen, f"{name}: engines {sorted(seen)}, want {sorted(engines)}"


def one_request(s: Server, i: int = 0, words: int = 40) -> None:
    """A completion of 8 tokens; `i` varies the prompt (new KV blocks)."""
    c = s.client()
    r = c.completions.create(model="mock-model", prompt=f"request {i} " + "hello " * words,
                             max_tokens=8,
                             extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 8


def test_front_metrics(backend: str) -> None:
    s = Server("--backend", backend, kv=False)
    try:
        # Past vLLM's kv_recompute_threshold (64 tokens), so the decode
        # reads the prompt's KV instead of computing it.
        one_request(s, words=100)
        s.wait_drained()
        status, text = s.get("/metrics")
        assert status == 200
        fams = families(text)
        check_names(backend, fams, {"0", "1"})
        p = backend + ":"
        prompt = {x.labels["engine"]: x.value for x in fams[p + "prompt_tokens"].samples
                  if x.name.endswith("_total")}
        gen = {x.labels["engine"]: x.value for x in fams[p + "generation_tokens"].samples
               if x.name.endswith("_total")}
        assert prompt["0"] > 0 and prompt["1"] == 0, prompt
        assert gen["1"] == 8 and gen["0"] == 0, gen
        info = fams[p + "cache_config_info"].samples
        size = "page_size" if backend == "sglang" else "block_size"
        assert all(x.value == 1 and int(x.labels[size]) > 0 for x in info), info
        if backend == "vllm":
            for name, want in BUCKETS.items():
                les = sorted({float(x.labels["le"]) for x in fams[name].samples
                              if x.name.endswith("_bucket") and x.labels["le"] != "+Inf"})
                assert les == want, f"{name} buckets {les}"
            usage = {x.labels["engine"]: x.value for x in fams["vllm:gpu_cache_usage_perc"].samples}
            kv = {x.labels["engine"]: x.value for x in fams["vllm:kv_cache_usage_perc"].samples}
            assert usage == kv
            # The one handoff's read: timed on the decode (engine 1), none on
            # the prefill; its pending send gone once drained.
            xfer = {x.labels["engine"]: x.value for x in fams["vllm:nixl_xfer_time_seconds"].samples
                    if x.name.endswith("_count")}
            assert xfer == {"0": 0, "1": 1}, xfer
            pending = {x.labels["engine"]: x.value
                       for x in fams["vllm:nixl_num_pending_sends"].samples}
            assert pending == {"0": 0, "1": 0}, pending
            assert "vllm:lora_requests_info" not in fams, "no LoRA gauge without LoRA"
    finally:
        s.stop()


def test_worker_metrics_per_rank(backend: str) -> None:
    """A worker's own /metrics with `--dp-size 2`: each rank its own
    `engine` label, as vLLM's `make_per_engine` writes (VLLM)."""
    base = free_port(2)
    s = Server("--backend", backend, "--dp-size", "2", "--worker-http-base-port", str(base),
               kv=False)
    try:
        status, text = get(f"http://127.0.0.1:{base + 1}/metrics")
        assert status == 200
        check_names(backend, families(text), {"0", "1"})
    finally:
        s.stop()


def test_engine_metrics(backend: str) -> None:
    """One engine per process (`serve --engine aggregated --dp-size 2`,
    what the image and the manifests run): every name a gateway reads,
    each rank's series, and the token counters moved by what the clients
    got."""
    s = Server("--backend", backend, "--engine", "aggregated", "--dp-size", "2",
               "--side-channel-port", "0", kv=False)
    try:
        for i in range(4):
            one_request(s, i)
        s.wait_drained()
        status, text = s.get("/metrics")
        assert status == 200
        fams = families(text)
        # The engine is one worker: its ranks share its `engine` label and
        # each has its own `dp_rank`, as in one process.
        check_names(backend, fams, {"0"})
        running = "vllm:num_requests_running" if backend == "vllm" else "sglang:num_running_reqs"
        ranks = {x.labels.get("dp_rank") for x in fams[running].samples}
        assert ranks == {"0", "1"}, ranks
        p = backend + ":"
        gen = sum(x.value for x in fams[p + "generation_tokens"].samples
                  if x.name.endswith("_total"))
        prompt = sum(x.value for x in fams[p + "prompt_tokens"].samples
                     if x.name.endswith("_total"))
        assert gen == 4 * 8 and prompt > 0, (gen, prompt)
    finally:
        s.stop()


def parse_topic(topic: bytes) -> tuple[str, str]:
    """LLMD_KV's parseTopic: exactly three `@` parts, pod and model."""
    parts = topic.decode().split("@")
    assert len(parts) == 3 and parts[0] == "kv", f"not an llm-d topic: {topic!r}"
    return parts[1], parts[2]


def test_llmd_central_subscriber() -> None:
    """Every engine's PUB connects to one SUB that binds (llm-d's central
    mode); each batch's topic names its own worker's listener."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.bind("tcp://127.0.0.1:*")
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    endpoint = sub.getsockopt(zmq.LAST_ENDPOINT).decode()
    base = free_port(2)
    s = Server("--kv-events-connect", endpoint, "--kv-topic-llmd",
               "--worker-http-base-port", str(base), kv=False)
    try:
        pods = set()
        poller = zmq.Poller()
        poller.register(sub, zmq.POLLIN)
        for i in range(20):
            one_request(s, i)
            while poller.poll(200):
                topic, seq, _payload = sub.recv_multipart()
                pod, model = parse_topic(topic)
                assert model == "mock-model"
                pods.add(pod)
            if len(pods) == 2:
                break
        assert pods == {f"127.0.0.1:{base}", f"127.0.0.1:{base + 1}"}, pods
    finally:
        s.stop()
        sub.close(0)
        ctx.term()


def check_dense(payload: bytes) -> int:
    """LLMD_KV's subscriber counts a BlockStored's tokens as blocks times
    block size: every stored block is full. Returns the BlockStored seen."""
    _ts, events, *_ = msgspec.msgpack.decode(payload)
    n = 0
    for e in events:
        if e[0] == "BlockStored":
            hashes, token_ids, block_size = e[1], e[3], e[4]
            assert len(token_ids) == len(hashes) * block_size, (len(token_ids), len(hashes))
            n += 1
    return n


def replay(endpoint: str, topic: bytes) -> list:
    """Every batch `endpoint` replays from 0, checking VLLM_KV's layout:
    `[delimiter, topic, seq, payload]`, ended by an empty topic, END_SEQ
    and an empty payload."""
    ctx = zmq.Context()
    d = ctx.socket(zmq.DEALER)
    d.connect(endpoint)
    d.send_multipart([b"", (0).to_bytes(8, "big")])
    poller = zmq.Poller()
    poller.register(d, zmq.POLLIN)
    frames = []
    try:
        while True:
            assert poller.poll(5000), "replay timed out"
            f = d.recv_multipart()
            assert len(f) == 4, f"[delimiter, topic, seq, payload], got {len(f)} frames"
            if f[2] == (-1).to_bytes(8, "big", signed=True):
                assert f[1] == b"" and f[3] == b"", "the end marker's topic is empty"
                return frames
            assert f[1] == topic, (f[1], topic)
            frames.append(f)
    finally:
        d.close(0)
        ctx.term()


def test_sources_and_replay() -> None:
    """A worker's `/kv_event_sources` (VLLM_SOURCES) names its ranks'
    publishers; the replay endpoint it names answers with the topic frame
    (VLLM_KV)."""
    base = free_port(2)
    kv, rp = free_port(4), free_port(4)
    s = Server("--dp-size", "2", "--kv-topic-llmd", "--worker-http-base-port", str(base),
               "--kv-events", f"tcp://127.0.0.1:{kv}", "--kv-replay", f"tcp://127.0.0.1:{rp}",
               kv=False)
    try:
        one_request(s)
        status, body = get(f"http://127.0.0.1:{base}/kv_event_sources")
        assert status == 200
        sources = json.loads(body)
        assert sorted(sources) == ["0", "1"], sources
        for rank, src in sources.items():
            assert src["publisher"] == "zmq" and src["enable_kv_cache_events"] is True
            assert src["endpoint"] == f"tcp://127.0.0.1:{kv + int(rank)}", src
            assert src["replay_endpoint"] == f"tcp://127.0.0.1:{rp + int(rank)}", src
            assert parse_topic(src["topic"].encode())[0] == f"127.0.0.1:{base}"
        stored = 0
        for src in sources.values():
            for f in replay(src["replay_endpoint"], src["topic"].encode()):
                stored += check_dense(f[3])
        assert stored > 0, "no BlockStored replayed"
        status, body = s.get("/kv_event_sources")
        assert status == 200 and len(json.loads(body)) == 4
    finally:
        s.stop()


def post(url: str, body: dict) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_tokenize() -> None:
    base = free_port(2)
    s = Server("--worker-http-base-port", str(base), kv=False)
    try:
        for url in (s.url, f"http://127.0.0.1:{base}"):
            # AIBRIX_TOKENIZE's completion body.
            status, body = post(url + "/tokenize", {
                "model": "mock-model", "prompt": "the quick brown fox",
                "add_special_tokens": True, "return_token_strs": True})
            assert status == 200, body
            t = json.loads(body)
            assert set(t) == {"count", "max_model_len", "tokens", "token_strs"}, t
            assert t["count"] == len(t["tokens"]) == len(t["token_strs"]) > 0
            status, body = post(url + "/v1/completions/render",
                                {"model": "mock-model", "prompt": "the quick brown fox"})
            assert status == 200, body
            assert json.loads(body)[0]["token_ids"] == t["tokens"], "render and tokenize agree"
            # Chat, as AIBRIX_TOKENIZE sends it.
            status, body = post(url + "/tokenize", {
                "model": "mock-model", "messages": [{"role": "user", "content": "hi"}],
                "add_special_tokens": False, "add_generation_prompt": True,
                "return_token_strs": False})
            assert status == 200 and json.loads(body)["token_strs"] is None, body
            status, body = post(url + "/detokenize", {"model": "mock-model",
                                                      "tokens": t["tokens"]})
            assert status == 200 and isinstance(json.loads(body)["prompt"], str), body
            status, _ = post(url + "/tokenize", {"model": "other", "prompt": "x"})
            assert status == 404
    finally:
        s.stop()


def test_abort_request() -> None:
    import threading
    s = Server("--backend", "sglang", "--speed", "0.02", kv=False)
    try:
        out = {}

        def generate():
            out["r"] = post(s.url + "/generate", {
                "rid": "gateway-rid-1", "text": "hello " * 30,
                "sampling_params": {"max_new_tokens": 500, "ignore_eos": True}})

        t = threading.Thread(target=generate)
        t.start()
        deadline = time.time() + 10
        while s.workers()["in_flight"] == 0:
            assert time.time() < deadline, "the request never started"
            time.sleep(0.02)
        status, body = post(s.url + "/abort_request", {"rid": "unknown-rid"})
        assert status == 200 and body == b"", "an unknown rid is ignored, answered 200"
        status, body = post(s.url + "/abort_request", {"rid": "gateway-rid-1"})
        assert status == 200 and body == b"", (status, body)
        t.join(30)
        status, body = out["r"]
        assert status == 200, body
        meta = json.loads(body)["meta_info"]
        assert meta["finish_reason"]["type"] == "abort", meta
        assert meta["completion_tokens"] < 500, meta
        v = s.wait_drained()
        assert all(w["capacity"]["active_blocks"] == 0 for w in v["workers"]), v
    finally:
        s.stop()


def post_h(url: str, body: dict, headers: dict) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request
    h = {"content-type": "application/json", **headers}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=h)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def injected(s: Server) -> float:
    _, text = s.get("/metrics")
    for f in text_string_to_metric_families(text.decode()):
        for x in f.samples:
            if x.labels.get("reason") == "client-injected" and x.name.endswith("_total"):
                return x.value
    return 0.0


def test_client_faults() -> None:
    body = {"model": "mock-model", "prompt": "fault " * 20, "max_tokens": 20, "ignore_eos": True}
    off = Server(kv=False)
    try:
        status, _ = post_h(off.url + "/v1/completions", body, {"x-mock-fail-status": "429"})
        assert status == 200, "without --client-faults the header is ignored"
    finally:
        off.stop()
    s = Server("--client-faults", kv=False)
    try:
        status, err = post_h(s.url + "/v1/completions", body, {"x-mock-fail-status": "429"})
        assert status == 429 and json.loads(err)["error"]["code"] == 429, err
        status, _ = post_h(s.url + "/v1/completions", body, {"x-aibrix-mock-fail": "prefill"})
        assert status == 500
        status, err = post_h(s.url + "/v1/completions", body, {"x-mock-fail-after-tokens": "3"})
        assert status >= 500, (status, err)
        s.wait_drained()
        assert injected(s) == 3, injected(s)
        t0 = time.time()
        status, _ = post_h(s.url + "/v1/completions", body,
                           {"x-aibrix-mock-delay-ms": "400", "x-aibrix-mock-delay-role": "prefill"})
        assert status == 200 and time.time() - t0 >= 0.4
        status, _ = post_h(s.url + "/v1/completions", body, {"x-mock-fail-status": "99"})
        assert status == 400, "a malformed fault header is refused"
    finally:
        s.stop()
    # Per leg on the workers' listeners (AIBRIX_MOCK): the prefill worker
    # fails, the decode worker is held, the same headers sent to both.
    base = free_port(2)
    s = Server("--client-faults", "--worker-http-base-port", str(base), kv=False)
    try:
        legs = {"x-aibrix-mock-fail": "prefill", "x-aibrix-mock-delay-ms": "300",
                "x-aibrix-mock-delay-role": "decode"}
        t0 = time.time()
        status, _ = post_h(f"http://127.0.0.1:{base}/v1/completions", body, legs)
        assert status == 500 and time.time() - t0 < 0.3, status
        t0 = time.time()
        status, _ = post_h(f"http://127.0.0.1:{base + 1}/v1/completions", body, legs)
        assert status == 200 and time.time() - t0 >= 0.3, status
        assert injected(s) == 1
    finally:
        s.stop()


def lora_info(s: Server) -> list:
    """The label sets of `vllm:lora_requests_info` (LLMD: the picker reads
    the labels of the newest sample)."""
    _, text = s.get("/metrics")
    return [x.labels for f in text_string_to_metric_families(text.decode())
            if f.name == "vllm:lora_requests_info" for x in f.samples]


def test_lora() -> None:
    import os
    import threading

    import openai
    os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    try:
        s = Server("--enable-lora", "--max-loras", "2", prefill=1, decode=0, kv=False)
    finally:
        del os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"]
    try:
        status, text = post(s.url + "/v1/load_lora_adapter",
                            {"lora_name": "sql", "lora_path": "/adapters/sql"})
        assert (status, text) == (200, b"Success: LoRA adapter 'sql' added successfully."), text
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="unused")
        cards = {m.id: m for m in client.models.list().data}
        assert set(cards) == {MODEL, "sql"}, cards
        assert cards["sql"].model_extra["parent"] == MODEL, cards["sql"]
        assert cards["sql"].model_extra["root"] == "/adapters/sql"
        done = []
        t = threading.Thread(target=lambda: done.append(client.completions.create(
            model="sql", prompt="lora " * 40, max_tokens=300, extra_body={"ignore_eos": True})))
        t.start()
        seen = False
        for _ in range(400):
            if any(x.get("running_lora_adapters") == "sql" and x.get("max_lora") == "2"
                   for x in lora_info(s)):
                seen = True
                break
            time.sleep(0.01)
        t.join(120)
        assert seen, lora_info(s)
        _, text = s.get("/metrics")
        lora = families(text)["vllm:lora_requests_info"]
        assert lora.type == "gauge" and lora.samples, lora
        for x in lora.samples:
            for label in ("running_lora_adapters", "waiting_lora_adapters", "max_lora"):
                assert label in x.labels, (label, x)
            assert x.value > 1.7e9, x
        assert done and done[0].usage.completion_tokens == 300
        try:
            client.completions.create(model="nope", prompt="x", max_tokens=1)
            raise AssertionError("an unknown model is refused")
        except openai.NotFoundError:
            pass
        assert post(s.url + "/v1/unload_lora_adapter", {"lora_name": "sql"})[0] == 200
        status, err = post(s.url + "/v1/unload_lora_adapter", {"lora_name": "sql"})
        assert status == 404 and json.loads(err)["error"]["type"] == "NotFoundError", err
    finally:
        s.stop()


def main() -> int:
    checks = Checks()
    for backend in ("vllm", "sglang"):
        checks.run(f"{backend} /metrics has every name a gateway reads", test_front_metrics,
                   backend)
        checks.run(f"{backend} worker /metrics per DP rank", test_worker_metrics_per_rank,
                   backend)
        checks.run(f"{backend} engine process /metrics (serve --engine)", test_engine_metrics,
                   backend)
    checks.run("llm-d central subscriber hears every engine by its topic",
               test_llmd_central_subscriber)
    checks.run("kv_event_sources and the four-frame replay", test_sources_and_replay)
    checks.run("tokenize and detokenize as vLLM answers", test_tokenize)
    checks.run("SGLang abort_request ends the rid and frees it", test_abort_request)
    checks.run("client-asked faults reach the client and the metrics", test_client_faults)
    checks.run("a LoRA adapter loads, lists, runs and shows in lora_requests_info", test_lora)
    return checks.report()


if __name__ == "__main__":
    sys.exit(main())
