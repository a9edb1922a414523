#!/usr/bin/env python3
"""Derives profiles/qwen3-4b-a100-sglang.json from public measurements.

Input: `benchmark_data_Qwen_Qwen3-4B_TP_1_PP_1.json` of the repository
vikranth22446/llm_execution_time_predictor (MIT), commit
2eb65e776001b94dec7ac6b688e15bf009439377: SGLang one-batch forward-pass
latencies of Qwen/Qwen3-4B (TP 1) on an NVIDIA A100-SXM4-80GB, for batch
sizes 1..64 and input lengths 1..16384, three runs each (32 output tokens).

    python3 profiles/derive_qwen3_4b_a100_sglang.py INPUT.json > profiles/qwen3-4b-a100-sglang.json

What is measured and what is derived (see profiles/README.md):
- prefill (new tokens, cached prefix 0): the batch-1 prefill latencies
  (median of the three runs), as a running maximum (below ~128 tokens the
  pass is launch-bound and the runs differ by noise);
- the cached-prefix columns: measured batch-1 cost plus a * new * prefix,
  where a (ms per new token per attended token) is fitted by least squares
  to the same-total-token measurements (b x L with b * L fixed cost more as
  L grows only through attention, whose work is b * L^2 / 2);
- new tokens past 16384: a linear part per token (the slope of the
  shortest-context measurements of the largest batches) plus the fitted
  attention term a * n^2 / 2;
- decode (batch, total context tokens): the median decode step latency of
  batch b at L + 16 tokens each (the median of 32 decode steps sits half
  way through them), interpolated in each batch row onto the shared context
  axis, linearly extrapolated past the row's last measurement (KV reads are
  linear in context), kept non-decreasing;
- both tables: the last row and column raised as little as keeps
  extrapolation past them non-decreasing (`edge_monotone`);
- pass_overhead_ms: the cheapest measured decode step, the per-pass fixed
  cost a mixed pass pays once.
"""
import json
import math
import statistics
import sys


def med(r, key):
    runs = r.get("runs_data") or [r]
    return statistics.median(x[key] for x in runs) * 1e3


def interp(xs, ys, x):
    if x <= xs[0]:
        return ys[0]
    for i in range(len(xs) - 1):
        if x <= xs[i + 1]:
            t = (x - xs[i]) / (xs[i + 1] - xs[i])
            return ys[i] + t * (ys[i + 1] - ys[i])
    t = (x - xs[-2]) / (xs[-1] - xs[-2])
    return ys[-2] + t * (ys[-1] - ys[-2])


def cummax(v):
    out, m = [], float("-inf")
    for x in v:
        m = max(m, x)
        out.append(m)
    return out


def up(x):
    """x rounded up to the file's 0.001 ms."""
    return math.ceil(x * 1000 - 1e-6) / 1000


def edge_monotone(t):
    """Raises the last column and row as little as keeps extrapolation past
    them non-decreasing: along the last column, the step between two rows
    may not be smaller than in the column before (and likewise for the last
    row). The handoff-core loader refuses a table that breaks this."""
    nx, ny = len(t), len(t[0])
    for _ in range(nx + ny):
        changed = False
        for i in range(1, nx):
            want = t[i - 1][ny - 1] + (t[i][ny - 2] - t[i - 1][ny - 2])
            if ny > 1 and t[i][ny - 1] < want - 1e-9:
                t[i][ny - 1], changed = up(want), True
        for j in range(1, ny):
            want = t[nx - 1][j - 1] + (t[nx - 2][j] - t[nx - 2][j - 1])
            if nx > 1 and t[nx - 1][j] < want - 1e-9:
                t[nx - 1][j], changed = up(want), True
        if not changed:
            return
    raise SystemExit("edge_monotone did not settle")


def main(path):
    data = json.load(open(path))
    meta = data["metadata"]
    rows = {(r["batch_size"], r["input_len"]): r for r in data["results"]}
    pre = {k: med(r, "prefill_latency") for k, r in rows.items()}
    dec = {k: med(r, "median_decode_latency") for k, r in rows.items()}

    # Attention coefficient: for each total N >= 2048 the shortest-context
    # split is the baseline; longer contexts cost a * N * (L - L0) / 2 more.
    num = den = 0.0
    by_total = {}
    for (b, l), t in pre.items():
        by_total.setdefault(b * l, []).append((l, t))
    for n, pts in by_total.items():
        if n < 2048 or len(pts) < 2:
            continue
        pts.sort()
        l0, t0 = pts[0]
        for l, t in pts[1:]:
            x = n * (l - l0) / 2.0
            num += x * (t - t0)
            den += x * x
    a = num / den
    # Linear per-token cost at negligible attention: batch 64 and 32 at L=256/512.
    lin = (pre[(64, 512)] - pre[(64, 256)]) / (64 * 256)

    b1 = sorted(l for (b, l) in pre if b == 1)
    measured = cummax([pre[(1, l)] for l in b1])
    new_axis = [1, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072]
    base = []
    for n in new_axis:
        if n <= b1[-1]:
            base.append(interp(b1, measured, n))
        else:
            last = b1[-1]
            base.append(measured[-1] + lin * (n - last) + a * (n * n - last * last) / 2.0)
    prefix_axis = [0, 4096, 16384, 65536, 262144]
    prefill_ms = [[round(t0 + a * n * c, 3) for c in prefix_axis] for n, t0 in zip(new_axis, base)]

    batches = sorted({b for (b, _) in dec})
    ctx_axis = [1024, 4096, 16384, 65536, 262144, 1048576]
    decode_ms = []
    for b in batches:
        ls = sorted(l for (bb, l) in dec if bb == b)
        xs = [b * (l + 16) for l in ls]
        ys = cummax([dec[(b, l)] for l in ls])
        decode_ms.append([interp(xs, ys, c) for c in ctx_axis])
    # Keep each context column non-decreasing in batch.
    for j in range(len(ctx_axis)):
        col = cummax([row[j] for row in decode_ms])
        for i, v in enumerate(col):
            decode_ms[i][j] = round(v, 3)
    edge_monotone(prefill_ms)
    edge_monotone(decode_ms)
    overhead = round(min(dec.values()), 3)

    out = {
        "name": "qwen3-4b-a100-sglang",
        "description": "Qwen/Qwen3-4B, TP 1, on one NVIDIA A100-SXM4-80GB under SGLang",
        "source": "vikranth22446/llm_execution_time_predictor (MIT), "
        "benchmark_data_Qwen_Qwen3-4B_TP_1_PP_1.json at commit "
        "2eb65e776001b94dec7ac6b688e15bf009439377 (%s, %s, %d runs per point); "
        "derived by profiles/derive_qwen3_4b_a100_sglang.py"
        % (meta["model_path"], meta["gpu_type"], meta["num_runs"]),
        "derivation": "prefill: measured batch-1 latency (median of runs, running maximum) "
        "plus %.4g ms per new token per cached-prefix token (least-squares attention fit); "
        "new tokens past 16384 extrapolated as %.4g ms/token + attention; decode: median step "
        "latency of batch b at L+16 tokens each, per batch row interpolated onto total context "
        "tokens and linearly extrapolated past the measured range" % (a, lin),
        "pass_overhead_ms": overhead,
        "prefill": {
            "new_tokens": new_axis,
            "cached_tokens": prefix_axis,
            "ms": prefill_ms,
        },
        "decode": {
            "batch": batches,
            "context_tokens": ctx_axis,
            "ms": decode_ms,
        },
    }
    json.dump(out, sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
