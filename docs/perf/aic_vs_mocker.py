#!/usr/bin/env python3
"""AIConfigurator's predictions against the mocker replaying the same
shapes with `--model/--gpu/--tp` (issue 33's five shapes), as a markdown
table on stdout.

    python3 -m venv /tmp/venv-aic && /tmp/venv-aic/bin/pip install aiconfigurator==0.12.0
    cargo build -p handoff-mocker
    /tmp/venv-aic/bin/python docs/perf/aic_vs_mocker.py target/debug/handoff-mocker > table.md

Each mocker figure is a replay on one aggregated worker of a generated
Mooncake trace: TTFT of a single request (after a cached prefix: an earlier
request left it in the prefix cache), or the median inter-token latency of
a batch that arrives at once (`--max-batched-tokens` = the batch's tokens):
the TPOT of the request whose first token came last, whose every later
token is a pass that decodes the whole batch.
Pools are given explicitly (4x the trace's tokens), so Dynamo's polynomial,
whose decode time is the pool's fill, reads a quarter-full pool.
"""

import glob
import json
import logging
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BLOCK = 512  # tokens per trace hash id

SHAPES = [
    ("prefill 4k", "prefill", 4096, 0),
    ("4k new after 12k cached", "prefill", 4096, 12288),
    ("decode b64 ctx 8k", "decode", 64, 8192),
    ("decode b256 ctx 1k", "decode", 256, 1024),
    ("decode b256 ctx 8k", "decode", 256, 8192),
]


def trace(kind, a, b):
    """Mooncake lines for one shape, and the request whose figure counts."""
    if kind == "prefill":
        new, cached = a, b
        shared = list(range(1, cached // BLOCK + 1))
        lines = []
        if cached:
            lines.append({"timestamp": 0, "input_length": cached + BLOCK, "output_length": 1,
                          "hash_ids": shared + [900_000]})
        own = list(range(1000, 1000 + new // BLOCK))
        lines.append({"timestamp": 60_000 if cached else 0, "input_length": new + cached,
                      "output_length": 2, "hash_ids": shared + own})
        return lines, len(lines) - 1
    batch, ctx = a, b
    lines = [{"timestamp": 0, "input_length": ctx, "output_length": 4,
              "hash_ids": list(range(10_000 * (i + 1), 10_000 * (i + 1) + ctx // BLOCK))}
             for i in range(batch)]
    return lines, None


def mocker(binary, kind, a, b, flags):
    lines, which = trace(kind, a, b)
    with tempfile.TemporaryDirectory() as d:
        t, out = os.path.join(d, "t.jsonl"), os.path.join(d, "r.jsonl")
        with open(t, "w") as f:
            f.write("".join(json.dumps(x) + "\n" for x in lines))
        tokens = sum(x["input_length"] for x in lines)
        cmd = [binary, "replay", "--trace", t, "--prefill", "1", "--decode", "0",
               "--max-batched-tokens", str(max(8192, tokens)),
               "--prefill-kv-tokens", str(4 * tokens + 65536),
               "--decode-kv-tokens", str(4 * tokens + 65536),
               "--json", "--per-request-jsonl", out] + flags
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        recs = sorted((json.loads(x) for x in open(out)), key=lambda r: r["id"])
    if kind == "prefill":
        return recs[which]["ttft_ms"]
    # The last request to get its first token: every pass after it decodes
    # the whole batch (SGLang prefills the batch over several passes first).
    return max(recs, key=lambda r: (r["ttft_ms"], r["id"]))["tpot_ms"]


def main(binary):
    logging.disable(logging.WARNING)
    from aiconfigurator_core.sdk.engine import EngineHandle

    head = "| profile | " + " | ".join(f"{s[0]}: AIC / mocker" for s in SHAPES) + " |"
    print(head)
    print("|---" * (len(SHAPES) + 1) + "|")
    worst = 0.0
    for path in sorted(glob.glob(os.path.join(ROOT, "profiles", "aic", "*.json"))):
        p = json.load(open(path))
        d = p["deployment"]
        system = {"h100": "h100_sxm", "h200": "h200_sxm", "b200": "b200_sxm", "a100": "a100_sxm"}[d["gpu"]]
        e = EngineHandle.compile(d["hf_id"], system, d["backend"], tp_size=d["tp"])
        flags = ["--backend", d["backend"], "--model", d["model"], "--gpu", d["gpu"], "--tp", str(d["tp"])]
        cells = []
        for _, kind, a, b in SHAPES:
            aic = e.predict_prefill_latency(1, a + b, b) if kind == "prefill" else e.predict_decode_latency(a, b, 2)
            got = mocker(binary, kind, a, b, flags)
            worst = max(worst, abs(got / aic - 1))
            cells.append(f"{aic:.1f} / {got:.1f}")
        print(f"| {p['name']} | " + " | ".join(cells) + " |")
    refs = [("dynamo-polynomial (vllm)", ["--perf", "dynamo-polynomial"]),
            ("qwen3-4b-a100-sglang, measured (sglang)",
             ["--backend", "sglang", "--perf", "profile:" + os.path.join(ROOT, "profiles", "qwen3-4b-a100-sglang.json")])]
    for name, flags in refs:
        cells = [f"- / {mocker(binary, k, a, b, flags):.1f}" for _, k, a, b in SHAPES]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print(f"\nLargest difference between AIC and the mocker: {worst * 100:.2f}%")


if __name__ == "__main__":
    main(sys.argv[1])
