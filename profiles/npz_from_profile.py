#!/usr/bin/env python3
"""Writes a handoff-mocker profile (JSON) as a Dynamo profiler .npz.

    python3 profiles/npz_from_profile.py profiles/qwen3-4b-a100-sglang.json \
        profiles/qwen3-4b-a100-sglang-dynamo.npz

Standard library only (zipfile, struct): np.savez's layout, one stored
.npy (float64, C order) per array. The grids follow Dynamo's converter
(convert_profile_results_to_npz): prefill TTFT by new tokens (the profile's
column with no cached prefix, on its own new-token axis); decode ITL on
active KV tokens x context length, at batch max(1, active / context).
Lookups in the JSON tables are handoff_perf::profile's (bilinear, clamped
below an axis, extrapolated past it).

Dynamo's format has no cached-prefix axis, so the profile's attention over
a cached prefix (its cached_tokens columns) is dropped: on long chunked
prompts the .npz times prefill far shorter than the JSON (profiles/README.md,
"The 4B pair on long prompts").
"""

import json
import struct
import sys
import zipfile


def segment(axis, v):
    if len(axis) == 1 or v <= axis[0]:
        return 0, 0.0
    i = 0
    while i + 2 < len(axis) and v >= axis[i + 1]:
        i += 1
    return i, (v - axis[i]) / (axis[i + 1] - axis[i])


def at(table, xs_key, ys_key, x, y):
    xs, ys, ms = table[xs_key], table[ys_key], table["ms"]
    i, tx = segment(xs, x)
    j, ty = segment(ys, y)
    i1, j1 = min(i + 1, len(xs) - 1), min(j + 1, len(ys) - 1)
    lo = ms[i][j] + tx * (ms[i1][j] - ms[i][j])
    hi = ms[i][j1] + tx * (ms[i1][j1] - ms[i][j1])
    return lo + ty * (hi - lo)


def npy(values, shape):
    header = "{'descr': '<f8', 'fortran_order': False, 'shape': %s, }" % shape
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    body = b"".join(struct.pack("<d", float(v)) for v in values)
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + body


def main(src, dst):
    p = json.load(open(src))
    pre, dec = p["prefill"], p["decode"]
    isl = [float(t) for t in pre["new_tokens"]]
    ttft = [at(pre, "new_tokens", "cached_tokens", t, 0.0) for t in isl]
    kv = [float(k) for k in [0] + dec["context_tokens"]]
    ctx = [16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0]
    itl = []
    for k in kv:
        for c in ctx:
            itl.append(at(dec, "batch", "context_tokens", max(1.0, k / c), k))
    with zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as z:
        z.writestr("prefill_isl.npy", npy(isl, "(%d,)" % len(isl)))
        z.writestr("prefill_ttft_ms.npy", npy(ttft, "(%d,)" % len(ttft)))
        z.writestr("decode_active_kv_tokens.npy", npy(kv, "(%d,)" % len(kv)))
        z.writestr("decode_context_length.npy", npy(ctx, "(%d,)" % len(ctx)))
        z.writestr("decode_itl.npy", npy(itl, "(%d, %d)" % (len(kv), len(ctx))))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
