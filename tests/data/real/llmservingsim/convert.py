#!/usr/bin/env python3
"""Converts one LLMServingSim bench bundle (github.com/casys-kaist/LLMServingSim,
MIT, see LICENSE) into the mocker's plain per-request JSONL (docs/accuracy.md,
"Plain format"). Standard library only; not run in CI (its output is committed).

    python3 convert.py REQUESTS_JSONL WORKLOAD_JSONL OUT_JSONL

REQUESTS_JSONL is the bundle's `vllm/requests.jsonl` (one line per request:
vLLM's own per-request stats, `queued_ts`, `scheduled_ts`, `first_token_ts`,
`last_token_ts`, engine-side monotonic seconds); WORKLOAD_JSONL is the
workload it replayed (`workloads/sharegpt-*.jsonl`: each request's prompt
token ids). Request `bench-N` is workload line N; the prompt lengths must
agree. Written per request: the engine's queue time as `arrival` and
`queued`, `scheduled`, `first_token`, `last_token`, the token counts, and
`hash_ids`: the prompt cut into 16-token blocks (vLLM's default block size;
the last block may be partial), each numbered by its whole prefix, so two
prompts share the ids of the blocks their token prefixes share.
"""
import json
import sys


def main(requests_path, workload_path, out_path):
    with open(workload_path) as f:
        workload = [json.loads(line) for line in f]
    ids = {}
    with open(requests_path) as f, open(out_path, "w") as out:
        for line in f:
            r = json.loads(line)
            w = workload[int(r["request_id"].split("-")[1])]
            tokens = w["input_tok_ids"]
            if len(tokens) != r["input_toks"]:
                sys.exit(f"{r['request_id']}: {len(tokens)} prompt tokens in the workload, {r['input_toks']} in the run")
            hashes, prev = [], None
            for i in range(0, len(tokens), 16):
                key = (prev, tuple(tokens[i : i + 16]))
                prev = ids.setdefault(key, len(ids))
                hashes.append(prev)
            out.write(json.dumps({
                "id": r["request_id"],
                "arrival": r["queued_ts"],
                "input_tokens": r["input_toks"],
                "output_tokens": r["output_toks"],
                "queued": r["queued_ts"],
                "scheduled": r["scheduled_ts"],
                "first_token": r["first_token_ts"],
                "last_token": r["last_token_ts"],
                "hash_ids": hashes,
            }) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
