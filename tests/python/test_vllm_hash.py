"""`serve --tokenizer FILE --block-hash vllm` against a subscriber that hashes
prompts the way vLLM does (run by tests/python/run.sh).

The subscriber tokenises each prompt with the same tokenizer.json through
Hugging Face `tokenizers`, chains vLLM's `sha256_cbor` block hash over the
ids (vllm/v1/core/kv_cache_utils.py `hash_block_tokens`, `init_none_hash`
with PYTHONHASHSEED; vllm/utils/hashing.py `sha256_cbor`: cbor2 canonical
dumps, then SHA-256) and reads the wire's 64-bit ints as
`maybe_convert_block_hash` makes them, then finds every full block of the
prompt in what the ZMQ stream published. Prints "N passed, N failed".
"""

import hashlib
import json
import os
import sys
import tempfile
import time

import cbor2
from tokenizers import Tokenizer

from harness import MODEL, Checks, Server
from test_serve import BLOCK, BlockStored, Subscriber
from wordlevel import WORDS, tokenizer_json

SEED = "42"


def sha256_cbor(obj) -> bytes:
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def vllm_block_hashes(ids: list[int], seed: str) -> list[int]:
    """vLLM's chain over the full blocks of ids, as the wire's ints."""
    parent = sha256_cbor(seed)  # NONE_HASH with PYTHONHASHSEED=seed
    out = []
    for i in range(len(ids) // BLOCK):
        parent = sha256_cbor((parent, tuple(ids[i * BLOCK:(i + 1) * BLOCK]), None))
        out.append(int.from_bytes(parent, "big") & ((1 << 64) - 1))
    return out


def stored_blocks(sub: Subscriber) -> dict[int, list[int]]:
    """Every block hash the stream stored, with its token ids."""
    out = {}
    for batches in sub.batches.values():
        for _, b in batches:
            for e in b.events:
                if isinstance(e, BlockStored):
                    for k, h in enumerate(e.block_hashes):
                        out[h] = e.token_ids[k * BLOCK:(k + 1) * BLOCK]
    return out


def test_router_side_hashes_find_the_published_blocks() -> None:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "tokenizer.json")
        with open(path, "w") as f:
            json.dump(tokenizer_json(), f)
        tok = Tokenizer.from_file(path)
        s = Server("--tokenizer", path, "--block-hash", "vllm", "--block-hash-seed", SEED)
        sub = Subscriber(s)
        try:
            shared = " ".join(WORDS[(i * 7) % 400] for i in range(40))
            prompts = [f"{shared} w{300 + q} w{301 + q}" for q in range(3)]
            for p in prompts:
                status, body = s.post("/v1/completions", json.dumps(
                    {"model": MODEL, "prompt": p, "max_tokens": 20, "ignore_eos": True}).encode())
                assert status == 200, body
                assert json.loads(body)["usage"]["prompt_tokens"] == len(tok.encode(p).ids)
            messages = [{"role": "user", "content": shared}]
            status, body = s.post("/v1/chat/completions", json.dumps(
                {"model": MODEL, "messages": messages, "max_tokens": 5}).encode())
            assert status == 200, body
            s.wait_drained()
            time.sleep(0.3)  # the last batches reach the subscriber
        finally:
            sub.close()
            s.stop()
        stored = stored_blocks(sub)
        for p in prompts:
            ids = tok.encode(p).ids  # add_special_tokens=True, as vLLM's completions
            assert ids[0] == 1, "the BOS the post-processor adds"
            hashes = vllm_block_hashes(ids, SEED)
            assert len(hashes) == len(ids) // BLOCK >= 2
            for i, h in enumerate(hashes):
                assert h in stored, f"block {i} of {p[:30]!r}: {h} was not published"
                assert stored[h] == ids[i * BLOCK:(i + 1) * BLOCK], f"block {i}'s token ids"
        # The shared prefix's blocks have one identity across the prompts.
        assert vllm_block_hashes(tok.encode(prompts[0]).ids, SEED)[:2] == \
            vllm_block_hashes(tok.encode(prompts[2]).ids, SEED)[:2]
        # Chat: the built-in template, encoded without special tokens.
        chat = f"<|user|>\n{shared}\n<|assistant|>\n"
        ids = tok.encode(chat, add_special_tokens=False).ids
        for h in vllm_block_hashes(ids, SEED):
            assert h in stored, "a chat prompt block was not published"
        # Another seed is another chain: nothing matches.
        assert not set(vllm_block_hashes(tok.encode(prompts[0]).ids, "0")) & set(stored)


def main() -> int:
    checks = Checks()
    checks.run("router-side vLLM hashes find the published blocks",
               test_router_side_hashes_find_the_published_blocks)
    return checks.report()


if __name__ == "__main__":
    sys.exit(main())
