"""Serve traffic for the Dynamo check (run by run.sh; the standard library
only).

Starts `handoff-mocker serve` (2 prefill + 2 decode workers, small KV pools
so blocks are evicted, --kv-events-out), sends REQUESTS requests,
CONCURRENCY at a time: completions and chats whose prompts share a few long
system prefixes, so prefixes are cached, routed on and evicted. Most go
through the OpenAI front port (serve's own router); with vLLM every fourth
goes the way a disaggregation proxy sends it instead, through the workers'
own listeners (`kv_transfer_params`: the prefill with `do_remote_decode` to
a prefill worker, then the decode with the params it returned to a decode
worker). Before each request it asks the port it goes to for the prompt's
token ids (`/v1/completions/render` or the chat one), the ones the engine
computes on. Once every worker is drained it records each
worker's cached blocks (`/debug/workers`, in pages of `/server_info`'s
`page_size`), then stops serve with SIGTERM (which flushes the JSONL).

Writes into OUT: `serve-BACKEND.jsonl` (the events),
`serve-BACKEND.prompts.jsonl` (`{"token_ids": [...]}` per request) and
`serve-BACKEND.workers.json` (cached tokens per worker id).

    python3 drive.py BIN BACKEND OUT
"""

import concurrent.futures
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

MODEL = "handoff-mocker"
REQUESTS = 240
CONCURRENCY = 8


def free_port(n: int = 1) -> int:
    """A port with the n - 1 after it free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        try:
            for p in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise RuntimeError(f"no {n} free consecutive ports")


def call(url: str, body: dict | None = None) -> dict:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def bodies(rng: random.Random) -> list[tuple[str, dict]]:
    """The requests, deterministic: a route and its body."""
    words = [f"w{i}x" for i in range(500)]
    systems = [" ".join(rng.choice(words) for _ in range(rng.randint(150, 700))) for _ in range(5)]
    out = []
    for i in range(REQUESTS):
        system = rng.choice(systems)
        question = " ".join(rng.choice(words) for _ in range(rng.randint(5, 60)))
        opts = {"model": MODEL, "max_tokens": rng.randint(8, 80), "ignore_eos": True}
        if i % 3 == 2:
            msgs = [{"role": "system", "content": system}, {"role": "user", "content": question}]
            out.append(("/v1/chat/completions", {**opts, "messages": msgs}))
        else:
            out.append(("/v1/completions", {**opts, "prompt": f"{system} {question}"}))
    return out


def main() -> int:
    binary, backend, out = sys.argv[1:4]
    base = free_port(5)
    port = base + 4
    url = f"http://127.0.0.1:{port}"
    events = os.path.join(out, f"serve-{backend}.jsonl")
    proc = subprocess.Popen([
        binary, "serve", "--backend", backend, "--prefill", "2", "--decode", "2",
        "--http", f"127.0.0.1:{port}", "--speed", "20", "--kv-events-out", events,
        "--worker-http-base-port", str(base),
        "--prefill-kv-tokens", "4096", "--decode-kv-tokens", "8192",
    ], stdout=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/ready", timeout=2)
                break
            except (OSError, urllib.error.HTTPError):
                if proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("serve did not become ready")
                time.sleep(0.1)
        prompts = []
        roles: dict[str, list[str]] = {"prefill": [], "decode": []}
        for w in range(4):
            wurl = f"http://127.0.0.1:{base + w}"
            roles[call(wurl + "/server_info")["disaggregation_mode"]].append(wurl)

        def one(i: int, item: tuple[str, dict]) -> None:
            route, body = item
            proxied = backend == "vllm" and i % 4 == 3
            first = roles["prefill"][i % 2] if proxied else url
            rendered = call(first + route + "/render", body)
            rendered = rendered[0] if isinstance(rendered, list) else rendered
            prompts.append(rendered["token_ids"])
            if proxied:
                pre = call(first + route, {**body, "max_tokens": 1,
                                           "kv_transfer_params": {"do_remote_decode": True}})
                body = {**body, "kv_transfer_params": pre["kv_transfer_params"]}
                r = call(roles["decode"][(i // 2) % 2] + route, body)
            else:
                r = call(url + route, body)
            assert r["usage"]["prompt_tokens"] == len(rendered["token_ids"]), (r["usage"], route)

        t0 = time.time()
        with concurrent.futures.ThreadPoolExecutor(CONCURRENCY) as pool:
            list(pool.map(one, *zip(*enumerate(bodies(random.Random(7))))))
        while True:
            v = call(url + "/debug/workers")
            if v["in_flight"] == 0 and all(w["drained"] for w in v["workers"]):
                break
            time.sleep(0.1)
        page = call(url + "/server_info")["page_size"]
        cached = {str(w["worker"]): w["capacity"]["cached_blocks"] * page for w in v["workers"]}
        print(f"{backend}: {REQUESTS} requests through serve in {time.time() - t0:.1f}s; "
              f"cached tokens per worker {cached}", flush=True)
        with open(os.path.join(out, f"serve-{backend}.workers.json"), "w") as f:
            json.dump(cached, f)
        with open(os.path.join(out, f"serve-{backend}.prompts.jsonl"), "w") as f:
            for ids in prompts:
                f.write(json.dumps({"token_ids": ids}) + "\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
    return rc


if __name__ == "__main__":
    sys.exit(main())
