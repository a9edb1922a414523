"""Offline validation of the Kubernetes manifests under deploy/k8s/.

Every document is checked against the Kubernetes JSON schemas that the
kubernetes-validate package ships (strict: unknown fields are errors), at
each version of K8S_VERSIONS, except InferencePool, which is checked against
inferencepool-v1.schema.json and the CRD's two CEL rules. Then what no schema
sees: label and annotation syntax, Deployment selectors against their pod
templates, Service and InferencePool selectors and ports against the pods
they reach, probe ports, $(VAR) references, the engine pods' labels against
their `serve` flags (what the gateways read must say what the engine is),
the routers' selectors, and the sweep Job's shard count against its merge.

    validate.py DIR            validate every *.yaml under DIR
    validate.py --self-test DIR
        validate DIR (it must pass), then broken copies of it, each of
        which must be rejected with the error expected of it

Exit status 0 when everything holds; the last line counts files or cases as
`N passed, N failed`.
"""

import copy
import json
import os
import pathlib
import re
import sys

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, ValidationError

HERE = pathlib.Path(__file__).resolve().parent
# The oldest release whose Job has backoffLimitPerIndex on by default (beta
# in 1.29), and the newest that kubernetes-validate 1.37.0 ships.
K8S_VERSIONS = ["1.29.0", "1.37.0"]
NAMESPACE = "handoff-mocker"
POOL_SCHEMA = json.loads((HERE / "inferencepool-v1.schema.json").read_text())
SCALED_OBJECT_SCHEMA = json.loads((HERE / "scaledobject-v1alpha1.schema.json").read_text())
# The engine's series an autoscaler may read (crates/serve/src/metrics/mod.rs):
# the gauges and counters under vLLM's and SGLang's own names.
ENGINE_METRICS = {
    "vllm": {"num_requests_running", "num_requests_waiting", "kv_cache_usage_perc",
             "prefix_cache_queries_total", "prefix_cache_hits_total", "num_preemptions_total",
             "request_success_total"},
    "sglang": {"num_running_reqs", "num_queue_reqs", "token_usage", "cache_hit_rate",
               "num_requests_total"},
}
# `serve --grace-period-s` when not given (crates/serve/src/pod/mod.rs, DEFAULT_GRACE_S),
# and a pod's terminationGracePeriodSeconds when not given (Kubernetes' default).
DEFAULT_ENGINE_GRACE_S = 30
DEFAULT_POD_GRACE_S = 30


def crd_schema(path):
    """The v1 openAPIV3Schema of an InferencePool CRD file (INFERENCEPOOL_CRD), if given."""
    if not path:
        return None
    crd = yaml.safe_load(pathlib.Path(path).read_text())
    return next(v["schema"]["openAPIV3Schema"] for v in crd["spec"]["versions"] if v["name"] == "v1")


CRD_SCHEMA = crd_schema(os.environ.get("INFERENCEPOOL_CRD"))

# `serve` flags the manifests may use: issue 40's one-engine-per-process
# contract, and today's serve flags they use. Once the binary knows
# `--engine`, run.sh passes its `serve --help` flags instead (--serve-help).
CONTRACT_FLAGS = {
    "--engine", "--backend", "--http", "--model", "--dp-size", "--engine-id",
    "--side-channel-port", "--disaggregation-bootstrap-port", "--kv-events",
    "--kv-replay",
}
ROLE_OF_ENGINE = {"prefill": "prefill", "decode": "decode", "aggregated": "prefill-decode"}
NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"


def load(directory):
    """(file, document) for every non-empty YAML document under directory."""
    docs = []
    for path in sorted(pathlib.Path(directory).rglob("*.yaml")):
        try:
            found = [d for d in yaml.safe_load_all(path.read_text()) if d]
        except yaml.YAMLError as e:
            sys.exit(f"ERROR {path}: not YAML: {e}")
        docs += [(str(path.relative_to(directory)), d) for d in found]
    return docs


def where(doc):
    meta = doc.get("metadata") or {}
    return f"{doc.get('kind')}/{meta.get('name')}"


def check_schema(doc):
    if doc.get("kind") == "ScaledObject":
        return [f"{'.'.join(map(str, e.path))}: {e.message}"
                for e in jsonschema.Draft202012Validator(SCALED_OBJECT_SCHEMA).iter_errors(doc)]
    if doc.get("kind") == "InferencePool":
        errs = [f"{'.'.join(map(str, e.path))}: {e.message}"
                for schema in (POOL_SCHEMA, CRD_SCHEMA) if schema
                for e in jsonschema.Draft202012Validator(schema).iter_errors(doc)]
        spec = doc.get("spec") or {}
        ref = spec.get("endpointPickerRef") or {}
        if ref and ref.get("kind", "Service") == "Service" and "port" not in ref:
            errs.append("spec.endpointPickerRef: port is required when kind is Service")
        numbers = [p.get("number") for p in spec.get("targetPorts") or [] if isinstance(p, dict)]
        if len(numbers) != len(set(numbers)):
            errs.append("spec.targetPorts: port numbers must be unique")
        return errs
    errs = []
    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except ValidationError as e:
            errs.append(f"{'.'.join(map(str, e.path))}: {e.message} (Kubernetes {e.version})")
        except SchemaNotFoundError as e:
            errs.append(e.message)
    return errs


def check_key(key):
    prefix, _, name = key.rpartition("/")
    ok = len(name) <= 63 and re.fullmatch(NAME, name)
    ok = ok and (not prefix or (len(prefix) <= 253 and re.fullmatch(DNS_SUBDOMAIN, prefix)))
    return [] if ok else [f"`{key}` is not a valid label or annotation key"]


def check_labels(labels, what):
    errs = []
    for k, v in (labels or {}).items():
        errs += [f"{what}: {e}" for e in check_key(k)]
        if not isinstance(v, str) or len(v) > 63 or (v and not re.fullmatch(NAME, v)):
            errs.append(f"{what}: label {k}={v!r} is not a valid label value")
    return errs


def pod_templates(docs):
    """(owner, template) for every Deployment and Job."""
    out = []
    for _, d in docs:
        if d.get("kind") in ("Deployment", "Job"):
            out.append((d, d["spec"]["template"]))
    return out


def matching(docs, selector):
    return [(o, t) for o, t in pod_templates(docs)
            if selector and all(t["metadata"].get("labels", {}).get(k) == v
                                for k, v in selector.items())]


def container_ports(template):
    ports = {}
    for c in template["spec"]["containers"]:
        for p in c.get("ports") or []:
            ports[p["containerPort"]] = p.get("name")
    return ports


def has_port(template, port):
    ports = container_ports(template)
    return port in ports if isinstance(port, int) else port in ports.values()


def check_metadata(doc):
    errs = []
    meta = doc.get("metadata") or {}
    if doc.get("kind") != "Namespace" and meta.get("namespace") != NAMESPACE:
        errs.append(f"metadata.namespace must be {NAMESPACE}")
    errs += check_labels(meta.get("labels"), "metadata.labels")
    errs += [f"metadata.annotations: {e}" for k in meta.get("annotations") or {} for e in check_key(k)]
    return errs


def check_template(doc):
    """A pod template's labels, selector, probes and $(VAR) references."""
    errs = []
    t = doc["spec"]["template"]
    errs += check_labels(t["metadata"].get("labels"), "template labels")
    for k in t["metadata"].get("annotations") or {}:
        errs += [f"template annotations: {e}" for e in check_key(k)]
    sel = (doc["spec"].get("selector") or {}).get("matchLabels") or {}
    for k, v in sel.items():
        if t["metadata"].get("labels", {}).get(k) != v:
            errs.append(f"spec.selector {k}={v} is not a label of the pod template")
    for c in t["spec"]["containers"]:
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            port = ((c.get(probe) or {}).get("httpGet") or {}).get("port")
            if port is not None and not has_port({"spec": {"containers": [c]}}, port):
                errs.append(f"container {c['name']}: {probe} port {port} is not a container port")
        env = {e["name"] for e in c.get("env") or []}
        for arg in (c.get("command") or []) + (c.get("args") or []):
            for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(arg)):
                if var not in env:
                    errs.append(f"container {c['name']}: $({var}) is not in its env")
    return errs


def flags_of(args):
    """`--flag value` pairs of an argument list (a flag without a value maps to None)."""
    out, i = {}, 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("--"):
            has_value = i + 1 < len(args) and not str(args[i + 1]).startswith("--")
            out[a] = str(args[i + 1]) if has_value else None
            i += 2 if has_value else 1
        else:
            i += 1
    return out


def port_of(endpoint):
    m = re.search(r":(\d+)$", endpoint or "")
    return int(m.group(1)) if m else None


def check_engine(doc, known_flags):
    """An engine pod's labels, ports, probes and annotations say what its flags say."""
    errs = []
    t = doc["spec"]["template"]
    labels = t["metadata"].get("labels", {})
    notes = t["metadata"].get("annotations") or {}
    for c in t["spec"]["containers"]:
        args = [str(a) for a in c.get("args") or []]
        if "handoff-mocker" not in c.get("image", "") or args[:1] != ["serve"]:
            continue
        f = flags_of(args[1:])
        errs += [f"container {c['name']}: serve has no flag {k}" for k in f if k not in known_flags]
        engine, backend = f.get("--engine"), f.get("--backend")
        if engine not in ROLE_OF_ENGINE or backend not in ("vllm", "sglang"):
            errs.append(f"container {c['name']}: --engine {engine} --backend {backend}")
            continue
        want = {
            "llm-d.ai/role": ROLE_OF_ENGINE[engine],
            "llm-d.ai/engine-type": backend,
            "inference.networking.k8s.io/engine-type": backend,
            "model.aibrix.ai/engine": backend,
            "model.aibrix.ai/name": f.get("--model"),
            "model.aibrix.ai/port": str(port_of(f.get("--http"))),
        }
        if engine != "aggregated":
            want["role-name"] = engine
        for k, v in want.items():
            if labels.get(k) != v:
                errs.append(f"label {k} is {labels.get(k)!r}, the flags say {v!r}")
        ports = container_ports(t)
        if ports.get(port_of(f.get("--http"))) != "http":
            errs.append("the --http port is not the container port named http")
        for flag in ("--kv-events", "--kv-replay", "--side-channel-port",
                     "--disaggregation-bootstrap-port"):
            if flag in f:
                v = f[flag] or ""
                p = int(v) if v.isdigit() else port_of(v)
                if p not in ports:
                    errs.append(f"{flag} {f[flag]}: no container port {p}")
        if backend == "vllm" and engine == "prefill" and "--side-channel-port" not in f:
            errs.append("a vLLM prefill engine needs --side-channel-port")
        if backend == "sglang" and engine == "prefill":
            boot = f.get("--disaggregation-bootstrap-port")
            for key in ("sglang.ai/bootstrap-port", "model.aibrix.ai/sglang-bootstrap-port"):
                if boot is None or notes.get(key) != boot:
                    errs.append(f"annotation {key} is {notes.get(key)!r}, the bootstrap port {boot!r}")
        for probe, path in (("readinessProbe", "/ready"), ("livenessProbe", "/health")):
            if ((c.get(probe) or {}).get("httpGet") or {}).get("path") != path:
                errs.append(f"{probe} must GET {path}")
    return errs


def check_reach(doc, docs):
    """A Service's or InferencePool's selector reaches pods that have its ports."""
    errs = []
    if doc["kind"] == "Service":
        sel, ports = doc["spec"].get("selector") or {}, [p.get("targetPort", p["port"]) for p in doc["spec"]["ports"]]
    else:
        sel = doc["spec"]["selector"]["matchLabels"]
        ports = [p["number"] for p in doc["spec"]["targetPorts"]]
    pods = matching(docs, sel)
    if not pods:
        errs.append(f"selector {sel} matches no pod template")
    for owner, t in pods:
        errs += [f"port {p} is not a container port of {where(owner)}" for p in ports if not has_port(t, p)]
    return errs


def selector_words(words):
    return dict(w.split("=", 1) for w in words)


def check_router(doc, docs):
    """A router's --prefill-selector/--decode-selector reach engines of that role on its port."""
    errs = []
    for c in doc["spec"]["template"]["spec"]["containers"]:
        args = [str(a) for a in c.get("args") or []]
        for flag, role in (("--prefill-selector", "prefill"), ("--decode-selector", "decode")):
            if flag not in args:
                continue
            i = args.index(flag) + 1
            words = []
            while i < len(args) and not args[i].startswith("--"):
                words.append(args[i])
                i += 1
            pods = matching(docs, selector_words(words))
            if not pods:
                errs.append(f"{flag} {' '.join(words)} matches no pod template")
            port = flags_of(args).get("--service-discovery-port")
            for owner, t in pods:
                if t["metadata"]["labels"].get("llm-d.ai/role") != role:
                    errs.append(f"{flag} reaches {where(owner)}, not a {role} engine")
                if port is None or int(port) not in container_ports(t):
                    errs.append(f"--service-discovery-port {port} is not a port of {where(owner)}")
    return errs


def check_sweep(docs):
    """The Indexed Job's --shard I/N against its completions, and the merge against both."""
    errs = []
    jobs = {d["metadata"]["name"]: d for _, d in docs if d.get("kind") == "Job"}
    sweep, merge = jobs.get("sweep"), jobs.get("sweep-merge")
    if not sweep or not merge:
        return ["deploy/k8s/sweep/ needs the Jobs sweep and sweep-merge"] if jobs else []
    spec = sweep["spec"]
    c = spec["template"]["spec"]["containers"][0]
    shard = flags_of(c.get("args") or []).get("--shard") or ""
    m = re.fullmatch(r"\$\((\w+)\)/(\d+)", shard)
    if spec.get("completionMode") != "Indexed" or not m:
        return ["the sweep Job must be Indexed and run --shard $(VAR)/N"]
    n = int(m.group(2))
    if spec.get("completions") != n:
        errs.append(f"the sweep Job has {spec.get('completions')} completions but --shard .../{n}")
    src = {e["name"]: e for e in c.get("env") or []}.get(m.group(1), {})
    field = ((src.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
    if field != "metadata.annotations['batch.kubernetes.io/job-completion-index']":
        errs.append(f"$({m.group(1)}) is not the pod's completion index")
    margs = [str(a) for a in merge["spec"]["template"]["spec"]["containers"][0].get("args") or []]
    out = flags_of(c["args"]).get("--out")
    want = [f"{out}/summary-shard-{i}-of-{n}.json" for i in range(n)]
    if margs[:2] != ["sweep", "merge"] or [a for a in margs if a.endswith(".json")] != want:
        errs.append(f"the merge Job must read {' '.join(want)}")
    claims = {json.dumps(j["spec"]["template"]["spec"]["volumes"], sort_keys=True) for j in (sweep, merge)}
    if len(claims) != 1:
        errs.append("the sweep and merge Jobs mount different volumes")
    return errs


AUTOSCALERS = ("HorizontalPodAutoscaler", "ScaledObject")


def scale_target(doc, docs):
    """The Deployment an HPA or ScaledObject scales, or an error."""
    ref = doc["spec"]["scaleTargetRef"]
    kind = ref.get("kind", "Deployment")
    if kind != "Deployment" or ref.get("apiVersion", "apps/v1") != "apps/v1":
        return None, f"scaleTargetRef must be an apps/v1 Deployment, not {ref.get('apiVersion')} {kind}"
    found = [d for _, d in docs if d.get("kind") == "Deployment" and d["metadata"]["name"] == ref["name"]]
    if not found:
        return None, f"scaleTargetRef names no Deployment here: {ref['name']}"
    return found[0], None


def metric_errors(names):
    """Each engine metric name (`vllm:x`, or an adapter's `vllm_x`) the engine does not export."""
    errs = []
    for name in names:
        m = re.fullmatch(r"(vllm|sglang)[:_](.+)", name)
        if not m or m.group(2) not in ENGINE_METRICS[m.group(1)]:
            errs.append(f"metric {name} is not one the engine exports")
    return errs


def check_autoscaler(doc, docs):
    """An HPA's or ScaledObject's target, replica bounds, metrics and the target's grace period."""
    target, err = scale_target(doc, docs)
    if err:
        return [err]
    spec = doc["spec"]
    errs = []
    if doc["kind"] == "HorizontalPodAutoscaler":
        lo, hi = spec.get("minReplicas", 1), spec["maxReplicas"]
        names = [m[m["type"][0].lower() + m["type"][1:]]["metric"]["name"]
                 for m in spec.get("metrics") or [] if m["type"] in ("Pods", "Object", "External")]
    else:
        lo, hi = spec.get("minReplicaCount", 0), spec.get("maxReplicaCount", 100)
        names = []
        for t in spec["triggers"]:
            if t["type"] != "prometheus":
                continue
            query = t["metadata"].get("query", "")
            found = re.findall(r"\b((?:vllm|sglang):[a-z_]+)", query)
            if not found:
                errs.append(f"trigger {t.get('name', t['type'])}: the query reads no engine metric")
            names += found
            role = re.search(r'role="([a-z]+)"', query)
            engine = flags_of(target["spec"]["template"]["spec"]["containers"][0].get("args") or []).get("--engine")
            if role and engine and role.group(1) != engine:
                errs.append(f"the query reads role=\"{role.group(1)}\" but {target['metadata']['name']} is a {engine} engine")
    if lo > hi:
        errs.append(f"{lo} minimum replicas over {hi} maximum")
    errs += metric_errors(names)
    pod = target["spec"]["template"]["spec"]
    grace = pod.get("terminationGracePeriodSeconds", DEFAULT_POD_GRACE_S)
    args = flags_of(pod["containers"][0].get("args") or [])
    engine_grace = float(args.get("--grace-period-s") or DEFAULT_ENGINE_GRACE_S)
    if grace < engine_grace:
        errs.append(f"{target['metadata']['name']}'s terminationGracePeriodSeconds {grace} is under its "
                    f"--grace-period-s {engine_grace:g}: a scale-down's SIGKILL would cut the drain")
    return errs


def check_one_autoscaler(docs):
    """No Deployment is scaled by two autoscalers (they would fight)."""
    seen = {}
    for _, d in docs:
        if d.get("kind") in AUTOSCALERS:
            seen.setdefault(d["spec"]["scaleTargetRef"]["name"], []).append(where(d))
    return [f"Deployment {n} has {len(w)} autoscalers: {', '.join(w)}" for n, w in seen.items() if len(w) > 1]


def validate(docs, known_flags):
    """Every error, as `file: Kind/name: message`."""
    errs = []
    for path, d in docs:
        if not all(k in d for k in ("apiVersion", "kind", "metadata")):
            errs.append(f"{path}: a document without apiVersion, kind and metadata")
            continue
        found = check_schema(d) + check_metadata(d)
        kind = d["kind"]
        if kind in ("Deployment", "Job") and not found:
            found += check_template(d) + check_engine(d, known_flags)
            if kind == "Deployment":
                found += check_router(d, docs)
        if kind in ("Service", "InferencePool") and not found:
            found += check_reach(d, docs)
        if kind in AUTOSCALERS and not found:
            found += check_autoscaler(d, docs)
        errs += [f"{path}: {where(d)}: {e}" for e in found]
    errs += [f"sweep: {e}" for e in check_sweep(docs)]
    errs += [f"autoscaling: {e}" for e in check_one_autoscaler(docs)]
    return errs


def find(docs, kind, name):
    return next(d for _, d in docs if d["kind"] == kind and d["metadata"]["name"] == name)


def engine_args(docs, name):
    return find(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]["args"]


def set_arg(args, flag, value, word=1):
    """Sets the word-th argument after flag."""
    args[args.index(flag) + word] = value


def router_args(docs, name):
    return find(docs, "Deployment", name)["spec"]["template"]["spec"]["containers"][0]["args"]


# Broken copies: (what is broken, how to break it, a fragment of the error).
BREAKS = [
    ("replicas as a string", lambda d: find(d, "Deployment", "vllm-prefill")["spec"].update(replicas="two"),
     "'two' is not of type 'integer'"),
    ("a misspelt field (strict)", lambda d: find(d, "Deployment", "vllm-decode")["spec"]["template"]["spec"]
     ["containers"][0].update(imagePulPolicy="Always"), "imagePulPolicy"),
    ("a pool port out of range", lambda d: find(d, "InferencePool", "handoff-mocker-aggregated")["spec"]
     ["targetPorts"][0].update(number=70000), "70000 is greater than the maximum"),
    ("a picker Service without a port", lambda d: find(d, "InferencePool", "handoff-mocker-aggregated")["spec"]
     ["endpointPickerRef"].pop("port"), "port is required when kind is Service"),
    ("engine-type not the backend", lambda d: find(d, "Deployment", "sglang-decode")["spec"]["template"]
     ["metadata"]["labels"].update({"llm-d.ai/engine-type": "vllm"}), "label llm-d.ai/engine-type is 'vllm'"),
    ("a Service port naming no container port", lambda d: find(d, "Service", "vllm-prefill")["spec"]["ports"][1]
     .update(targetPort="side-chanel"), "port side-chanel is not a container port"),
    ("a model name that is no label value", lambda d: [
        find(d, "Deployment", "vllm-aggregated")["spec"]["template"]["metadata"]["labels"]
        .update({"model.aibrix.ai/name": "Qwen/Qwen3-8B"}),
        set_arg(engine_args(d, "vllm-aggregated"), "--model", "Qwen/Qwen3-8B")], "is not a valid label value"),
    ("an unset $(VAR)", lambda d: set_arg(engine_args(d, "vllm-decode"), "--engine-id", "$(POD_NAM)"),
     "$(POD_NAM) is not in its env"),
    ("shards and completions disagree", lambda d: find(d, "Job", "sweep")["spec"].update(completions=3, parallelism=3),
     "3 completions but --shard .../4"),
    ("a flag serve does not have", lambda d: engine_args(d, "sglang-prefill").extend(["--bootstrap-port", "1"]),
     "serve has no flag --bootstrap-port"),
    ("a bootstrap annotation that disagrees", lambda d: find(d, "Deployment", "sglang-prefill")["spec"]["template"]
     ["metadata"]["annotations"].update({"sglang.ai/bootstrap-port": "9000"}), "annotation sglang.ai/bootstrap-port"),
    ("a router selector reaching no engine", lambda d: set_arg(
        router_args(d, "vllm-router"), "--decode-selector", "app.kubernetes.io/instance=vllm-pdx"),
     "--decode-selector"),
    ("an HPA on a Deployment that is not here", lambda d: find(d, "HorizontalPodAutoscaler", "vllm-decode")
     ["spec"]["scaleTargetRef"].update(name="vllm-decoder"), "scaleTargetRef names no Deployment here"),
    ("an HPA on a metric the engine does not export", lambda d: find(d, "HorizontalPodAutoscaler", "vllm-decode")
     ["spec"]["metrics"][0]["pods"]["metric"].update(name="vllm_gpu_cache_usage_perc"), "is not one the engine"),
    ("a KEDA threshold as a number", lambda d: find(d, "ScaledObject", "vllm-prefill")["spec"]["triggers"][0]
     ["metadata"].update(threshold=4), "4 is not of type 'string'"),
    ("a KEDA query on the other role", lambda d: find(d, "ScaledObject", "vllm-prefill")["spec"]["triggers"][0]
     ["metadata"].update(query='sum(vllm:num_requests_waiting{role="decode"})'), "is a prefill engine"),
    ("two autoscalers on one Deployment", lambda d: find(d, "ScaledObject", "vllm-prefill")["spec"]
     ["scaleTargetRef"].update(name="vllm-decode"), "Deployment vllm-decode has 2 autoscalers"),
    ("a grace period under the engine's", lambda d: find(d, "Deployment", "vllm-decode")["spec"]["template"]
     ["spec"].update(terminationGracePeriodSeconds=10), "a scale-down's SIGKILL would cut the drain"),
    ("a router's prefill selector reaching decode engines", lambda d: set_arg(
        router_args(d, "sglang-router"), "--prefill-selector", "llm-d.ai/role=decode", word=2),
     "not a prefill engine"),
]


def self_test(docs, known_flags):
    """Each broken copy of docs fails with the error expected of it."""
    passed = failed = 0
    for name, brk, fragment in BREAKS:
        broken = copy.deepcopy(docs)
        brk(broken)
        errs = validate(broken, known_flags)
        if any(fragment in e for e in errs):
            passed += 1
        else:
            failed += 1
            print(f"FAIL self-test `{name}`: no error containing {fragment!r}; got {errs}", file=sys.stderr)
    return passed, failed


def main(argv):
    test = "--self-test" in argv
    argv = [a for a in argv if a != "--self-test"]
    known = set(CONTRACT_FLAGS)
    if "--serve-help" in argv:
        i = argv.index("--serve-help")
        known = set(re.findall(r"(--[a-z][-a-z0-9]*)", pathlib.Path(argv[i + 1]).read_text()))
        del argv[i:i + 2]
    directory = argv[0]
    docs = load(directory)
    if not docs:
        sys.exit(f"ERROR {directory}: no manifests")
    errs = validate(docs, known)
    for e in errs:
        print(f"ERROR {e}", file=sys.stderr)
    files = sorted({p for p, _ in docs})
    bad = {e.split(":", 1)[0] for e in errs}
    print(f"k8s manifests: {len(docs)} documents in {len(files)} files, "
          f"Kubernetes {' and '.join(K8S_VERSIONS)} schemas")
    passed, failed = len([f for f in files if f not in bad]), len(bad)
    if test:
        tp, tf = self_test(docs, known)
        print(f"k8s self-test: {tp} broken copies rejected, {tf} accepted")
        passed, failed = passed + tp, failed + tf
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and not errs else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
