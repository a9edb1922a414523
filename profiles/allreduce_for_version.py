#!/usr/bin/env python3
"""The all-reduce terms of a profile for an engine version other than the
one its tables were exported at, from AIConfigurator's own measurements.

Pinned to aiconfigurator 0.12.0 (PyPI, Apache-2.0); not run in CI. AIC's
perf database keeps, per system and engine, the engine's custom all-reduce
timed on that system at several engine versions
(`systems/data/SYSTEM/comm/BACKEND/VERSION/custom_allreduce_perf.parquet`),
but exports kernels at one version only (`current`). A real engine of
another version pays its own all-reduce: this script fits the difference
between the two versions' measurements, per all-reduce, as
`allreduce_us + MiB x allreduce_us_per_mib` (least squares over messages of
0.125 to 32 MiB, the sizes of a pass's hidden states at TP > 1) and prints
the two `--overhead` flags (docs/step-time-terms.md) that add it:

    /tmp/venv-aic/bin/python profiles/allreduce_for_version.py \\
        --system rtx_pro_6000_server --backend vllm --tp 2 --engine-version 0.19.0

Message sizes in AIC's tables are bf16 elements (2 bytes each): AIC's own
decode prediction of Qwen3-32B at TP 2 and batch 128 charges 36.6 us per
all-reduce of 128 x 5120 elements, the table's value at 655,360.
"""

import argparse
import glob
import importlib.metadata
import logging
import os
import sys

AIC_VERSION = "0.12.0"
KERNEL = {"vllm": "vLLM_custom_graph", "sglang": "SGLang_custom_graph"}
MIB_RANGE = (0.125, 32.0)


def table(system, backend, version, tp):
    import aiconfigurator_core
    import pandas as pd

    base = os.path.join(os.path.dirname(aiconfigurator_core.__file__), "systems", "data", system, "comm", backend)
    path = os.path.join(base, version, "custom_allreduce_perf.parquet")
    if not os.path.exists(path):
        have = sorted(os.path.basename(p) for p in glob.glob(os.path.join(base, "*")))
        sys.exit(f"{system}/{backend}: no all-reduce measurement at {version}; AIC has {have or 'none'}")
    d = pd.read_parquet(path)
    kernels = sorted(d.kernel_source.unique())
    want = KERNEL.get(backend)
    kernel = want if want in kernels else kernels[0]
    d = d[(d.num_gpus == tp) & (d.kernel_source == kernel)]
    if d.empty:
        sys.exit(f"{system}/{backend}/{version}: no all-reduce over {tp} GPUs")
    return {int(m): float(l) * 1000.0 for m, l in zip(d.message_size, d.latency)}, kernel


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--system", required=True)
    p.add_argument("--backend", required=True, choices=sorted(KERNEL))
    p.add_argument("--tp", type=int, required=True)
    p.add_argument("--engine-version", required=True, help="the real engine's version, e.g. 0.19.0")
    a = p.parse_args(argv)
    if importlib.metadata.version("aiconfigurator") != AIC_VERSION:
        sys.exit(f"this script is pinned to aiconfigurator {AIC_VERSION}")
    logging.disable(logging.WARNING)
    from aiconfigurator_core.sdk import perf_database
    import numpy as np

    current = str(perf_database.resolve_query_version(a.system, a.backend, "current"))
    real, kernel = table(a.system, a.backend, a.engine_version, a.tp)
    tables, _ = table(a.system, a.backend, current, a.tp)
    sizes = sorted(m for m in real if m in tables and MIB_RANGE[0] <= m * 2 / 2**20 <= MIB_RANGE[1])
    if len(sizes) < 2:
        sys.exit("too few common message sizes to fit")
    x = np.array([m * 2 / 2**20 for m in sizes])
    y = np.array([real[m] - tables[m] for m in sizes])
    (us, per_mib), *_ = np.linalg.lstsq(np.vstack([np.ones_like(x), x]).T, y, rcond=None)
    us, per_mib = max(0.0, us), max(0.0, per_mib)
    print(f"# {a.system} {a.backend} TP {a.tp}: {kernel} at {a.engine_version} minus at {current} "
          f"(the tables' version), {len(sizes)} message sizes of {MIB_RANGE[0]}..{MIB_RANGE[1]} MiB")
    for m in sizes:
        print(f"#   {m * 2 / 2**20:8.3f} MiB: {real[m]:9.1f} us - {tables[m]:9.1f} us = {real[m] - tables[m]:9.1f} us;"
              f" fit {us + per_mib * m * 2 / 2**20:9.1f}")
    print(f"--overhead allreduce_us={us:.1f} --overhead allreduce_us_per_mib={per_mib:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
