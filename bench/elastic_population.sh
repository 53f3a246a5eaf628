#!/usr/bin/env bash
# Elastic population on one machine: two torchrun "nodes" (agents) of 2 members each, c10d rendezvous,
# --nnodes 1:2. Node A starts alone; node B joins after A's first round (A's members are restarted by
# torchrun and resume from their checkpoints; B's members start); B is then SIGKILLed, agent and
# workers (a node lost); A's members finish the population. Prints the event timeline. ~6 minutes,
# of which up to 300 s is torchrun's own exit barrier waiting for the lost node.
#   Usage: bash bench/elastic_population.sh [DIR]          (PYTHON picks the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
DIR=${1:-runs/elastic_population}
PORT=$($PY -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
rm -rf "$DIR"; mkdir -p "$DIR"
# torch 2.13's c10d scale-up hangs in re-rendezvous when the agent shares its TCPStore with the workers
# (seen here with a plain sleep worker too; see the README): turn the sharing off, rank 0 hosts the store
export OMP_NUM_THREADS=1 TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1
RUN=(-m torch.distributed.run --nnodes 1:2 --nproc-per-node 2 --max-restarts 3 --rdzv-backend c10d
     --rdzv-endpoint "127.0.0.1:$PORT" --rdzv-id "elastic$PORT"
     -m population --dir "$DIR" --heartbeat-timeout 20 --rounds 4 --steps-per-round 40000
     -- --env CartPole-v1 --num-envs 128 --no-anneal-lr --save-every 8192)
log="$DIR/population.jsonl"
$PY "${RUN[@]}" > "$DIR/node_a.log" 2>&1 &
A=$!
for _ in $(seq 600); do grep -q '"event": "round"' "$log" 2>/dev/null && break; sleep 1; done
echo "$(date +%T) node B joins"
$PY "${RUN[@]}" > "$DIR/node_b.log" 2>&1 &
B=$!
for _ in $(seq 600); do grep -q '"node": "[^"]*/1"' "$log" 2>/dev/null && break; sleep 1; done
sleep 15
echo "$(date +%T) node B lost: SIGKILL to its agent ($B) and workers ($(pgrep -P $B | tr '\n' ' '))"
pkill -9 -P "$B" || true; kill -9 "$B" || true
set +e; wait "$A"; code=$?; set -e
echo "$(date +%T) node A's torchrun exited with $code"
$PY - "$log" bench/results/elastic.md <<'PYEOF'
import json, sys
events = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
t0 = events[0]["time"]
out = ["Elastic population, events in time order (node A = vm/0: members 0, 1; node B = vm/1: members 2, 3)",
       "", "| t (s) | event | member | round | step | node | detail |", "|---:|---|---:|---:|---:|---|---|"]
for e in events:
    if e["event"] in ("start", "round", "done", "left", "adopt"):
        detail = {"round": f"score {e.get('score')}", "adopt": f"from {e.get('source')}",
                  "left": f"gone {e.get('gone')}"}.get(e["event"], "resumed" if e.get("checkpoint") else "")
        out.append(f"| {e['time'] - t0:.0f} | {e['event']} | {e['member']} | {e.get('round', '')} | {e.get('step', '')} "
                   f"| {e.get('node', '')} | {detail} |")
print("\n" + "\n".join(out))
open(sys.argv[2], "w").write("\n".join(out) + "\n")
PYEOF
