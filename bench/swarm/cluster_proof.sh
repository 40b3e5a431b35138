#!/usr/bin/env bash
# Does the main task train through the swarm when the engines are replicas on other "hosts" that die
# and join? One run compares, on the same tasks and agent:
#   A  one front with its own engine (what bench/swarm/swarm_config_learning.sh runs), and
#   B  a front in this network namespace driving two `ajet-engine serve --elastic` replicas, each in
#      a namespace of its own joined by veth pairs to a bridge (ajet-swarm start --engine-at), where
#      replica 2 is SIGKILLed once a third of the steps trained and a third replica, in a third
#      namespace, joins (POST /engines) at half of them.
# Both run examples/python_agent (16 in flight, 4 episodes per task, calc tasks from `ajet tasks
# generate --seed AJET_BENCH_SEED`, judged by `ajet tasks judge`) with examples/configs/swarm_calc.yaml
# (the warmed-up calc model of scripts/run.sh, exp/main/models/calc-sft), and print the mean reward
# of each quarter of the episodes in the order they ended. For B also: whether every step's replicas
# held the same weights, the group generations, batches not trained, and the episodes the agent got
# acknowledged against those in the batches the front formed (nothing acknowledged may be lost).
#
#   bench/swarm/cluster_proof.sh [--no-append] [EPISODES=512]      (root: it makes network namespaces)
#
# What 2 cores can and cannot show: A's engine has both cores; B's two replicas have one thread
# each on the same two cores, and the namespaces add veth hops, not a network's latency: B's wall
# time says nothing about a cluster's. The reward curves are what transfer. Outputs: exp/bench/.
# Appends its result to docs/benchmarks.md unless --no-append.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$here"
append=1
if [ "${1:-}" = "--no-append" ]; then append=0; shift; fi
episodes="${1:-512}" seed="${AJET_BENCH_SEED:-3}" conf=examples/configs/swarm_calc.yaml
[ "$(id -u)" = 0 ] || { echo "cluster_proof: needs root (network namespaces)"; exit 1; }
[ -f exp/main/models/calc-sft/model.safetensors ] ||
  { echo "cluster_proof: no exp/main/models/calc-sft: run scripts/run.sh (or its sft stage) first"; exit 1; }
out="exp/bench/cluster_proof/$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
name="ajcp$$"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  scripts/netns_cluster.sh down "$name" 2>/dev/null || true
}
trap cleanup EXIT

agent() {  # URL FILE: the agent's episodes, one JSON line each
  python3 examples/python_agent/agent.py --swarm-url "$1" --ajet build/bin/ajet --generate 256 \
    --seed "$seed" --episodes "$episodes" --repeat 4 --parallel 16 > "$2" 2> "$2.log"
}
quarters() {  # FILE: mean reward of each quarter of the episodes
  python3 - "$1" <<'PY'
import json, sys
r = [json.loads(l)["reward"] for l in open(sys.argv[1]) if l.startswith("{") and '"reward"' in l]
q = len(r) // 4
m = [sum(r[i * q:(i + 1) * q]) / q for i in range(4)]
print(f"{len(r)} episodes; mean reward by quarter: " + " ".join(f"{x:.3f}" for x in m) +
      f"; first -> last quarter {m[0]:.3f} -> {m[3]:.3f} ({m[3] - m[0]:+.3f})")
PY
}
step_of() { curl -s "$1/get_engine_status" | python3 -c 'import json,sys; print(json.load(sys.stdin)["global_step"])'; }

# ---- A: one front, its own engine ----
portA=$(( 10200 + $$ % 500 ))
build/bin/ajet-swarm start --port "$portA" --exp-dir "$out/a" > "$out/a.log" 2>&1 &
pids+=($!)
PYTHONPATH=clients/python python3 -m ajet_swarm --swarm-url "http://127.0.0.1:$portA" start --conf "$conf" > "$out/a_start.log" 2>&1
t0=$(date +%s)
agent "http://127.0.0.1:$portA" "$out/a_episodes.jsonl"
secs_a=$(( $(date +%s) - t0 ))
steps_a=$(step_of "http://127.0.0.1:$portA")
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null || true
summary_a="A one front, its own engine: $(quarters "$out/a_episodes.jsonl"); $steps_a steps in $secs_a s"
echo "$summary_a"

# ---- B: the cluster ----
sub=$(scripts/netns_cluster.sh up "$name" 3)
head -c 32 /dev/urandom | base64 > "$out/engine.token"; chmod 600 "$out/engine.token"
engine() {  # I: a replica in namespace i; prints its address once ready
  ip netns exec "$name-h$1" build/bin/ajet-engine serve --elastic --conf "$conf" \
    --model exp/main/models/calc-sft --threads 1 --listen "tcp:$sub.$(( 11 + $1 )):7000" \
    --token-file "$out/engine.token" > "$out/engine$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 600); do grep -q "ajet-engine: ready on" "$out/engine$1.log" && break; sleep 0.2; done
}
engine 0; engine 1
victim=${pids[-1]}
portB=$(( portA + 1 )) url="http://127.0.0.1:$(( portA + 1 ))"
build/bin/ajet-swarm start --port "$portB" --exp-dir "$out/b" --engine-at "tcp:$sub.11:7000" \
  --engine-at "tcp:$sub.12:7000" --engine-token-file "$out/engine.token" > "$out/b.log" 2>&1 &
pids+=($!)
PYTHONPATH=clients/python python3 -m ajet_swarm --swarm-url "$url" start --conf "$conf" > "$out/b_start.log" 2>&1
t0=$(date +%s)
agent "$url" "$out/b_episodes.jsonl" &
agent_pid=$!
kill_at=$(( steps_a / 3 > 1 ? steps_a / 3 : 1 )) join_at=$(( steps_a / 2 > 2 ? steps_a / 2 : 2 )) killed="" joined=""
while kill -0 "$agent_pid" 2>/dev/null; do
  step=$(step_of "$url" 2>/dev/null || echo 0)
  if [ -z "$killed" ] && [ "$step" -ge "$kill_at" ]; then
    kill -9 "$victim"; killed="$step"; echo "cluster_proof: SIGKILLed replica 2 at step $step"
  fi
  if [ -n "$killed" ] && [ -z "$joined" ] && [ "$step" -ge "$join_at" ]; then
    engine 2
    curl -s -X POST "$url/engines" -H 'Content-Type: application/json' \
      -d "{\"address\": \"tcp:$sub.13:7000\"}" > /dev/null
    joined="$step"; echo "cluster_proof: replica 3 joins at step $step"
  fi
  sleep 1
done
wait "$agent_pid"
secs_b=$(( $(date +%s) - t0 ))
sleep 3  # the last step's log lines
steps_b=$(step_of "$url")
acked=$(grep -c '"reward"' "$out/b_episodes.jsonl" || true)
formed=$(grep -o 'batch [0-9]* ready: {[^}]*}' "$out/b.log" | grep -o '"episodes":[0-9]*' | cut -d: -f2 |
  python3 -c 'import sys; print(sum(int(x) for x in sys.stdin))')
pending=$(curl -s "$url/get_current_batch_rollout_pool_information" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["completed_episodes"])' 2>/dev/null || echo "?")
summary_b="B 2 replicas in network namespaces, replica 2 killed at step ${killed:-never}, replica 3 joined at step ${joined:-never}: $(quarters "$out/b_episodes.jsonl"); $steps_b steps in $secs_b s
   steps trained: $(grep -c 'step [0-9]* done: policy_version' "$out/b.log" || true), on 2 replicas: $(grep -c 'training on 2 replica' "$out/b.log" || true), of which the replicas held the same weights after: $(grep -c 'hold the same weights' "$out/b.log" || true), different: $(grep -c 'hold different weights' "$out/b.log" || true)
   group generations: $(grep -c 'replica group generation' "$out/b.log" || true); steps trained again after a replica died: $(grep -c 're-forming it and training the batch again' "$out/b.log" || true); batches not trained: $(grep -c 'was not trained' "$out/b.log" || true)
   episodes acknowledged to the agent: $acked; in the batches the front formed: $formed; in the unfinished batch: $pending"
echo "$summary_b"
if [ "$append" = 1 ]; then
  printf '\n## %s: the main task through engine replicas in network namespaces (bench/swarm/cluster_proof.sh)\n\n%s, %s episodes per run, tasks seed %s, commit %s. 2 cores: A'"'"'s engine has both; B'"'"'s two replicas share them (one thread each).\n\n```text\n%s\n%s\n```\n' \
    "$(date +%F)" "$conf" "$episodes" "$seed" "$(git rev-parse --short HEAD)" "$summary_a" "$summary_b" >> docs/benchmarks.md
fi
