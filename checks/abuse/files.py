"""File and LoRA abuse checks of issue 51 against a `handoff-mocker` binary.

Usage: files.py PATH-TO-handoff-mocker

Every flag that reads a whole file is given /dev/zero, a FIFO (no writer),
a directory and a sparse file past its size limit: each must fail within
FILE_LIMIT_S with an error naming the flag, its peak RSS (wait4's
ru_maxrss) under RSS_LIMIT_MIB. A report whose `config.flags` carry output
flags reruns without writing a file; one naming an input file is refused.
A `serve` with runtime LoRA refuses huge adapter names and paths, and 200
such loads leave its RSS near where it started. Everything is bounded in
count and time and goes to 127.0.0.1 only. Prints one line per check and
'N passed, N failed'; exits 1 if any failed. Standard library only.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

FILE_LIMIT_S = 5.0
RUN_LIMIT_S = 120.0
RSS_LIMIT_MIB = 200
LORA_LOADS = 100
LORA_GROWTH_LIMIT_MIB = 64
BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/release/handoff-mocker")
results = []


def check(name, ok, detail=""):
    results.append(ok)
    print(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}", flush=True)


def run(args, cwd, limit, env=None):
    """Runs BIN with args in cwd; (exit code or None if killed at limit,
    stderr text, seconds, peak RSS in MiB)."""
    with tempfile.TemporaryFile() as err:
        t = time.monotonic()
        p = subprocess.Popen([BIN, *args], cwd=cwd, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=err, env=env)
        code, rss_kib = None, 0
        while True:
            pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            if pid:
                code, rss_kib = os.waitstatus_to_exitcode(status), usage.ru_maxrss
                break
            if time.monotonic() - t > limit:
                p.kill()
                _, _, usage = os.wait4(p.pid, 0)
                rss_kib = usage.ru_maxrss
                break
            time.sleep(0.02)
        p.returncode = code if code is not None else -9
        took = time.monotonic() - t
        err.seek(0)
        text = err.read(1 << 16).decode(errors="replace")
    return code, text, took, rss_kib / 1024


def sparse(path, size):
    with open(path, "wb") as f:
        f.truncate(size)


def file_flags(tmp):
    fifo = os.path.join(tmp, "pipe")
    os.mkfifo(fifo)
    folder = os.path.join(tmp, "folder")
    os.mkdir(folder)
    big = {}
    for name, size in [("report", 300 << 20), ("grid", 2 << 20), ("csv", 20 << 20), ("tok", 65 << 20)]:
        big[name] = os.path.join(tmp, f"big-{name}")
        sparse(big[name], size)
    flags = [
        ("--rerun", ["replay", "--rerun", "{}"], big["report"]),
        ("plan --merge", ["plan", "--merge", "{}", "--out", "o"], big["report"]),
        ("sweep merge", ["sweep", "merge", "{}", "--out", "o"], big["report"]),
        ("--grid", ["sweep", "--grid", "{}", "--out", "o"], big["grid"]),
        ("--check-aic", ["plan", "--check-aic", "{}", "--slo", "ttft:p90=1s", "--out", "o"], big["csv"]),
        ("--faults", ["replay", "--requests", "5", "--faults", "{}"], big["grid"]),
        ("--perf", ["replay", "--requests", "5", "--perf", "profile:{}"], big["grid"]),
        ("--tokenizer", ["serve", "--http", "127.0.0.1:0", "--tokenizer", "{}"], big["tok"]),
    ]
    for flag, args, oversized in flags:
        for what, path in [("/dev/zero", "/dev/zero"), ("a FIFO", fifo),
                           ("a directory", folder), ("an oversized file", oversized)]:
            argv = [a.replace("{}", path) for a in args]
            code, err, took, rss = run(argv, tmp, FILE_LIMIT_S)
            last = (err.strip().splitlines() or [""])[-1]
            ok = code in (1, 2) and flag.split()[-1] in err and rss < RSS_LIMIT_MIB
            check(f"{flag} {what} refused", ok,
                  f"exit {code} in {took:.2f} s, {rss:.0f} MiB: {last[:140]}")


def hostile_rerun(tmp):
    report = os.path.join(tmp, "r.json")
    code, err, _, _ = run(["replay", "--requests", "20", "--output", report], tmp, RUN_LIMIT_S)
    if code != 0:
        check("a report to rerun is written", False, err[-200:])
        return
    with open(report) as f:
        v = json.load(f)
    targets = [os.path.join(tmp, n) for n in ["x.json", "x.html", "kv.jsonl", "req.jsonl"]]
    v["config"]["flags"] = v["config"].get("flags", []) + [
        "--output", targets[0], "--html", targets[1],
        "--kv-events-out", targets[2], "--per-request-jsonl", targets[3]]
    with open(report, "w") as f:
        json.dump(v, f)
    code, err, took, _ = run(["replay", "--rerun", report], tmp, RUN_LIMIT_S)
    written = [t for t in targets if os.path.exists(t)]
    check("a hostile report's output flags write nothing", code == 0 and not written,
          f"exit {code} in {took:.2f} s, written {written}")
    v["config"]["flags"] += ["--trace", "/etc/passwd"]
    with open(report, "w") as f:
        json.dump(v, f)
    code, err, took, _ = run(["replay", "--rerun", report, "--output", "out.json"], tmp, FILE_LIMIT_S)
    ok = code == 1 and "--trace /etc/passwd" in err and not os.path.exists(os.path.join(tmp, "out.json"))
    check("a hostile report's --trace is not followed", ok, f"exit {code} in {took:.2f} s")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, timeout=10.0):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def lora(tmp):
    port = free_port()
    env = dict(os.environ, VLLM_ALLOW_RUNTIME_LORA_UPDATING="1")
    serve = subprocess.Popen([BIN, "serve", "--prefill", "1", "--decode", "0", "--http", f"127.0.0.1:{port}"],
                             cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1.0) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline or serve.poll() is not None:
                check("serve with runtime LoRA starts", False)
                return
            time.sleep(0.1)
        before = rss_mib(serve.pid)
        huge = "x" * 3_900_000
        codes = set()
        t = time.monotonic()
        for i in range(LORA_LOADS):
            for body in ({"lora_name": f"{huge}{i}", "lora_path": "/p"},
                         {"lora_name": f"n{i}", "lora_path": f"/{huge}"}):
                codes.add(post(port, "/v1/load_lora_adapter", json.dumps(body).encode())[0])
        took = time.monotonic() - t
        after = rss_mib(serve.pid)
        check(f"{2 * LORA_LOADS} huge LoRA names and paths refused", codes == {400},
              f"answers {sorted(codes)} in {took:.1f} s")
        check("RSS stays near its start", after - before < LORA_GROWTH_LIMIT_MIB,
              f"{before:.0f} MiB before, {after:.0f} MiB after")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
            size = len(r.read())
        check("/v1/models stays small", size < 64 << 10, f"{size} bytes")
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(20)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait(10)


def main():
    with tempfile.TemporaryDirectory(prefix="abuse-files-") as tmp:
        file_flags(tmp)
        hostile_rerun(tmp)
        lora(tmp)


if __name__ == "__main__":
    main()
    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
