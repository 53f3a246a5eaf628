#!/usr/bin/env bash
# Reproduces the benchmark tables. Usage: bash benchmark.sh [quick|envs|ppo]   (default: quick)
#   envs  - env-steps/s of our torch CartPole vs gymnasium's SyncVectorEnv at N = 1 ... 4096 (+65536 ours)
#   ppo   - algos/ppo_vec.py wall time to a deterministic eval >= 475 on CartPole-v1, 3 seeds
#   quick - both (a few minutes on a laptop CPU)
# Tables are printed and written to bench/results/<group>.md. Set PYTHON to pick the interpreter.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python}
group=${1:-quick}
mkdir -p bench/results
run_envs() { $PY bench/env_throughput.py "$@" | tee bench/results/envs.log; sed -n '/^CartPole-v1 env-steps/,$p' bench/results/envs.log > bench/results/envs.md; }
run_ppo()  { $PY bench/ppo_time_to_threshold.py "$@" | tee bench/results/ppo.log; sed -n '/^ppo_vec defaults/,$p' bench/results/ppo.log > bench/results/ppo.md; }
case "$group" in
  envs)  run_envs ;;
  ppo)   run_ppo ;;
  quick) run_envs; run_ppo ;;
  *) echo "unknown group '$group': use quick, envs or ppo" >&2; exit 2 ;;
esac
echo; echo "results in bench/results/"
