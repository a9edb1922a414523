"""A small Hugging Face tokenizer.json for the tests that run `serve
--tokenizer`: 400 words `w0`..`w399` (test_vllm_hash.py, test_routers.py)."""

WORDS = [f"w{i}" for i in range(400)]


def tokenizer_json() -> dict:
    """A WordLevel model behind the regex Whitespace pre-tokenizer, with a
    BOS the post-processor adds (so completions and chat differ in it)."""
    vocab = {"[UNK]": 0, "[BOS]": 1}
    for w in WORDS:
        vocab[w] = len(vocab)
    special = lambda i, c: {  # noqa: E731
        "id": i, "content": c, "single_word": False, "lstrip": False,
        "rstrip": False, "normalized": False, "special": True,
    }
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [special(0, "[UNK]"), special(1, "[BOS]")],
        "normalizer": None,
        "pre_tokenizer": {"type": "Whitespace"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[BOS]", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"[BOS]": {"id": "[BOS]", "ids": [1], "tokens": ["[BOS]"]}},
        },
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"},
    }
