#!/usr/bin/env python3
"""Export step-time profiles from NVIDIA AIConfigurator (AIC) into the
mocker's profile format (profiles/README.md, "Format").

Pinned to aiconfigurator 0.12.0 (PyPI, Apache-2.0). Not run in CI; the
profiles it writes are committed data. Run it from the repository root:

    python3 -m venv /tmp/venv-aic
    /tmp/venv-aic/bin/pip install aiconfigurator==0.12.0
    /tmp/venv-aic/bin/python profiles/derive_from_aic.py            # all
    /tmp/venv-aic/bin/python profiles/derive_from_aic.py qwen3-8b   # one model
    /tmp/venv-aic/bin/python profiles/derive_from_aic.py --list     # AIC's systems
    /tmp/venv-aic/bin/python profiles/derive_from_aic.py \
        --model qwen3-32b --system h100_sxm --backend vllm --tp 4 [--out DIR]

(`cargo xtask profiles build|list` does the same with a pinned venv.)

With `--model --system --backend --tp` it exports exactly that profile into
`--out` (default profiles/aic/) as `MODEL-GPU-tpN-BACKEND.json`, where:

- MODEL is the slug of `--model`: a slug of MODELS as given, a Hugging Face
  id of MODELS its slug, any other Hugging Face id AIC has a config for the
  lowercased name after its `/` (`Qwen/Qwen3-0.6B` -> `qwen3-0.6b`); a slug
  that is no MODELS entry is looked up the same way among AIC's configs;
- GPU is `gpu_slug(system)`: GPUS's slug where it has one, else the system
  name without a trailing `_sxm` or `_server` (SXM and the server edition are
  the defaults) and with `_` removed: `rtx_pro_6000_server` -> `rtxpro6000`,
  `h100_sxm` -> `h100`, `h100_pcie` -> `h100pcie`, `gb200` -> `gb200`.

A model, system or backend AIC lacks, or a TP it refuses, is one line on
stderr and exit status 2. A mixture of experts at TP above 1 shards its
experts as vLLM and SGLang do by default (no expert parallelism): AIC's
`moe_tp_size` = TP, `moe_ep_size` = 1, recorded in `derivation`.

Mixture-of-experts layouts (`--attention-dp D`, `--moe-tp M`, `--moe-ep E`,
or `--expert-parallel`): AIC's `ModelConfig` (`sdk/config.py`,
`resolve_moe_parallelism`) runs attention at `tp_size` within each of
`attention_dp_size` data-parallel ranks and the experts over all
`tp x D` GPUs as `moe_tp x moe_ep` (the two widths must be equal; one of M
and E given, the other follows). `--expert-parallel` is vLLM's
`--enable-expert-parallel` (`FusedMoEParallelConfig.make`: EP over every
TP x DP rank, no expert TP) and SGLang's `--ep-size` = TP x DP with DP
attention: `moe_ep = tp x D`, `moe_tp = 1`. Without E or M the experts are
tensor-parallel over all `tp x D` ranks (vLLM with DP and no EP). The tables
are then one rank's passes at a per-rank batch: AIC's backend times a step
assuming every DP rank carries the same batch (`base_backend.py`:
`global_bs = bs x attention_dp_size`), so `predict_decode_latency(batch,
...)` is a step in which each rank decodes `batch` sequences. Such a file
is `MODEL-GPU-tpN[-dpD][-epE]-BACKEND.json` (`-dpD` when D > 1, `-epE` when
E > 1; M follows from tp x D / E) and its `deployment` records `parallel`
(`tp`, `attention_dp`, `moe_tp`, `moe_ep`), `kv_bytes_per_token_per_rank`
(each attention DP rank holds the KV of its own sequences, heads split
over its TP ranks) and `expert_weight_bytes` (the experts split over all
`moe_tp x moe_ep` ranks, the rest over TP). A dense model has no layout to
export (its DP ranks are independent engines: export `--tp` and run
`--dp-size`), and a layout AIC cannot time is refused naming AIC's reason.

For every (model, GPU, TP, backend) in TARGETS it compiles AIC's engine
(`EngineHandle.compile(model, system, backend, tp_size=tp)`) and tabulates:

- prefill: `predict_prefill_latency(1, cached + new, prefix=cached)` over
  new tokens x cached tokens, both log-spaced up to the model's context;
- decode: `predict_decode_latency(batch, context, osl=2)`, the time of one
  decode step of `batch` sequences at `context` tokens each, over batch
  1..1024 x context 16..131072 per sequence;
- pass_overhead_ms: the fixed cost a mixed pass pays once, estimated from
  `mixed_step_latency` at small shapes (prefill + decode - mixed, median),
  kept between 0 and the smallest table value;
- checks: AIC's raw predictions at a dozen probe shapes, mostly off the
  grid, which the Rust test `aic_profiles` compares the mocker against.

Tables hold AIC's predictions as they are (`"non_decreasing": false`): AIC
is not monotone (its kernel tables pick different tiles as shapes grow, so
a few more tokens may cost less); how often and how deep is recorded in
`derivation`. Lookups past the grid clamp to
its edge (`"beyond_grid": "clamp"`), counted in the run's report.
"""

import argparse
import importlib.metadata
import json
import logging
import os
import statistics
import sys

AIC_VERSION = "0.12.0"

# (slug, Hugging Face id as AIC knows it, tensor parallel size)
MODELS = [
    ("qwen3-8b", "Qwen/Qwen3-8B", 1),
    ("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B", 1),
    ("qwen3-32b", "Qwen/Qwen3-32B", 2),
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", 1),
]
# (slug, AIC system name)
GPUS = [("h100", "h100_sxm"), ("h200", "h200_sxm"), ("b200", "b200_sxm"), ("a100", "a100_sxm")]
BACKENDS = ["vllm", "sglang"]
# Every backend the command line accepts (the default export makes the two above).
ALL_BACKENDS = ["vllm", "sglang", "trtllm"]
# Files in AIC's systems folder that are not systems.
NOT_SYSTEMS = {"attention_lane_defaults", "perf_data_reuse_manifest", "query_versions"}
MAX_TP = 64


class Refused(Exception):
    """What AIC lacks or refuses: printed as one line, exit status 2."""


def gpu_slug(system):
    """The `--gpu` name of an AIC system (the module docstring's rule)."""
    for slug, name in GPUS:
        if name == system:
            return slug
    base = system
    for suffix in ("_sxm", "_server"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base.replace("_", "").replace("-", "").lower()


def model_slug(hf_id):
    """The `--model` name of a Hugging Face id (the module docstring's rule)."""
    for slug, known, _ in MODELS:
        if known == hf_id:
            return slug
    return hf_id.rsplit("/", 1)[-1].lower()


def resolve_model(name, known_ids):
    """(slug, Hugging Face id) of `--model NAME`, given the ids AIC has
    configs for; Refused when AIC has none."""
    for slug, hf_id, _ in MODELS:
        if name in (slug, hf_id):
            return slug, hf_id
    if "/" in name:
        if name in known_ids:
            return model_slug(name), name
    else:
        matches = sorted(i for i in known_ids if model_slug(i) == name.lower())
        if len(matches) == 1:
            return model_slug(matches[0]), matches[0]
    raise Refused(f"--model {name}: AIConfigurator {AIC_VERSION} has no config for it (`--list-models` lists them)")


def layout_of(tp, dp, moe_tp, moe_ep, expert_parallel):
    """The MoE layout `{"tp", "attention_dp", "moe_tp", "moe_ep"}` the flags
    ask for, or None when none was given (TP only: the export as before).
    ValueError names the flag: sizes 1..MAX_TP, tp x dp at most MAX_TP, and
    AIC's width rule tp x dp == moe_tp x moe_ep (`ModelConfig.
    resolve_moe_parallelism`), the missing one of moe_tp and moe_ep
    inferred from it."""
    if dp is None and moe_tp is None and moe_ep is None and not expert_parallel:
        return None
    tp = tp or 1
    dp = 1 if dp is None else dp
    for flag, v in (("--attention-dp", dp), ("--moe-tp", moe_tp), ("--moe-ep", moe_ep)):
        if v is not None and not 1 <= v <= MAX_TP:
            raise ValueError(f"{flag} {v}: must be 1..{MAX_TP}")
    width = tp * dp
    if width > MAX_TP:
        raise ValueError(f"--tp {tp} x --attention-dp {dp} = {width} GPUs: at most {MAX_TP}")
    if expert_parallel:
        if moe_tp not in (None, 1) or moe_ep not in (None, width):
            raise ValueError(f"--expert-parallel sets --moe-ep {width} --moe-tp 1 (tp x attention-dp); drop --moe-tp/--moe-ep")
        moe_tp, moe_ep = 1, width
    elif moe_tp is None and moe_ep is None:
        moe_tp, moe_ep = width, 1
    elif moe_ep is None:
        if width % moe_tp:
            raise ValueError(f"--moe-tp {moe_tp}: does not divide tp x attention-dp = {width}")
        moe_ep = width // moe_tp
    elif moe_tp is None:
        if width % moe_ep:
            raise ValueError(f"--moe-ep {moe_ep}: does not divide tp x attention-dp = {width}")
        moe_tp = width // moe_ep
    if moe_tp * moe_ep != width:
        raise ValueError(
            f"--moe-tp {moe_tp} x --moe-ep {moe_ep} = {moe_tp * moe_ep}, but the experts must span "
            f"tp x attention-dp = {width} GPUs (AIC's ModelConfig width rule)"
        )
    return {"tp": tp, "attention_dp": dp, "moe_tp": moe_tp, "moe_ep": moe_ep}


def layout_suffix(layout):
    """The file-name part after `tpN`: `-dpD` when D > 1, `-epE` when E > 1."""
    if layout is None:
        return ""
    dp = f"-dp{layout['attention_dp']}" if layout["attention_dp"] > 1 else ""
    ep = f"-ep{layout['moe_ep']}" if layout["moe_ep"] > 1 else ""
    return dp + ep


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="derive_from_aic.py",
        description="Export AIConfigurator step-time profiles (see the module docstring).",
    )
    p.add_argument("models", nargs="*", help="without --model: export MODELS x GPUS, only these slugs if given")
    p.add_argument("--list", action="store_true", help="print AIC's systems and the backends each has")
    p.add_argument("--list-models", action="store_true", help="print the models AIC has configs for")
    p.add_argument("--model", help="slug (qwen3-32b) or Hugging Face id (Qwen/Qwen3-32B)")
    p.add_argument("--system", help="AIC system, e.g. h100_sxm, rtx_pro_6000_server, gb200")
    p.add_argument("--backend", choices=ALL_BACKENDS)
    p.add_argument("--tp", type=int, help=f"tensor-parallel size, 1..{MAX_TP}")
    p.add_argument("--attention-dp", type=int, help=f"attention data-parallel ranks of a MoE engine, 1..{MAX_TP} [default: 1]")
    p.add_argument("--moe-tp", type=int, help="MoE expert tensor-parallel size [default: tp x attention-dp / moe-ep]")
    p.add_argument("--moe-ep", type=int, help="MoE expert-parallel size [default: tp x attention-dp / moe-tp, else 1]")
    p.add_argument(
        "--expert-parallel",
        action="store_true",
        help="vLLM's --enable-expert-parallel (SGLang's --ep-size = tp x dp): moe-ep = tp x attention-dp, moe-tp = 1",
    )
    p.add_argument("--out", help="folder to write to [default: profiles/aic beside this script]")
    a = p.parse_args(argv)
    one = [a.model, a.system, a.backend, a.tp]
    if any(v is not None for v in one):
        missing = [f for f, v in zip(["--model", "--system", "--backend", "--tp"], one) if v is None]
        if missing:
            p.error("exporting one profile needs " + ", ".join(missing))
        if a.models:
            p.error(f"model slugs {a.models} and --model together")
        if not 1 <= a.tp <= MAX_TP:
            p.error(f"--tp {a.tp}: must be 1..{MAX_TP}")
    try:
        a.layout = layout_of(a.tp, a.attention_dp, a.moe_tp, a.moe_ep, a.expert_parallel)
    except ValueError as e:
        p.error(str(e))
    if a.layout is not None and a.model is None:
        p.error("--attention-dp, --moe-tp, --moe-ep and --expert-parallel need --model (one profile)")
    if (a.list or a.list_models) and (a.model or a.models):
        p.error("--list and --list-models take no model")
    return a

def log_axis(lo_exp, hi_exp, per_octave):
    """Distinct integers round(2^(k / per_octave)) from 2^lo_exp to 2^hi_exp."""
    return sorted({round(2 ** (k / per_octave)) for k in range(lo_exp * per_octave, hi_exp * per_octave + 1)})


def step_axis(lo_exp, hi_exp):
    """2^k and 1.5 * 2^k from 2^lo_exp to 2^hi_exp, each also plus one: AIC's
    GEMM latencies jump just past multiples of their tile (prefill of 768 ->
    769 tokens: +22% on A100), so the axis holds both sides of every jump
    and interpolation keeps it a jump instead of smearing it over a segment."""
    pts = set()
    for k in range(lo_exp, hi_exp + 1):
        for x in (2**k, 3 * 2 ** (k - 1) if k >= 1 else 1):
            pts |= {x, x + 1}
    return sorted(p for p in pts if 2**lo_exp <= p <= 2**hi_exp)


# Dense enough that bilinear lookups between points stay within 2% of AIC
# at the probe shapes.
DECODE_BATCH = step_axis(0, 10)  # 1..1024
DECODE_CONTEXT = log_axis(4, 17, 2)  # 16..131072 tokens per sequence
# Prefill also at four points an octave: attention grows as new x (new +
# cached), which a coarser axis would overestimate between points.
PREFILL_NEW = sorted(set(step_axis(0, 17)) | set(log_axis(0, 17, 4)))  # cut at the context
PREFILL_CACHED = [0] + sorted(set(log_axis(8, 17, 4)) | {2**k + 1 for k in range(8, 17)})

# Probe shapes: (new, cached) prefills and (batch, context) decodes.
# Cached prefixes are whole 64-token blocks: the SGLang core matches its
# radix cache in 64-token KV-event blocks.
PREFILL_PROBES = [(4096, 0), (4096, 12288), (1000, 0), (700, 1984), (5000, 3072), (20000, 0)]
DECODE_PROBES = [(1, 1000), (64, 8192), (256, 1024), (256, 8192), (100, 3000), (700, 20000)]


def axis_upto(axis, limit):
    """Points of `axis` below `limit`, then `limit` itself."""
    pts = [x for x in axis if x < limit]
    return pts + [limit]


def dips(rows):
    """Cells below a neighbour before them along either axis, and the
    deepest such dip relative to that neighbour: where AIC predicts less
    time for more work (its kernel tables pick different tiles)."""
    count, worst = 0, 0.0
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            floor = max(rows[i - 1][j] if i else 0.0, row[j - 1] if j else 0.0)
            if v < floor:
                count += 1
                worst = max(worst, 1.0 - v / floor)
    return f"{count} cells (deepest {worst * 100:.1f}%)"


def model_facts(hf_id):
    """Layers, KV heads, head dim, context and weight bytes from AIC's copy
    of the model's Hugging Face config (bf16 weights and KV; an `fp8`
    `quantization_config` stores the layers' weights and KV in one byte, as
    AIC's `get_model` infers for DeepSeek-V3). A multi-head latent attention
    model (DeepSeek's `kv_lora_rank`) caches one latent of `kv_lora_rank +
    qk_rope_head_dim` per token and layer, whole on every rank (vLLM's
    `MLAAttention`, SGLang's `MLATokenToKVPool`): `kv_latent` holds it."""
    import aiconfigurator_core

    base = os.path.join(os.path.dirname(aiconfigurator_core.__file__), "model_configs")
    with open(os.path.join(base, hf_id.replace("/", "--") + "_config.json")) as f:
        c = json.load(f)
    return facts_of_config(hf_id, c)


def facts_of_config(hf_id, c):
    """[model_facts] of a parsed Hugging Face config `c`."""
    h, layers = c["hidden_size"], c["num_hidden_layers"]
    heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
    fp8 = (c.get("quantization_config") or {}).get("quant_method") == "fp8"
    wbytes = 1 if fp8 else 2
    latent = c.get("kv_lora_rank")
    if latent:
        rope, nope, v = c["qk_rope_head_dim"], c["qk_nope_head_dim"], c["v_head_dim"]
        q = h * c["q_lora_rank"] + c["q_lora_rank"] * heads * (nope + rope) if c.get("q_lora_rank") else h * heads * (nope + rope)
        attn = q + h * (latent + rope) + latent * heads * (nope + v) + heads * v * h
        d = nope + rope
    else:
        d = c.get("head_dim") or h // heads
        attn = h * heads * d + 2 * h * kv * d + heads * d * h
    experts = c.get("num_experts") or c.get("n_routed_experts") or 0
    dense_layers = c.get("first_k_dense_replace", 0) if experts else layers
    moe_layers = layers - dense_layers
    expert_params = 0
    if experts:
        inter = c["moe_intermediate_size"]
        shared = c.get("n_shared_experts") or 0
        expert_params = moe_layers * experts * 3 * h * inter
        mlp = moe_layers * (shared * 3 * h * inter + h * experts) + dense_layers * 3 * h * c["intermediate_size"]
        active_intermediate = (c["num_experts_per_tok"] + shared) * inter
    else:
        mlp = layers * 3 * h * c["intermediate_size"]
        active_intermediate = c["intermediate_size"]
    embed = c["vocab_size"] * h * (1 if c.get("tie_word_embeddings") else 2)
    layer_params = layers * (attn + 2 * h) + mlp + expert_params
    return {
        "hf_id": hf_id,
        "layers": layers,
        "kv_heads": 1 if latent else kv,
        "head_dim": (latent + c["qk_rope_head_dim"]) if latent else d,
        "kv_dtype_bytes": wbytes,
        "weight_bytes": layer_params * wbytes + (embed + h) * 2,
        "expert_weight_bytes": expert_params * wbytes,
        "max_context": c["max_position_embeddings"],
        "hidden_size": h,
        "active_intermediate_size": active_intermediate,
        "vocab_size": c["vocab_size"],
        "moe": bool(experts),
        "kv_latent": bool(latent),
    }


def kv_bytes_per_token_per_rank(facts, tp):
    """KV bytes of one token on one rank of an attention DP rank of `tp`
    GPUs: K and V of every layer over the KV heads that rank holds (at
    least one: vLLM's `get_num_kv_heads`), or the latent of an MLA model,
    whole on every rank."""
    if facts["kv_latent"]:
        return facts["layers"] * facts["head_dim"] * facts["kv_dtype_bytes"]
    heads = max(1, facts["kv_heads"] // tp)
    return 2 * facts["layers"] * heads * facts["head_dim"] * facts["kv_dtype_bytes"]


def aic_dir(*parts):
    import aiconfigurator_core

    return os.path.join(os.path.dirname(aiconfigurator_core.__file__), *parts)


def aic_model_ids():
    """Hugging Face ids AIC ships a config for."""
    suffix = "_config.json"
    names = os.listdir(aic_dir("model_configs"))
    return sorted(n[: -len(suffix)].replace("--", "/", 1) for n in names if n.endswith(suffix) and "--" in n)


def aic_systems():
    """{system: sorted backends with perf data} of AIC's systems folder."""
    out = {}
    for f in sorted(os.listdir(aic_dir("systems"))):
        name, ext = os.path.splitext(f)
        if ext != ".yaml" or name in NOT_SYSTEMS:
            continue
        data = aic_dir("systems", "data", name)
        have = set()
        if os.path.isdir(data):
            for op in os.listdir(data):
                sub = os.path.join(data, op)
                if os.path.isdir(sub):
                    have |= {b for b in os.listdir(sub) if b in ALL_BACKENDS}
        out[name] = sorted(have)
    return out


def gpu_memory(system):
    import yaml

    path = aic_dir("systems", system + ".yaml")
    with open(path) as f:
        return int(yaml.safe_load(f)["gpu"]["mem_capacity"])


def backend_version(system, backend):
    from aiconfigurator_core.sdk import perf_database

    return str(perf_database.resolve_query_version(system, backend, "current"))


def export(slug, hf_id, tp, gpu, system, backend, layout=None):
    from aiconfigurator_core.sdk.engine import EngineHandle

    facts = model_facts(hf_id)
    moe = facts.pop("moe")
    extra, moe_note = {}, ""
    if layout is not None:
        if not moe:
            raise Refused(
                f"--model {slug}: a dense model has no MoE layout to export (its DP ranks are "
                f"independent engines: export --tp {tp} and run --dp-size)"
            )
        extra = {
            "attention_dp_size": layout["attention_dp"],
            "moe_tp_size": layout["moe_tp"],
            "moe_ep_size": layout["moe_ep"],
        }
        moe_note = (
            f"; MoE layout: attention_dp_size={layout['attention_dp']}, moe_tp_size={layout['moe_tp']}, "
            f"moe_ep_size={layout['moe_ep']}; tables are one rank's passes with every DP rank at the same batch "
            f"(AIC's global_bs = bs x attention_dp_size)"
        )
    elif moe and tp > 1:
        # Experts sharded over the TP ranks, no expert parallelism: vLLM's
        # default without --enable-expert-parallel (FusedMoE's tp_size), and
        # SGLang's with ep_size 1.
        extra = {"moe_tp_size": tp, "moe_ep_size": 1}
        moe_note = f"; MoE experts: moe_tp_size={tp}, moe_ep_size=1 (tensor-parallel experts, no expert parallelism)"
    e = EngineHandle.compile(hf_id, system, backend, tp_size=tp, **extra)
    ctx = facts["max_context"]
    new_axis = axis_upto(PREFILL_NEW, ctx)
    cached_axis = axis_upto(PREFILL_CACHED, ctx)

    def prefill(n, c):
        return e.predict_prefill_latency(1, c + n, c)

    def decode(b, l):
        return e.predict_decode_latency(b, l, 2)

    pre = [[prefill(n, c) for c in cached_axis] for n in new_axis]
    dec = [[decode(b, l) for l in DECODE_CONTEXT] for b in DECODE_BATCH]
    gaps = [
        prefill(n, 0) + decode(b, 1024) - e.mixed_step_latency(n, b, 1024, 2, 0)
        for n in (1, 128, 512)
        for b in (1, 8)
    ]
    overhead = min(max(0.0, statistics.median(gaps)), min(map(min, pre)), min(map(min, dec)))
    version = backend_version(system, backend)
    name = f"{slug}-{gpu}-tp{tp}{layout_suffix(layout)}-{backend}"
    r3 = lambda v: round(v, 4)
    shown = "".join(f", {k}={v}" for k, v in extra.items()) if layout is not None else ""
    what = f"TP {tp}" if layout is None else f"TP {tp} x attention DP {layout['attention_dp']}, MoE TP {layout['moe_tp']} x EP {layout['moe_ep']}"
    return name, {
        "name": name,
        "description": f"{hf_id}, {what}, on {system} under {backend} {version}, as AIConfigurator predicts it",
        "source": f"AIConfigurator {AIC_VERSION} (PyPI aiconfigurator, Apache-2.0, NVIDIA), "
        f"EngineHandle.compile({hf_id!r}, {system!r}, {backend!r}, tp_size={tp}{shown}), "
        f"perf database {system}/{backend}/{version}; exported by profiles/derive_from_aic.py",
        "license": "Apache-2.0 (derived from AIConfigurator's perf database)",
        "derivation": "prefill: predict_prefill_latency(1, cached + new, prefix=cached); "
        "decode: predict_decode_latency(batch, context, osl=2) per step; "
        f"tables as AIC predicts them, not forced non-decreasing: AIC is below an earlier point in prefill {dips(pre)}, decode {dips(dec)}; "
        f"pass_overhead_ms: median of prefill + decode - mixed_step_latency at small shapes{moe_note}",
        "deployment": {
            "backend": backend,
            "backend_version": version,
            "gpu": gpu,
            "gpu_memory_bytes": gpu_memory(system),
            "tp": tp,
            "model": slug,
            "hf_id": hf_id,
            "layers": facts["layers"],
            "kv_heads": facts["kv_heads"],
            "head_dim": facts["head_dim"],
            "kv_dtype_bytes": facts["kv_dtype_bytes"],
            "weight_bytes": facts["weight_bytes"],
            "max_context": ctx,
            "hidden_size": facts["hidden_size"],
            "active_intermediate_size": facts["active_intermediate_size"],
            "vocab_size": facts["vocab_size"],
            **layout_facts(facts, tp, layout),
        },
        "beyond_grid": "clamp",
        "non_decreasing": False,
        "pass_overhead_ms": r3(overhead),
        "prefill": {
            "new_tokens": new_axis,
            "cached_tokens": cached_axis,
            "ms": [[r3(v) for v in row] for row in pre],
        },
        "decode": {
            "batch": DECODE_BATCH,
            "context_per_sequence": DECODE_CONTEXT,
            "ms": [[r3(v) for v in row] for row in dec],
        },
        "checks": {
            "prefill": [[n, c, r3(prefill(n, c))] for n, c in PREFILL_PROBES],
            "decode": [[b, l, r3(decode(b, l))] for b, l in DECODE_PROBES],
        },
    }


def layout_facts(facts, tp, layout):
    """What a deployment adds for a MoE layout or an MLA model: `parallel`,
    `kv_bytes_per_token_per_rank` and `expert_weight_bytes`; nothing for
    any other export (its file stays as it was)."""
    if layout is None and not facts["kv_latent"]:
        return {}
    out = {}
    if layout is not None:
        out["parallel"] = dict(layout)
    out["kv_bytes_per_token_per_rank"] = kv_bytes_per_token_per_rank(facts, tp)
    out["expert_weight_bytes"] = facts["expert_weight_bytes"]
    return out


def dump(value, indent=0):
    """JSON with every list of numbers on one line (small, diffable)."""
    pad = " " * (indent + 1)
    if isinstance(value, dict):
        items = [f"{pad}{json.dumps(k)}: {dump(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    if isinstance(value, list) and any(isinstance(v, (list, dict)) for v in value):
        items = [pad + dump(v, indent + 1) for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"
    return json.dumps(value)


def write(out_dir, name, prof):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, name + ".json")
    with open(path, "w") as f:
        f.write(dump(prof) + "\n")
    return path


def export_one(a):
    """`--model --system --backend --tp`: that profile, or Refused."""
    slug, hf_id = resolve_model(a.model, aic_model_ids())
    systems = aic_systems()
    if a.system not in systems:
        raise Refused(f"--system {a.system}: AIConfigurator {AIC_VERSION} has no such system (`--list` lists them)")
    if a.backend not in systems[a.system]:
        have = ", ".join(systems[a.system]) or "none"
        raise Refused(f"--system {a.system} --backend {a.backend}: AIConfigurator has no {a.backend} data for it (it has: {have})")
    gpu = gpu_slug(a.system)
    try:
        name, prof = export(slug, hf_id, a.tp, gpu, a.system, a.backend, getattr(a, "layout", None))
    except Refused:
        raise
    except Exception as ex:  # AIC refuses the combination (a TP, a missing table)
        first = (str(ex).strip().splitlines() or [type(ex).__name__])[0]
        raise Refused(f"--model {slug} --system {a.system} --backend {a.backend} --tp {a.tp}{layout_flags(a)}: AIConfigurator refuses it: {first}")
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "aic")
    path = write(out, name, prof)
    print(path)
    print(f"use: --profiles-dir {out} --model {slug} --gpu {gpu} --tp {a.tp}{select_flags(a)} --backend {a.backend}", file=sys.stderr)


def layout_flags(a):
    """The layout flags of a refused export, as given back to the user."""
    lay = getattr(a, "layout", None)
    if lay is None:
        return ""
    return f" --attention-dp {lay['attention_dp']} --moe-tp {lay['moe_tp']} --moe-ep {lay['moe_ep']}"


def select_flags(a):
    """The mocker's flags that select an exported layout: `--dp-size D`, and
    `--enable-expert-parallel` when the experts are spread over every rank."""
    lay = getattr(a, "layout", None)
    if lay is None:
        return ""
    dp = f" --dp-size {lay['attention_dp']}" if lay["attention_dp"] > 1 else ""
    width = lay["tp"] * lay["attention_dp"]
    ep = " --enable-expert-parallel" if lay["moe_ep"] == width and width > 1 else ""
    return dp + ep


def export_all(slugs, out):
    missing = []
    for slug, hf_id, tp in MODELS:
        if slugs and slug not in slugs:
            continue
        for gpu, system in GPUS:
            for backend in BACKENDS:
                try:
                    name, prof = export(slug, hf_id, tp, gpu, system, backend)
                except Exception as ex:  # AIC lacks the combination
                    missing.append(f"{slug} {gpu} tp{tp} {backend}: {ex}")
                    print("missing:", missing[-1], file=sys.stderr)
                    continue
                write(out, name, prof)
                print(name, file=sys.stderr)
    for m in missing:
        print("AIC lacks", m)


def main(argv):
    a = parse_args(argv)
    try:
        got = importlib.metadata.version("aiconfigurator")
    except importlib.metadata.PackageNotFoundError:
        got = None
    if got != AIC_VERSION:
        print(f"aiconfigurator {got or 'is not'} installed; this script is pinned to {AIC_VERSION}", file=sys.stderr)
        return 2
    logging.disable(logging.WARNING)
    try:
        if a.list:
            for system, backends in aic_systems().items():
                print(f"{system}\t--gpu {gpu_slug(system)}\t{', '.join(backends) or 'no perf data'}")
            return 0
        if a.list_models:
            for hf_id in aic_model_ids():
                print(f"{model_slug(hf_id)}\t{hf_id}")
            return 0
        if a.model is not None:
            export_one(a)
            return 0
    except Refused as r:
        print(r, file=sys.stderr)
        return 2
    export_all(a.models, a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "aic"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
