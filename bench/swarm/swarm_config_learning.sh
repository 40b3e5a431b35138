#!/usr/bin/env bash
# Does a swarm server config make the model learn with the example agents? Starts ajet-swarm with
# CONFIG (default examples/configs/swarm_calc.yaml: the warmed-up tiny model of scripts/run.sh), runs
# examples/python_agent on generated calc tasks judged by `ajet tasks judge` (docs/examples.md), and
# prints the mean reward of each eighth of the episodes in the order they finished: with a config that
# learns it climbs, with one that does not it stays flat (issue 39: upstream's lr 1e-6 + KL loss).
#   bench/swarm/swarm_config_learning.sh [--no-append] [CONFIG] [EPISODES=512]   (AJET_BENCH_SEED: the tasks' seed, 3)
# Needs build/bin/{ajet,ajet-swarm,ajet-engine} and the model the config names. Outputs: exp/bench/.
# It appends its run to docs/benchmarks.md unless --no-append; a comparison takes several runs (docs/benchmarks.md,
# "Swarm example configs", ran it for both configs over AJET_BENCH_SEED 1-3 with 1024 episodes).
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$here"
append=1
if [ "${1:-}" = "--no-append" ]; then append=0; shift; fi
conf="${1:-examples/configs/swarm_calc.yaml}" episodes="${2:-512}" port="${AJET_BENCH_PORT:-10187}"
out="exp/bench/swarm_learning/$(basename "$conf" .yaml)-$(date +%Y%m%d_%H%M%S)"
mkdir -p "$out"
build/bin/ajet-swarm start --port "$port" --exp-dir "$out/swarm" > "$out/swarm.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
url="http://127.0.0.1:$port"
PYTHONPATH=clients/python python3 -m ajet_swarm --swarm-url "$url" start --conf "$conf" > "$out/start.log" 2>&1
t0=$(date +%s)
python3 examples/python_agent/agent.py --swarm-url "$url" --ajet build/bin/ajet --generate 256 --seed "${AJET_BENCH_SEED:-3}" \
  --episodes "$episodes" --repeat 4 --parallel 16 > "$out/episodes.jsonl"
echo "swarm_config_learning: $conf, $episodes episodes in $(( $(date +%s) - t0 )) s ($out)"
summary=$(python3 - "$out/episodes.jsonl" <<'PY'
import json, sys
rewards = [json.loads(l)["reward"] for l in open(sys.argv[1]) if l.startswith("{") and '"reward"' in l]
n = len(rewards) // 8
means = [sum(rewards[i * n:(i + 1) * n]) / n for i in range(8)]
print(f"mean reward by eighth of {len(rewards)} episodes: " + " ".join(f"{m:.3f}" for m in means))
q = len(rewards) // 4
first, last = sum(rewards[:q]) / q, sum(rewards[-q:]) / q
print(f"first quarter -> last quarter: {first:.3f} -> {last:.3f} ({last - first:+.3f})")
PY
)
summary="$summary
training steps (batches the front formed): $(grep -c 'batch [0-9]* ready' "$out/swarm.log" || true)"
echo "$summary"
if [ "$append" = 1 ]; then
  printf '\n## %s: swarm config learning, one run (bench/swarm/swarm_config_learning.sh)\n\n%s, %s episodes, tasks seed %s.\n\n```text\n%s\n```\n' \
    "$(date +%F)" "$conf" "$episodes" "${AJET_BENCH_SEED:-3}" "$summary" >> docs/benchmarks.md
fi
