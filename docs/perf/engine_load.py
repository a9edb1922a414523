"""Loads one `serve` process and reads its CPU and memory from /proc.

    python3 docs/perf/engine_load.py BINARY REQUESTS CONCURRENCY [SERVE FLAGS...]

Starts `BINARY serve` on free loopback ports with the given flags, waits for
/ready, sends REQUESTS completions (about 440 prompt tokens from two shared
prefixes, 128 tokens out, ignore_eos) over CONCURRENCY threads, samples the
process's CPU every second, then stops it with SIGTERM. Prints JSON: wall
time, request rate, CPU seconds (utime + stime of the server only), mean
and largest one-second core use, VmRSS idle and after, VmHWM (peak RSS),
and the exit status. docs/perf/2026-12-06-engine-resources.md uses it.
"""
import json, os, signal, socket, subprocess, sys, threading, time, urllib.request
from concurrent.futures import ThreadPoolExecutor

BIN, REQUESTS, CONC = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
EXTRA = sys.argv[4:]
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
http, ev, rp = free_port(), free_port(), free_port()
cmd = [BIN, "serve", "--http", f"127.0.0.1:{http}", "--kv-events", f"tcp://127.0.0.1:{ev}",
       "--kv-replay", f"tcp://127.0.0.1:{rp}"] + EXTRA
proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
base = f"http://127.0.0.1:{http}"
for _ in range(200):
    try:
        urllib.request.urlopen(base + "/ready", timeout=1).read(); break
    except Exception:
        time.sleep(0.1)
tick = os.sysconf("SC_CLK_TCK")
def cpu_s():
    f = open(f"/proc/{proc.pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick
def status(key):
    for line in open(f"/proc/{proc.pid}/status"):
        if line.startswith(key):
            return int(line.split()[1])
idle_rss = status("VmRSS:")
samples, stop = [], threading.Event()
def sample():
    last_t, last_c = time.time(), cpu_s()
    while not stop.wait(1.0):
        t, c = time.time(), cpu_s()
        samples.append((c - last_c) / (t - last_t)); last_t, last_c = t, c
prefixes = ["You are a support assistant for a storage array. " * 30,
            "You translate maintenance notes into French for a data centre team. " * 25]
words = ["disk", "cable", "fan", "rack", "power", "switch", "port", "node"]
def one(i):
    prompt = prefixes[i % 2] + " ".join(words[(i * 7 + k) % 8] for k in range(40)) + f" ticket {i}"
    body = json.dumps({"model": "qwen3-8b", "prompt": prompt, "max_tokens": 128, "ignore_eos": True}).encode()
    req = urllib.request.Request(base + "/v1/completions", body, {"Content-Type": "application/json"})
    r = json.load(urllib.request.urlopen(req, timeout=120))
    return r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"]
threading.Thread(target=sample, daemon=True).start()
c0, t0 = cpu_s(), time.time()
with ThreadPoolExecutor(CONC) as ex:
    usage = list(ex.map(one, range(REQUESTS)))
wall, cpu = time.time() - t0, cpu_s() - c0
stop.set()
after_rss, hwm = status("VmRSS:"), status("VmHWM:")
proc.send_signal(signal.SIGTERM); rc = proc.wait(timeout=60)
print(json.dumps({
    "command": " ".join(["handoff-mocker"] + cmd[1:]), "requests": REQUESTS, "concurrency": CONC,
    "prompt_tokens_mean": round(sum(u[0] for u in usage) / len(usage), 1),
    "completion_tokens_each": usage[0][1], "wall_s": round(wall, 2),
    "req_per_s": round(REQUESTS / wall, 2), "cpu_s": round(cpu, 2), "cores_mean": round(cpu / wall, 3),
    "cores_max_1s": round(max(samples), 3) if samples else None,
    "rss_idle_kb": idle_rss, "rss_after_kb": after_rss, "rss_peak_kb": hwm, "exit": rc}, indent=1))
