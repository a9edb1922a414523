"""Real-client checks of `handoff-mocker serve` (run by tests/python/run.sh).

Each check starts from a server this script launched on loopback with free
ports, and ends it. Prints "N passed, N failed" and exits non-zero on any
failure.
"""

import json
import sys
import threading
import time
import urllib.request
from typing import Any

import msgspec
import openai
import zmq
from msgspec.msgpack import Decoder

from harness import MODEL, Checks, Server, free_port, read_stream

BLOCK = 16


# vLLM's structs (vllm/distributed/kv_events.py), as its example subscriber
# declares them: array_like events, as vLLM wrote them before 0.28, with
# the KV-group fields that follow `lora_name` (`extra_keys`, `group_idx`,
# `kv_cache_spec_kind`, `kv_cache_spec_sliding_window`; `group_idx` after
# `BlockRemoved.medium`).
class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Any]
    data_parallel_rank: int | None = None


class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True):
    """Base class of KV cache events."""


class BlockStored(KVCacheEvent):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class BlockRemoved(KVCacheEvent):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class AllBlocksCleared(KVCacheEvent):
    pass


class KVEventBatch(EventBatch):
    events: list[BlockStored | BlockRemoved | AllBlocksCleared]


# The same events as vLLM 0.28 on declares them (tagged maps,
# `--kv-event-encoding map`); the batch stays an array.
class MapEvent(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """Base class of KV cache events, map form."""


class MapBlockStored(MapEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None


class MapBlockRemoved(MapEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None
    group_idx: int | None = None


class MapAllBlocksCleared(MapEvent, tag="AllBlocksCleared"):
    pass


class MapKVEventBatch(EventBatch):
    events: list[MapBlockStored | MapBlockRemoved | MapAllBlocksCleared]


DECODER = Decoder(type=KVEventBatch)
MAP_DECODER = Decoder(type=MapKVEventBatch)
M64 = (1 << 64) - 1


def mix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def content_hash(tokens: list[int]) -> int:
    h = 0xCBF29CE484222325
    for t in tokens:
        for b in t.to_bytes(4, "little"):
            h ^= b
            h = (h * 0x100000001B3) & M64
    return h


def stand_in(x: int, i: int) -> int:
    """Stand-in token i of content x (README, "Reproducing our hashes")."""
    return mix64(mix64(x) ^ i) & 0x7FFFFFFF


class Subscriber:
    """SUB sockets on every worker's publisher, decoding as vLLM does."""

    def __init__(self, server: Server, workers: int = 2, decoder: Decoder = DECODER):
        self.decoder = decoder
        self.ctx = zmq.Context()
        self.socks = []
        self.batches: dict[int, list[tuple[int, KVEventBatch]]] = {w: [] for w in range(workers)}
        for w in range(workers):
            s = self.ctx.socket(zmq.SUB)
            s.setsockopt(zmq.SUBSCRIBE, b"")
            s.connect(f"tcp://127.0.0.1:{server.kv + w}")
            self.socks.append(s)
        self.stop_flag = False
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
        time.sleep(0.5)  # let the subscriptions reach the publishers

    def run(self) -> None:
        poller = zmq.Poller()
        for s in self.socks:
            poller.register(s, zmq.POLLIN)
        while not self.stop_flag:
            for s, _ in poller.poll(50):
                topic, seq, payload = s.recv_multipart()
                assert topic == b""
                w = self.socks.index(s)
                self.batches[w].append((int.from_bytes(seq, "big"), self.decoder.decode(payload)))

    def close(self) -> None:
        self.stop_flag = True
        self.thread.join()
        for s in self.socks:
            s.close(0)
        self.ctx.term()


def replay(server: Server, worker: int, start: int) -> list[tuple[int, KVEventBatch]]:
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.connect(f"tcp://127.0.0.1:{server.replay + worker}")
    s.send_multipart([b"", start.to_bytes(8, "big")])
    out = []
    poller = zmq.Poller()
    poller.register(s, zmq.POLLIN)
    while True:
        assert poller.poll(5000), "replay timed out"
        # [delimiter, topic, seq, payload]: vLLM 0.26's layout (the default).
        _, _, seq, payload = s.recv_multipart()
        if seq == (-1).to_bytes(8, "big", signed=True):
            break
        out.append((int.from_bytes(seq, "big"), DECODER.decode(payload)))
    s.close(0)
    ctx.term()
    return out


def check_group_fields(e: BlockStored | MapBlockStored) -> None:
    """A stored event names vLLM's one full-attention KV group as a real
    engine does (`KVCacheManager.take_events`): group 0, no window."""
    assert e.group_idx == 0, e
    assert e.kv_cache_spec_kind == "full_attention", e
    assert e.kv_cache_spec_sliding_window is None, e


def check_event_stream(batches: list[tuple[int, KVEventBatch]], chain: dict[int, int]) -> set[int]:
    """Monotone sequence numbers, a prompt block's hash recomputable from its
    token ids, a generated block's ids the stand-ins of its hash, a block
    removed only after it was stored. Returns the hashes stored."""
    seqs = [q for q, _ in batches]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"sequence gaps: {seqs[:20]}"
    live: set[int] = set()
    ever: set[int] = set()
    for _, b in batches:
        assert b.data_parallel_rank == 0
        assert b.ts > 1e9
        for e in b.events:
            if isinstance(e, BlockStored):
                assert e.block_size == BLOCK and e.medium == "GPU" and e.lora_id is None
                check_group_fields(e)
                assert e.lora_name is None and e.extra_keys == [None] * len(e.block_hashes), \
                    "a base-model block's extra keys are None, one per block"
                assert len(e.token_ids) == BLOCK * len(e.block_hashes), "token ids per block"
                prev = chain.get(e.parent_block_hash) if e.parent_block_hash is not None else None
                if e.parent_block_hash is not None:
                    assert prev is not None, "parent never stored"
                for i, h in enumerate(e.block_hashes):
                    ids = e.token_ids[i * BLOCK:(i + 1) * BLOCK]
                    c = content_hash(ids)
                    nxt = mix64(c ^ 0x5EED) if prev is None else mix64(prev ^ c)
                    if h == mix64(nxt) & ~31 & M64:
                        prev = nxt
                    else:
                        # A generated block: the core's hash, stand-in ids.
                        assert ids == [stand_in(h, j) for j in range(BLOCK)], \
                            "neither a prompt block's hash nor a generated block's ids"
                        prev = h
                    chain[h] = prev
                    live.add(h)
                    ever.add(h)
            elif isinstance(e, BlockRemoved):
                assert e.group_idx == 0, e
                for h in e.block_hashes:
                    assert h in live, "Removed before Stored"
                    live.discard(h)
            else:
                live.clear()
    return ever


SYSTEM = (
    "You are a careful assistant for a storage company. Answer in short plain sentences, "
    "cite the manual section when you can, never guess part numbers, and say so when the "
    "question is outside the manual. The manual covers installation, cabling, firmware, "
    "warranty, returns and safety. "
) * 3


def test_openai_client_streams_chat_and_completion(s: Server) -> None:
    c = s.client()
    models = c.models.list()
    assert [m.id for m in models.data] == [MODEL]
    chunks = list(c.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": SYSTEM},
                               {"role": "user", "content": "How do I update firmware?"}],
        max_tokens=12, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    ))
    text_chunks = [ch for ch in chunks if ch.choices and ch.choices[0].delta.content]
    assert len(text_chunks) == 12, len(text_chunks)  # one token per pass, streamed as produced
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finish == ["length"]
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == 12
    assert usage.prompt_tokens > 100 and usage.total_tokens == usage.prompt_tokens + 12
    first_prompt = usage.prompt_tokens

    stream = c.completions.create(
        model=MODEL, prompt=SYSTEM + "Q: what is covered?", max_tokens=7, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    texts = [ch.choices[0].text for ch in chunks if ch.choices and ch.choices[0].text]
    assert len(texts) == 7
    assert chunks[-1].usage.completion_tokens == 7

    # Whole responses; min_tokens and EOS; the same prompt twice shares its blocks.
    whole = c.completions.create(model=MODEL, prompt=SYSTEM + "Q: returns?", max_tokens=30,
                                 extra_body={"min_tokens": 20})
    assert 20 <= whole.usage.completion_tokens <= 30
    assert whole.choices[0].finish_reason in ("stop", "length")
    again = c.chat.completions.create(
        model=MODEL, messages=[{"role": "system", "content": SYSTEM},
                               {"role": "user", "content": "How do I update firmware?"}],
        max_tokens=3, extra_body={"ignore_eos": True},
    )
    assert again.usage.completion_tokens == 3
    assert again.usage.prompt_tokens == first_prompt
    cached = again.usage.prompt_tokens_details.cached_tokens
    assert cached >= first_prompt - 2 * BLOCK and cached % BLOCK == 0, cached
    s.wait_drained()


def test_kv_events_decode_with_vllm_structs(s: Server, sub: Subscriber) -> None:
    c = s.client()
    for q in ["install?", "cabling?", "warranty?", "install?"]:
        c.completions.create(model=MODEL, prompt=SYSTEM + q, max_tokens=4)
    # Distinct long prompts overflow the prefill worker's small pool
    # (--prefill-kv-tokens), so it evicts: Removed events follow.
    for i in range(12):
        c.completions.create(model=MODEL, prompt=f"Unrelated text number {i}: " + "lorem ipsum dolor " * 60, max_tokens=2)
    s.wait_drained()
    time.sleep(0.3)
    chain: dict[int, int] = {}
    stored = {w: check_event_stream(sub.batches[w], chain) for w in (0, 1) if sub.batches[w]}
    assert stored.get(0), "the prefill worker published nothing"
    assert stored.get(1), "the decode worker published nothing (activation stores the prompt)"
    removed = [e for _, b in sub.batches[0] for e in b.events if isinstance(e, BlockRemoved)]
    assert removed, "the small prefill pool evicted nothing"
    # The replay socket returns the same batches from any start.
    full = replay(s, 0, 0)
    assert [q for q, _ in full] == list(range(len(full)))
    seen = {q: b for q, b in sub.batches[0]}
    for q, b in full:
        if q in seen:
            assert msgspec.msgpack.encode(seen[q]) == msgspec.msgpack.encode(b)
    tail = replay(s, 0, len(full) - 1)
    assert [q for q, _ in tail] == [len(full) - 1]


def test_metrics_match_capacity_snapshots(s: Server) -> None:
    c = s.client()
    prompt_tokens = cached = 0
    for q in ["firmware?", "firmware?"]:
        r = c.completions.create(model=MODEL, prompt=SYSTEM + q, max_tokens=2)
        prompt_tokens += r.usage.prompt_tokens
        cached += r.usage.prompt_tokens_details.cached_tokens
    before = s.metrics()
    v = s.wait_drained()
    m = s.metrics()
    for w in v["workers"]:
        e, cap = str(w["worker"]), w["capacity"]
        assert m[("vllm:num_requests_running", e)] == cap["running_requests"]
        assert m[("vllm:num_requests_waiting", e)] == cap["waiting_requests"]
        used = cap["active_blocks"] + cap["pinned_source_blocks"] + cap["reserved_destination_blocks"]
        assert abs(m[("vllm:kv_cache_usage_perc", e)] - used / cap["total_blocks"]) < 1e-9
        assert m[("vllm:handoff_pinned_source_blocks", e)] == cap["pinned_source_blocks"]
        assert m[("vllm:handoff_reserved_destination_blocks", e)] == cap["reserved_destination_blocks"]
    # Counters: the prefill worker saw every prompt, and its hits are the
    # responses' cached tokens.
    assert m[("vllm:prefix_cache_queries_total", "0")] >= prompt_tokens
    assert m[("vllm:prefix_cache_hits_total", "0")] >= cached > 0
    assert m[("vllm:e2e_request_latency_seconds_count", "1")] >= 2
    assert m[("vllm:time_to_first_token_seconds_count", "1")] >= 2
    assert ("vllm:inter_token_latency_seconds_count", "1") in m
    assert ("vllm:request_queue_time_seconds_count", "1") in m
    assert ("vllm:num_preemptions_total", "0") in m
    assert ("vllm:handoff_lease_expiries_total", "0") in m
    assert before[("vllm:prefix_cache_hits_total", "0")] == m[("vllm:prefix_cache_hits_total", "0")]
    status, one = s.get("/workers/1/metrics")
    assert status == 200 and b'engine="0"' not in one and b'engine="1"' in one


def test_disconnect_mid_stream_drains(s: Server) -> None:
    conn = read_stream(s.port, {
        "model": MODEL, "prompt": SYSTEM + "long answer please", "max_tokens": 20000,
        "ignore_eos": True, "stream": True,
    }, 5)
    v = s.workers()
    assert v["open_streams"] == 1 and not all(w["drained"] for w in v["workers"])
    conn.close()
    v = s.wait_drained(timeout=10)
    for w in v["workers"]:
        cap = w["capacity"]
        assert w["live_handoffs"] == 0
        assert cap["pinned_source_blocks"] == 0 and cap["reserved_destination_blocks"] == 0
        assert cap["active_blocks"] == 0
    assert v["open_streams"] == 0


def test_bad_requests_get_openai_errors(s: Server) -> None:
    cases = [
        ("/v1/completions", b'{"model": "mock-model", "prompt": ', 400, None),
        ("/v1/completions", b'{"model": "other", "prompt": "x"}', 404, "model"),
        ("/v1/completions", b'{"model": "mock-model", "prompt": "x", "max_tokens": 99999999}', 400, "max_tokens"),
        ("/v1/completions", b'{"model": "mock-model", "prompt": "x", "max_tokens": 2, "min_tokens": 3}', 400, "min_tokens"),
        ("/v1/chat/completions", b'{"model": "mock-model", "messages": "hi"}', 400, "messages"),
        ("/v1/chat/completions", b'{"model": "mock-model", "messages": [{"role": "user", "content": 3}]}', 400, "messages"),
        ("/v1/nothing", b"{}", 404, None),
    ]
    for path, body, status, param in cases:
        got, text = s.post(path, body)
        assert got == status, (path, body, got, text)
        err = json.loads(text)["error"]
        assert err["code"] == status and err["param"] == param and err["message"]
    got, text = s.post("/v1/completions", b"x" * (5 << 20))
    assert 400 <= got < 500 and "error" in json.loads(text)
    c = s.client()
    try:
        c.completions.create(model="other", prompt="x")
        raise AssertionError("expected NotFoundError")
    except openai.NotFoundError:
        pass
    # The server is still fine.
    assert c.completions.create(model=MODEL, prompt="still up?", max_tokens=1).usage.completion_tokens == 1


def test_reservation_publishes_nothing_before_activation() -> None:
    # A 1.5 s transfer keeps the destination reserved, not yet active.
    s = Server("--transfer", "fixed", "--transfer-ms", "1500")
    sub = Subscriber(s)
    try:
        c = s.client()
        done = threading.Event()

        def ask() -> None:
            c.completions.create(model=MODEL, prompt=SYSTEM + "slow transfer", max_tokens=2)
            done.set()

        t = threading.Thread(target=ask)
        t.start()
        deadline = time.time() + 10
        while s.workers()["workers"][1]["capacity"]["reserved_destination_blocks"] == 0:
            assert time.time() < deadline, "the destination never reserved"
            time.sleep(0.02)
        time.sleep(0.3)
        # Reserved, the transfer in progress: the prefill worker stored the
        # prompt; the destination published nothing.
        assert s.workers()["workers"][1]["capacity"]["reserved_destination_blocks"] > 0
        assert any(isinstance(e, BlockStored) for _, b in sub.batches[0] for e in b.events)
        assert not sub.batches[1], sub.batches[1]
        m = s.metrics()
        assert m[("vllm:handoff_reserved_destination_blocks", "1")] > 0
        t.join(timeout=10)
        assert done.is_set()
        s.wait_drained()
        time.sleep(0.2)
        stored = [e for _, b in sub.batches[1] for e in b.events if isinstance(e, BlockStored)]
        assert stored, "activation published nothing"
        chain: dict[int, int] = {}
        check_event_stream(sub.batches[0], chain)
        check_event_stream(sub.batches[1], chain)
    finally:
        sub.close()
        s.stop()


def post_json(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def proxy_completion(prefill_url: str, decode_url: str, body: dict) -> dict:
    """vLLM's toy proxy (tests/v1/kv_connector/nixl_integration/
    toy_proxy_server.py) in a few lines: the prefill with max_tokens=1 and
    do_remote_decode, then the original request with the returned
    kv_transfer_params to the decode worker."""
    pre = dict(body, max_tokens=1, stream=False)
    pre["kv_transfer_params"] = {
        "do_remote_decode": True, "do_remote_prefill": False,
        "remote_engine_id": None, "remote_block_ids": None,
        "remote_host": None, "remote_port": None,
    }
    params = post_json(prefill_url + "/v1/completions", pre)["kv_transfer_params"]
    dec = dict(body, kv_transfer_params=params)
    return {"prefill": params, "decode": post_json(decode_url + "/v1/completions", dec)}


def test_disaggregation_proxy() -> None:
    base = free_port(2)
    s = Server("--worker-http-base-port", str(base))
    try:
        prefill, decode = f"http://127.0.0.1:{base}", f"http://127.0.0.1:{base + 1}"
        prompt = SYSTEM + "behind a proxy"
        out = proxy_completion(
            prefill, decode, {"model": MODEL, "prompt": prompt, "max_tokens": 7, "ignore_eos": True}
        )
        p = out["prefill"]
        assert p["do_remote_prefill"] is True and p["do_remote_decode"] is False, p
        assert p["remote_engine_id"] == "0" and p["remote_port"] == base, p
        assert p["remote_block_ids"], p
        u = out["decode"]["usage"]
        assert u["completion_tokens"] == 7, u
        assert u["prompt_tokens_details"]["cached_tokens"] > 0, u
        s.wait_drained()

        # The decode streamed with the official client on the decode worker's
        # listener, the params as extra_body.
        params = post_json(prefill + "/v1/completions", {
            "model": MODEL, "prompt": prompt + " again", "max_tokens": 1,
            "kv_transfer_params": {"do_remote_decode": True},
        })["kv_transfer_params"]
        c = openai.OpenAI(base_url=decode + "/v1", api_key="unused", max_retries=0)
        chunks = list(c.completions.create(
            model=MODEL, prompt=prompt + " again", max_tokens=4, stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True, "kv_transfer_params": params},
        ))
        assert sum(1 for k in chunks if k.choices and k.choices[0].text) == 4
        assert chunks[-1].usage.completion_tokens == 4

        # The same handoff again: 404.
        try:
            c.completions.create(model=MODEL, prompt=prompt + " again", max_tokens=4,
                                 extra_body={"kv_transfer_params": params})
            raise AssertionError("a decoded handoff was accepted again")
        except openai.NotFoundError:
            pass
        # A plain request (smg's passthrough) is served whole by the worker
        # it was sent to, prefill or decode, with nothing pinned.
        for url, n in ((prefill, 1), (decode, 3)):
            r = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0) \
                .completions.create(model=MODEL, prompt="plain", max_tokens=n,
                                    extra_body={"ignore_eos": True})
            assert r.usage.completion_tokens == n, r.usage
            assert getattr(r, "kv_transfer_params", None) is None, r
        v = s.wait_drained()
        for w in v["workers"]:
            assert w["live_handoffs"] == 0 and w["capacity"]["pinned_source_blocks"] == 0, w
    finally:
        s.stop()


def test_map_form_carries_the_group_fields() -> None:
    """The tagged-map events (`--kv-event-encoding map`), decoded with vLLM
    0.28's map structs: a stored event names group 0, "full_attention" and
    one extra-keys entry per block (None on the base model; an adapter's
    `(lora_name,)` is checked by the Rust tests); a removal names group 0."""
    s = Server("--kv-event-encoding", "map", "--prefill-kv-tokens", "512",
               prefill=1, decode=0)
    sub = Subscriber(s, workers=1, decoder=MAP_DECODER)
    try:
        c = s.client()
        for i in range(6):
            c.completions.create(model=MODEL, prompt=f"text {i} " + "lorem ipsum " * 60, max_tokens=2)
        s.wait_drained()
        time.sleep(0.3)
        events = [e for _, b in sub.batches[0] for e in b.events]
        stored = [e for e in events if isinstance(e, MapBlockStored)]
        removed = [e for e in events if isinstance(e, MapBlockRemoved)]
        assert stored and removed, (len(stored), len(removed))
        for e in stored:
            check_group_fields(e)
            assert e.lora_name is None and e.extra_keys == [None] * len(e.block_hashes), e
        assert all(e.group_idx == 0 for e in removed), removed
    finally:
        sub.close()
        s.stop()


def main() -> int:
    checks = Checks()
    run = checks.run
    # A small prefill pool (128 blocks), so that the KV event check sees evictions.
    s = Server("--prefill-kv-tokens", "2048")
    sub = Subscriber(s)
    try:
        run("openai client streams chat and completion", test_openai_client_streams_chat_and_completion, s)
        run("kv events decode with vllm structs", test_kv_events_decode_with_vllm_structs, s, sub)
        run("metrics match capacity snapshots", test_metrics_match_capacity_snapshots, s)
        run("disconnect mid-stream drains", test_disconnect_mid_stream_drains, s)
        run("bad requests get openai errors", test_bad_requests_get_openai_errors, s)
    finally:
        sub.close()
        s.stop()
    run("reservation publishes nothing before activation", test_reservation_publishes_nothing_before_activation)
    run("disaggregation proxy", test_disaggregation_proxy)
    run("map form carries the group fields", test_map_form_carries_the_group_fields)
    return checks.report()


if __name__ == "__main__":
    sys.exit(main())
