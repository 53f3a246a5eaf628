#!/usr/bin/env bash
# Reproduces the benchmark tables and curves.   Usage: bash benchmark.sh [GROUP]   (default: quick; --help: this list)
#   quick         learning curves over 3 seeds (bench/run.py, rows in bench/experiments.py: PPO, DQN on CartPole; PPO, SAC, TD3, DDPG on
#                 Pendulum; PPO on Chasing-v0 and StockTrading-v0) + the StockTrading backtest + env
#                 throughput; tables and PNGs in bench/results/quick/ (10-16 min on a 2-core CPU)
#   full          the quick group's tasks at long budgets and on MuJoCo v5 (bench/run.py full), then the groups
#                 envs, ppo, asymmetric, ensemble, offpolicy, hterm, mujoco, mujoco-learn, marl, pipeline and
#                 population below (hours on a CPU; a GPU helps the PPO rows)
#   report GROUP  rebuild bench/results/GROUP/GROUP.md and its PNGs from the saved metrics, no training
#   (a group of bench/experiments.py trains only what is missing and resumes what was stopped part-way)
#   envs          env-steps/s of our torch CartPole vs gymnasium's SyncVectorEnv, N = 1 ... 4096 (+65536 ours)
#   ppo           algos/ppo_vec.py wall time to a deterministic eval >= 475 on CartPole-v1, 3 seeds
#   asymmetric    ppo_vec on noisy CartPole with and without a privileged critic group, seeds 1-3 (a few minutes)
#   ensemble      REDQ-style critic updates/s: one batched EnsembleMLP vs a Python loop over 10 critics
#   offpolicy     DDPG, TD3, SAC, ModSAC, REDQ on Pendulum-v1, 3 seeds, beside RL Zoo's scores (~10 min)
#   box2d         ppo_vec, sac, td3 on LunarLanderContinuous-v3 and BipedalWalker-v3 at RL Zoo's budgets, seeds 1-2
#                 (hours on a CPU; resumable)
#   mujoco-offpolicy  sac and td3 at 1M steps on Hopper, HalfCheetah, Walker2d, Ant, Humanoid v5, seeds 1-2
#                 (hours a run on a CPU core; resumable: run it again to go on)
#   hterm         H-term seed-variance study: PPO/SAC/TD3 vs their -H variants on Pendulum-v1, 8 seeds (~25 min)
#   mujoco        Ant-v5 env-steps/s: batch backend (1 and all threads), MuJoCo Warp, gymnasium sync, N = 64/1024/4096
#   mujoco-learn  PPO on Hopper-v5 with the CPU batch backend, 2M steps, evaluated on gymnasium's Hopper (~6 min)
#   mujoco-num-envs  ppo_vec's CPU defaults at --num-envs 64, 256 and 1024 on Hopper-v5 and Ant-v5, 1M steps,
#                 seeds 1-2, final policy on gymnasium's env: do the defaults follow N? (~40 min on 2 cores)
#   marl          MAPPO, QMIX, VDN, MADDPG, MATD3 on MPE simple_spread, 3 seeds, curves PNG (~30 min)
#   pipeline      SAC and TD3 on Pendulum-v1 with and without --pipeline: env-steps/s, ratio, overlap, returns
#   threads       two runs at once on a CPU: CartPole PPO and DQN, MinAtar PQN, Hopper PPO x64, each alone and two
#                 at once, with --threads auto and with torch's thread a core (~25 min on 2 cores)
#                 -> bench/results/threads.md
#   compile       --compile on vs off: PPO (CartPole-v1) and SAC (Pendulum-v1) env-steps/s, one thread, warm-up excluded
#   population    PPO population (tournament, generational; 4 learning rates) vs one run at equal env steps
#                 on Pendulum-v1, 2 seeds, curves PNG (~5 min on an idle 2-core machine)
#   elastic       population on two torchrun nodes (c10d, --nnodes 1:2): one joins late, then is SIGKILLed (~6 min)
#   hterm-hopper  the same study on Hopper-v5 (hours)
#   offpolicy-update  SAC's and TD3's env step + update on one core beside CleanRL's files (own venv
#                 bench/.venv-cleanrl; CLEANRL=path to a checkout of vwxyzjn/cleanrl) and beside the
#                 matrix-product floor of its FLOPs (~6 min) -> bench/results/offpolicy_update.md
#   locomotion-hopper, -halfcheetah, -walker2d, -ant, -humanoid
#                 ppo_vec (its MuJoCo defaults) beside rsl_rl (IsaacLab's classic PPO config, own venv
#                 bench/.venv-rslrl) on the same batched MuJoCo env, seeds 1-3, one core each, final eval on
#                 gymnasium's env; one group per task (budgets in bench/locomotion.py TASKS, each <= ~2 h)
#   locomotion-offpolicy-hopper, -halfcheetah, -ant
#                 fast_td3 and sac in the many-envs, large-batch regime on the same env, seeds 1-3, one core
#                 each, 150k env steps, budgets in bench/locomotion.py OFFPOLICY (~40 min per group);
#                 drawn on the PPO plots of the task
#   locomotion-adaptive-hopper, -halfcheetah
#                 ppo_vec with --lr-schedule adaptive (rsl_rl's KL rule) beside the groups above, seeds 1-3
#   locomotion-flagship  python algos/ppo_vec.py --env Ant --num-envs 4096 (GPU-sized defaults) on every core,
#                 10M steps, final eval on gymnasium's Ant (about 40 min on 2 cores)
#   locomotion-profile  where the time goes, ppo_vec vs rsl_rl on Ant and Humanoid (cProfile buckets:
#                 physics, env, policy, advantages, update; ~5 min) -> bench/results/locomotion/profile.md
#   locomotion    every locomotion-* group above, then the report (about 13 hours)
#   rllib         RLlib beside us (the seeds' peer): RLlib 2.60 PPO with the ray repository's MuJoCo settings
#                 (own venv bench/.venv-rllib, gymnasium's env) and ppo_vec at the same budget on Hopper-v5,
#                 Ant-v5 and Humanoid-v5 (1M steps), seeds 1-3, one core each (~1.5 h on 2 cores); also
#                 rllib-hopper, rllib-ant, rllib-humanoid; -> the RLlib section of locomotion.md and its PNGs
#   report locomotion   the locomotion table and PNGs from whatever tasks have run
#   gpu           one CUDA GPU (bench/gpu.py): Ant/Humanoid env-steps/s on MuJoCo Warp at N = 1024/4096/16384
#                 vs the CPU batch backend; ppo_vec end to end (Ant x4096 captured as CUDA graphs, eager and
#                 compiled; Ant x16384; Humanoid x4096 captured and eager, x16384), time to eval >= 3000 / 5000;
#                 rsl_rl on the same Warp envs and shapes; PPO CartPole at 65536 envs; a torch.profiler look at
#                 ppo_vec's Ant iteration (GPU busy, launches); fast_td3 on Ant x4096, its updates captured and eager
#                 (~90 min on an H200; without a GPU it says so and exits 0); table in bench/results/gpu.md
#   tensordict    the peers table's PPO and PQN rows with their storage as TensorDict instead of Batch (a dict):
#                 env-steps/s, one thread (own venv bench/.venv-td: the project's venv plus tensordict; ~10 min)
#   peers         Stable-Baselines3 (RL Zoo settings, own venv bench/.venv-peers) vs each file's defaults, 1 thread
#                 each, held-out seeds 11-15, each side its whole budget: training seconds to a stable solve (every
#                 eval from there on, the final policy's included, >= 475 on CartPole-v1 (PPO; DQN and PQN vs SB3's
#                 DQN), >= -200 on Pendulum-v1 (SAC, TD3)), the final policies, the first hits (~60-80 min)
#   minatar     MinAtar from pixels: env-steps/s of our batched port vs the minatar package (N = 1, 64, 4096),
#                 then pqn and ppo_vec with their MinAtar rows on the five games, 1M steps, seeds 1-3, curves vs
#                 env steps and seconds (~2 h, one run at a time) -> bench/results/minatar.md, minatar_learn.{md,png}
#   atari       pqn and ppo_vec on ALE Pong and Breakout (CleanRL's / the PQN paper's settings, 10M frames,
#                 seed 1; hours a run on a CPU: meant for a GPU machine) -> bench/results/atari_learn.{md,png}
#                 (a run made by hand, resumed across sessions: python bench/minatar_learn.py --atari
#                 --add-run RUN_DIR --note "...")
# Tables are printed and written to bench/results/ (GROUP.md and GROUP.log; quick, full and locomotion in their own
# folders, as the groups of bench/experiments.py); a run that fails leaves the committed ones as they were.
# Interpreter: $PYTHON if set, else the project's .venv/bin/python (README's set-up), else python on PATH.
set -euo pipefail
cd "$(dirname "$0")"
group=${1:-quick}
case "$group" in -h|--help|help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;; esac
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python; fi
$PY -c "import torch" 2>/dev/null || { echo "benchmark.sh: '$PY' cannot import torch: set the project up first (README: python3 -m venv .venv && .venv/bin/pip install -r requirements.txt) or set PYTHON=/path/to/its/python" >&2; exit 2; }
mkdir -p bench/results
table() {  # table NAME SCRIPT ARGS... : run, keep the log, keep the table (from its title line) as NAME.md
  local name=$1; shift
  $PY "$@" | tee "bench/results/$name.log.tmp"  # a failed run stops here (pipefail): the old log stays
  mv "bench/results/$name.log.tmp" "bench/results/$name.log"
  extract "$name"
}
extract() {  # extract NAME : bench/results/NAME.log's table, from its title line, as NAME.md
  $PY - "$1" <<'PYEOF'
import sys, pathlib
name = sys.argv[1]
lines = pathlib.Path(f"bench/results/{name}.log").read_text().splitlines()
first = next(i for i, l in enumerate(lines) if l.startswith("|"))
start = first - 2 if first >= 2 and not lines[first - 1].strip() else first
pathlib.Path(f"bench/results/{name}.md").write_text("\n".join(lines[start:]) + "\n")
PYEOF
}
case "$group" in
  envs)      table envs bench/env_throughput.py ;;
  ppo)       table ppo bench/ppo_time_to_threshold.py ;;
  ensemble)  table ensemble bench/ensemble_speed.py ;;
  offpolicy|box2d|mujoco-offpolicy|hterm|hterm-hopper|marl|asymmetric) $PY bench/run.py "$group" --python "$PY" ;;
  mujoco)    table mujoco bench/mujoco_throughput.py ;;
  mujoco-learn) table mujoco-learn bench/mujoco_learning.py --env Hopper-v5 --steps 2000000 --num-envs 64 \
                  --num-steps 64 --num-minibatches 16 --update-epochs 10 ;;
  mujoco-num-envs) table mujoco_num_envs bench/mujoco_num_envs.py ;;
  pipeline)  table pipeline bench/pipeline.py ;;
  population) table population bench/population.py ;;
  compile)   table compile bench/compile_speed.py ;;
  threads)   $PY bench/threads.py ;;  # writes bench/results/threads.md itself
  gpu)       $PY bench/gpu.py ;;
  peers)     table peers bench/peers.py ;;
  minatar)   $PY bench/minatar_speed.py && $PY bench/minatar_learn.py ;;  # write their own tables
  atari)     $PY bench/minatar_learn.py --atari --steps 2500000 --eval-every 250000 ;;
  tensordict)  # tensordict is not a project dependency: its own venv, on top of the project's packages
             if [ ! -x bench/.venv-td/bin/python ]; then
               $PY -m venv bench/.venv-td
               $PY -c "import site; print(site.getsitepackages()[0])" > "$(bench/.venv-td/bin/python -c "import site; print(site.getsitepackages()[0])")/project.pth"
               bench/.venv-td/bin/pip install -q --disable-pip-version-check --no-deps tensordict==0.15.3 pyvers==0.2.3
             fi
             PY=bench/.venv-td/bin/python table tensordict bench/tensordict_overhead.py ;;
  elastic)   PYTHON=$PY bash bench/elastic_population.sh | tee bench/results/elastic.log.tmp
             mv bench/results/elastic.log.tmp bench/results/elastic.log; extract elastic ;;
  quick|full)
             $PY bench/run.py "$group" --jobs 2 --python "$PY"
             $PY bench/stock_trading.py --from-group "$group" | tee "bench/results/$group/stock_trading.log.tmp"
             mv "bench/results/$group/stock_trading.log.tmp" "bench/results/$group/stock_trading.log"
             if [ "$group" = quick ]; then table envs bench/env_throughput.py; fi
             if [ "$group" = full ]; then
               for g in envs ppo asymmetric ensemble offpolicy hterm mujoco mujoco-learn marl pipeline population; do
                 bash "$0" "$g"
               done
             fi ;;
  locomotion-hopper|locomotion-halfcheetah|locomotion-walker2d|locomotion-ant|locomotion-humanoid)
             $PY bench/locomotion.py run "${group#locomotion-}" ;;
  locomotion-offpolicy-hopper|locomotion-offpolicy-halfcheetah|locomotion-offpolicy-ant)
             $PY bench/locomotion.py run "${group#locomotion-offpolicy-}" --sides fast_td3 sac ;;
  locomotion-adaptive-hopper|locomotion-adaptive-halfcheetah)
             $PY bench/locomotion.py run "${group#locomotion-adaptive-}" --sides adaptive ;;
  locomotion-flagship) $PY bench/locomotion.py flagship ;;
  rllib-hopper|rllib-ant|rllib-humanoid)
             $PY bench/locomotion.py run "${group#rllib-}" --sides rllib ours_budget ;;
  rllib)     for t in hopper ant humanoid; do bash "$0" "rllib-$t"; done ;;
  locomotion-profile) for t in Ant Humanoid; do $PY bench/locomotion_profile.py --task "$t"; done ;;
  locomotion) for t in hopper halfcheetah walker2d ant humanoid offpolicy-hopper offpolicy-halfcheetah offpolicy-ant flagship profile; do
               bash "$0" "locomotion-$t"; done ;;
  report)    case "${2:-}" in
               locomotion) $PY bench/locomotion.py report ;;
               minatar) $PY bench/minatar_learn.py --from-log bench/results/minatar_learn.jsonl ;;
               atari) $PY bench/minatar_learn.py --atari --from-log bench/results/atari_learn.jsonl ;;
               *) $PY bench/report.py "${2:?usage: bash benchmark.sh report GROUP}" ;;
             esac ;;
  offpolicy-update) $PY bench/offpolicy_update.py --cleanrl "${CLEANRL:?set CLEANRL to a checkout of vwxyzjn/cleanrl}" ;;
  *) echo "unknown group '$group': use quick, full, report, peers, tensordict, compile, envs, ppo, asymmetric, ensemble, offpolicy, hterm, mujoco, mujoco-learn, mujoco-num-envs, marl, pipeline, population, threads, elastic, hterm-hopper, box2d, mujoco-offpolicy, offpolicy-update, locomotion, locomotion-TASK, locomotion-offpolicy-TASK, locomotion-adaptive-TASK, locomotion-flagship, locomotion-profile, rllib, rllib-TASK or gpu (bash benchmark.sh --help says what each runs)" >&2; exit 2 ;;
esac
echo; echo "results in bench/results/"
