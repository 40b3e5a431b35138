#!/usr/bin/env bash
# Many policies on one base, with swarm clients (issue 43's proof): one ajet-swarm front and engine
# serve the warmed-up tiny calc model; CLIENTS agents (examples/python_agent, one process each, each
# on its own calc tasks: `ajet tasks generate --seed 100+k`, judged by `ajet tasks judge`) each train
# their own LoRA adapter c<k> (rank 16, made with POST /adapters; `agent.py --adapter c<k>`), all at
# once, under ajet.engine.adapter_memory_mb sized for RESIDENT trained adapters, so that adapters move
# out to disk and back while the clients run, and the same without a budget. Reports, per run, each
# client's mean reward over the first and the last quarter of its episodes (in the order they
# ended), how many rose, the adapters brought back from disk, and the agents' failed episodes;
# appends the table to docs/benchmarks.md unless --no-append.
#   bench/swarm/adapter_clients.sh [--no-append] [SEED...]   (default 1 2 3; each seed runs with the
#   budget and without one, the same tasks and adapter seeds)
# Environment: AJET_CLIENTS (8), AJET_EPISODES (per client, 256), AJET_RESIDENT (6),
# AJET_MODEL (exp/main/models/calc-sft: scripts/run.sh's warm-up), AJET_BENCH_PORT (10197).
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$here"
append=1
if [ "${1:-}" = "--no-append" ]; then append=0; shift; fi
clients="${AJET_CLIENTS:-8}" episodes="${AJET_EPISODES:-256}" resident="${AJET_RESIDENT:-6}"
seeds=("$@"); [ "${#seeds[@]}" -gt 0 ] || seeds=(1 2 3)
model="$(realpath "${AJET_MODEL:-exp/main/models/calc-sft}")" port="${AJET_BENCH_PORT:-10197}"
rank=16
[ -f "$model/config.json" ] || { echo "adapter_clients: no model at $model (run scripts/run.sh first)" >&2; exit 2; }
base_out="$here/exp/bench/adapter_clients/$(date +%Y%m%d_%H%M%S)"
mkdir -p "$base_out"
# The budget: RESIDENT trained adapters (each its A and B twice and two AdamW moments: 4x A and B)
# and half of one more, from the model's shape (float32, rank 16 on every linear layer).
read -r adapter_bytes budget_mb < <(python3 - "$model/config.json" "$rank" "$resident" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); r = int(sys.argv[2]); n = int(sys.argv[3])
h, i, layers = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
hd = c.get("head_dim") or h // c["num_attention_heads"]
q, kv = c["num_attention_heads"] * hd, c.get("num_key_value_heads", c["num_attention_heads"]) * hd
per_layer = (h + q) + 2 * (h + kv) + (q + h) + 2 * (h + i) + (i + h)
b = 4 * r * layers * per_layer
print(b, f"{(n * 4 * b + 2 * b) / 2**20:.6f}")
PY
)
admin() {  # URL METHOD PATH [BODY]: the front's answer (no admin token: a loopback front)
  python3 - "$@" <<'PY'
import json, sys, urllib.request
url, method, path = sys.argv[1:4]
data = sys.argv[4].encode() if len(sys.argv) > 4 else None
req = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=600).read().decode())
PY
}
# One run: SEED (tasks 100*SEED+k, adapter seeds), MEMORY_MB (0: no budget) -> rows in $out/rows.
run_one() {
  local seed="$1" memory="$2" label="$3"
  out="$base_out/$label-seed$seed"
  mkdir -p "$out"
  local conf="$out/swarm.yaml"
  cat > "$conf" <<YAML
ajet:
  backbone: torch
  model: {path: $model}
  data: {max_prompt_length: 832, max_response_length: 192, train_batch_size: 16}
  rollout: {num_repeat: 4, temperature: 1.0, max_response_length_in_one_turn: 48, max_model_len: 1024}
  trainer_common:
    use_kl_loss: false
    entropy_coeff: 0.0
    algorithm: {adv_estimator: grpo}
    optim: {lr: 1.0e-3, betas: [0.9, 0.99], weight_decay: 0.0, grad_clip: 1.0}
    checkpoint_base_dir: $out/checkpoints
  engine: {threads: 2, kv_cache_memory_mb: 256, adapter_memory_mb: $memory, seed: $seed}
YAML
  build/bin/ajet-swarm start --port "$port" --exp-dir "$out/swarm" > "$out/swarm.log" 2>&1 &
  local server=$!
  trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
  local url="http://127.0.0.1:$port"
  PYTHONPATH=clients/python python3 -m ajet_swarm --swarm-url "$url" start --conf "$conf" > "$out/start.log" 2>&1
  for k in $(seq 1 "$clients"); do
    admin "$url" POST /adapters "{\"name\": \"c$k\", \"rank\": $rank, \"alpha\": $((2 * rank)), \"seed\": $((100 * seed + k))}" > /dev/null
  done
  local listed
  listed="$(admin "$url" GET /adapters | python3 -c 'import json,sys; print(json.load(sys.stdin)["adapters"][0]["bytes"])')"
  echo "adapter_clients: seed $seed, $label: $clients adapters of $listed bytes (computed $adapter_bytes), adapter_memory_mb $memory"
  local t0; t0=$(date +%s)
  local pids=()
  for k in $(seq 1 "$clients"); do
    python3 examples/python_agent/agent.py --swarm-url "$url" --ajet build/bin/ajet --generate 64 \
      --seed $((100 * seed + k)) --episodes "$episodes" --repeat 4 --parallel 4 --adapter "c$k" \
      > "$out/c$k.jsonl" 2> "$out/c$k.log" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  local wall=$(( $(date +%s) - t0 ))
  admin "$url" GET /adapters > "$out/adapters.json"
  kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true
  trap - EXIT
  local steps
  steps=$(grep -c 'batch [0-9]* ready' "$out/swarm.log" || true)
  python3 - "$out" "$clients" "$seed" "$label" "$wall" "$steps" >> "$base_out/rows" <<'PY'
import json, sys
out, n, seed, label, wall, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
listed = {a["name"]: a for a in json.load(open(f"{out}/adapters.json"))["adapters"]}
gains, cells, moved, failed = [], [], 0, 0
for k in range(1, n + 1):
    lines = [json.loads(l) for l in open(f"{out}/c{k}.jsonl") if l.startswith("{")]
    rewards = [l["reward"] for l in lines if "reward" in l]
    failed += sum(1 for l in lines if "aborted" in l) + (len(lines) == 0)
    q = max(1, len(rewards) // 4)
    first, last = sum(rewards[:q]) / q, sum(rewards[-q:]) / q
    gains.append(last - first)
    a = listed[f"c{k}"]
    moved += a["loads"]
    cells.append(f"{first:.2f}→{last:.2f}")
s = sorted(gains)
med = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
print(f"| {seed} | {label} | {' / '.join(cells)} | **{med:+.3f}** ({s[0]:+.3f} to {s[-1]:+.3f}) | "
      f"{sum(g > 0 for g in gains)} of {n} | {moved} | {failed} | {steps} | {wall} |")
PY
  tail -1 "$base_out/rows"
}
for seed in "${seeds[@]}"; do
  run_one "$seed" "$budget_mb" "budget"
  run_one "$seed" 0 "no-budget"
done
table="| seed | adapter memory | each client's reward, first → last quarter (c1 / ... / c$clients) | median change (range) | rose | adapters brought back | failed episodes | train steps | wall s |
|---|---|---|---|---|---|---|---|---|
$(cat "$base_out/rows")"
summary="$clients clients x $episodes episodes each per run; budget $budget_mb MB ($resident of $clients trained adapters of rank $rank) vs none."
echo "$summary"
echo "$table"
if [ "$append" = 1 ]; then
  {
    echo
    echo "## $(date +%F): eight clients, eight adapters, one engine (bench/swarm/adapter_clients.sh ${seeds[*]})"
    echo
    echo "One ajet-swarm front and engine serving $model (the warmed-up tiny calc model);"
    echo "$clients \`examples/python_agent\` processes at once, each with \`--adapter c<k>\` on its own calc tasks"
    echo "(\`--generate 64 --seed 100*seed+k\`, judged by \`ajet tasks judge\`, \`--repeat 4 --parallel 4\`); each"
    echo "adapter rank $rank, alpha $((2 * rank)), lr 1e-3; batches of 16 tasks x 4 episodes, each adapter trained on"
    echo "its own episodes. Per seed, \`ajet.engine.adapter_memory_mb\` holding $resident trained adapters (so adapters"
    echo "moved out to disk and back while the clients ran) and no budget, with the same tasks and seeds."
    echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end."
    echo
    echo "$summary"
    echo
    echo "$table"
  } >> docs/benchmarks.md
fi
