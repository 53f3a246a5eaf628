#!/usr/bin/env bash
# The GPU tier and the GPU benchmark on a lent, bare GPU machine (issue 19), in as few calls as the lease allows.
#
#   bash bench/gpu_lease.sh STAGE [STAGE ...]
#
# The machine has python3 with CUDA torch, pytest and numpy, but none of gymnasium, tyro, mujoco, MuJoCo Warp or
# rsl_rl, and nothing can be fetched there: `bench/gpu_wheels.sh` (run here) puts them in .whl/ (git-ignored), which
# the calls carry. warp-lang's wheel (150 MB) is over one call's 64 MiB, so its library travels xz-compressed
# (78 MB) and split over two calls: the first carries .whl/a (part 0 of warp.so.xz and the wheels the core tests
# need), the second .whl/b (part 1, MuJoCo, MuJoCo Warp's Python side) on the still-warm machine; each call stashes
# the parts it carries in /root/warp and installs its wheels in /tmp/site, and the library is assembled once the
# parts' checksum (warp.so.xz.sha256) matches. A machine given back in between loses both: start again at .whl/a.
#
# Stages (each capped by `timeout`; logs and results land in $OUT, at most 8 files):
#   cuda-core   pytest -m "cuda and not slow" without MuJoCo Warp (classic envs, loops, guard, resume, PER, NCCL)
#   cuda-warp   pytest -m cuda, the MuJoCo Warp cases (graph == eager, no sync, parity with gymnasium, resume)
#   cuda-slow   pytest -m "cuda and slow", the rest (--compile with CUDA graphs, population on the GPU; $SLOW_K: -k)
#   cuda-graphs pytest -m cuda tests/test_graphs.py: the captured PPO iteration and fast_td3's captured updates
#               against eager, the guard inside it, and (once .whl/b is in) its replay on MuJoCo Warp; $GRAPHS_K: -k
#   minatar     bench/micro/minatar_speed.py on CUDA: the five games at 4,096 and 65,536 sub-envs against the minatar
#               package (issue 58; needs .whl/b) -> bench/results/gpu/minatar.md
#   pqn-minatar algos/pqn.py on MinAtar Breakout with its row (the PQN paper's MinAtar settings) on CUDA, 10M steps
#               or the cap; its metrics come back in the archive (bench/runs/gpu)
#   pqn-pong    algos/pqn.py on ALE/Pong-v5 with the PQN paper's Atari settings (bench/experiments.py's ATARI),
#               2.5M env steps (10M frames: issue 58's +18 target) or the cap; ale-py's vector env on every core;
#               $ATARI_FILE (pqn, ppo_vec, dqn) and $ATARI_GAME (Pong, Breakout, ...) run another file or game
#   env         bench/micro/mujoco_throughput.py: Ant and Humanoid env-steps/s on MuJoCo Warp (CUDA) and the CPU batch
#               backend at 1,024 / 4,096 / 16,384 envs -> bench/results/gpu/env.md ($SECONDS_PER_CELL, default 3)
#   profile     bench/micro/gpu_profile.py: where a PPO iteration's time goes on Ant x4096 -> bench/results/gpu/profile.md
#   ppo-ant | ppo-ant-eager | ppo-ant-compile | ppo-ant-16k | ppo-ant-adaptive | ppo-humanoid | ppo-humanoid-eager |
#   ppo-humanoid-16k | ppo-humanoid-adaptive | rsl_rl | rsl_rl-16k | rsl_rl-humanoid | rsl_rl-humanoid-16k | cartpole |
#   td3-ant | td3-ant-eager
#               a row of the benchmark's gpu group (bench/experiments.py; `row_of` below: ppo-ant-eager is
#               Ant-v5:ppo_vec-eager, rsl_rl-humanoid Humanoid-v5:rsl_rl, td3-ant Ant-v5:fast_td3, cartpole
#               CartPole-v1:ppo_vec): `bench/run.py gpu --only ENV:LABEL --max-seconds CAP-45`, which stops the run
#               with Ctrl-C and copies its metrics into bench/results/gpu/runs; the next call of the stage on the same
#               warm machine resumes it from its checkpoint (rsl_rl starts again). A row with a result is skipped, the
#               history migrated from bench/gpu.py included: FORCE=1 trains it again from scratch.
#   offpolicy   the mujoco-offpolicy group's rows (sac and td3 at CleanRL's 1M-step setting, issue 79) for
#               $OFFPOLICY_ENVS (default Hopper-v5 HalfCheetah-v5), seeds 1 and 2: all eight runs at once on the card
#               (slow: see offpolicy-gpu; the rows are complete from CPU runs, so it trains nothing without FORCE)
#               (device auto: CUDA, MuJoCo Warp with .whl/b, else the batch backend), capped like the rows above;
#               a later call on the warm machine resumes each from its checkpoint
#   offpolicy-update bench/micro/offpolicy_update.py --device cuda: SAC's and TD3's env step plus update at CleanRL's
#               setting, a step's updates captured as one CUDA graph beside eager -> bench/results/gpu/offpolicy_update.md
#   offpolicy-gpu sac and td3 with their MuJoCo task defaults (the 1M-step rows) on $OFFPOLICY_ENVS, seed 1, all at once
#               on the card (one host thread each), capped: their speed eight at a time (the tenth lease: 78-99 env
#               steps/s each, the processes time-slicing the GPU; one sac alone: 539) and the curves so far, in
#               bench/runs/gpu-offpolicy (the archive); needs only MuJoCo: carry .whl/c (bench/gpu_wheels.sh)
# LIST=1 prints the bench stages' commands (the runner's with --list) and runs nothing, installs nothing.
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
SITE=${SITE:-/tmp/site}
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 WANDB_MODE=disabled PYTEST_INSTAFAIL=1
PY=${PY:-python3}

setup() {
  local d w
  mkdir -p /root/warp
  for d in .whl/*/; do  # .whl/a, .whl/b: what each call carried (bench/gpu_wheels.sh)
    [ -d "$d" ] || continue
    cp -n "$d"warp.so.xz.part-* /root/warp/ 2>/dev/null
    [ -f "$d"warp.so.xz.sha256 ] && cp "$d"warp.so.xz.sha256 /root/warp/
    for w in "$d"*.whl; do
      [ -f "$w" ] && [ ! -f "$SITE/.installed-$(basename "$w")" ] || continue
      $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE "$w" \
        && touch "$SITE/.installed-$(basename "$w")"
    done
    if [ ! -f $SITE/.warp_py ] && [ -f "$d"warp_py.tar.xz ]; then
      $PY -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter='data')" "$d"warp_py.tar.xz $SITE \
        && touch $SITE/.warp_py
    fi
  done
  if [ ! -f $SITE/warp/bin/warp.so ] && [ -f /root/warp/warp.so.xz.sha256 ] && [ -f $SITE/.warp_py ]; then
    if (cd /root/warp && cat warp.so.xz.part-* | sha256sum | cut -d' ' -f1 | cmp -s - warp.so.xz.sha256); then
      cat /root/warp/warp.so.xz.part-* | $PY -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)" > $SITE/warp/bin/warp.so.tmp && mv $SITE/warp/bin/warp.so.tmp $SITE/warp/bin/warp.so
    else
      echo "warp: $(ls /root/warp | grep -c part-) part(s) of warp.so here, not all yet"
    fi
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY - <<'EOF'
import importlib.util, torch
print("torch", torch.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
for m in ("gymnasium", "tyro", "mujoco", "warp", "mujoco_warp", "rsl_rl", "tensordict", "minatar", "ale_py", "pynvml"):
    print(m, "yes" if importlib.util.find_spec(m) else "MISSING", end="; ")
print()
EOF
}

WARP_K="warp or Ant or Hopper or Humanoid"
pytest_stage() {  # name, seconds, pytest args...
  local name=$1 secs=$2; shift 2
  echo "== $name (cap ${secs}s) $(date +%T)"
  timeout -s INT "$secs" $PY -m pytest -n 0 -p no:cacheprovider -v -rfEs --durations=15 "$@" > "$OUT/pytest_$name.log" 2>&1
  echo "exit $?"; tail -n 25 "$OUT/pytest_$name.log"
}

row_of() {  # a training stage's row of the gpu group (bench/experiments.py), ENV:LABEL
  case $1 in
    ppo-ant|ppo-humanoid) echo "${1#ppo-}:ppo_vec" ;;
    ppo-ant-*) echo "ant:ppo_vec-${1#ppo-ant-}" ;;
    ppo-humanoid-*) echo "humanoid:ppo_vec-${1#ppo-humanoid-}" ;;
    rsl_rl|rsl_rl-16k) echo "ant:${1}" ;;
    rsl_rl-humanoid*) echo "humanoid:rsl_rl${1#rsl_rl-humanoid}" ;;
    td3-ant*) echo "ant:fast_td3${1#td3-ant}" ;;
    cartpole) echo "CartPole-v1:ppo_vec" ;;
  esac | sed 's/^ant:/Ant-v5:/; s/^humanoid:/Humanoid-v5:/'
}

bench_stage() {  # stage, seconds
  local stage=$1 secs=$2 cmd
  case $stage in
    env) cmd="bench/micro/mujoco_throughput.py --env Ant-v5 Humanoid-v5 --sizes 1024 4096 16384 --backends batch warp
                --device cuda --seconds ${SECONDS_PER_CELL:-3} --out bench/results/gpu/env.md" ;;
    profile) cmd="bench/micro/gpu_profile.py" ;;
    offpolicy) cmd="bench/run.py mujoco-offpolicy --only ${OFFPOLICY_ENVS:-Hopper-v5 HalfCheetah-v5} --jobs 8
                     --max-seconds $((secs - 45)) ${FORCE:+--force} ${LIST:+--list}" ;;
    # the runner stops the run 45 s before the cap (Ctrl-C) and keeps what it logged
    *) cmd="bench/run.py gpu --only $(row_of "$stage") --jobs 1 --max-seconds $((secs - 45)) ${FORCE:+--force} ${LIST:+--list}" ;;
  esac
  echo "== bench $stage (cap ${secs}s) $(date +%T): $cmd" | tr -s ' \n' ' '; echo
  [ -n "${LIST:-}" ] && [[ $stage == env || $stage == profile ]] && return
  # shellcheck disable=SC2086
  timeout -s INT "$secs" $PY $cmd > "$OUT/bench_$stage.log" 2>&1
  echo "exit $?"; grep -v "^| \|^$\|^- \|^!\[" "$OUT/bench_$stage.log" | tail -n 8  # not the report it reprints
}

BENCH="env ppo-ant ppo-ant-eager ppo-ant-compile ppo-ant-16k ppo-humanoid ppo-humanoid-eager ppo-humanoid-16k
  ppo-ant-adaptive ppo-humanoid-adaptive rsl_rl
  rsl_rl-16k rsl_rl-humanoid rsl_rl-humanoid-16k cartpole profile td3-ant td3-ant-eager offpolicy"
STAGES="cuda-core cuda-warp cuda-slow cuda-graphs minatar pqn-minatar pqn-pong offpolicy-update offpolicy-gpu $(echo $BENCH)"  # one line: a stage matches between spaces
[ $# -gt 0 ] || { echo "usage: bash bench/gpu_lease.sh STAGE [STAGE ...]; stages: $STAGES" >&2; exit 2; }
for stage in "$@"; do  # every stage checked before anything is installed or run
  [[ " $STAGES " == *" $stage "* ]] || { echo "unknown stage '$stage': use one of $STAGES" >&2; exit 2; }
done
[ -n "${LIST:-}" ] || setup
for stage in "$@"; do
  [ -z "${LIST:-}" ] || [[ " $(echo $BENCH) " == *" $stage "* ]] || { echo "== $stage: not listed (LIST)"; continue; }
  case $stage in
    cuda-core) pytest_stage core "${CAP_core:-240}" -m "cuda and not slow" tests/test_cuda.py tests/test_per.py -k "not ($WARP_K)" ;;
    cuda-warp) pytest_stage warp "${CAP_warp:-240}" -m cuda tests/test_cuda.py tests/test_mujoco_parity.py \
                 -k "$WARP_K or deferred" ;;
    cuda-slow) pytest_stage slow "${CAP_slow:-300}" -m "cuda and slow" tests/ -k "${SLOW_K:-not ($WARP_K)}" ;;
    minatar) echo "== minatar (cap ${CAP_minatar:-120}s) $(date +%T)"
             timeout -s INT "${CAP_minatar:-120}" $PY bench/micro/minatar_speed.py --device cuda --num-envs 4096 65536 \
               --seconds 2 --out bench/results/gpu/minatar.md > "$OUT/minatar.log" 2>&1
             echo "exit $?"; tail -n 9 "$OUT/minatar.log" ;;
    pqn-minatar) echo "== pqn-minatar (cap ${CAP_pqn_minatar:-200}s) $(date +%T)"
             timeout -s INT "${CAP_pqn_minatar:-200}" $PY algos/pqn.py --env MinAtar/Breakout-v1 --device cuda \
               --total-steps 10000000 --eval-every 500000 --save-every 0 --quiet --no-plots \
               --out-dir bench/runs/gpu > "$OUT/pqn_minatar.log" 2>&1
             echo "exit $?"; tail -n 5 "$OUT/pqn_minatar.log" ;;
    pqn-pong) f=${ATARI_FILE:-pqn} g=${ATARI_GAME:-Pong}
             echo "== pqn-pong: $f on ALE/$g-v5 (cap ${CAP_pqn_pong:-300}s) $(date +%T)"
             flags=$($PY -c "import sys; sys.path.insert(0, 'bench'); from experiments import ATARI, flags; print(' '.join(flags(ATARI['$f'])))")
             # shellcheck disable=SC2086
             timeout -s INT "${CAP_pqn_pong:-300}" $PY "algos/$f.py" --env "ALE/$g-v5" --device cuda $flags \
               --total-steps "${STEPS_pqn_pong:-2500000}" --eval-every 500000 --save-every 0 --quiet --no-plots \
               --out-dir bench/runs/gpu > "$OUT/pqn_pong.log" 2>&1
             echo "exit $?"; tail -n 5 "$OUT/pqn_pong.log" ;;
    offpolicy-update) echo "== offpolicy-update (cap ${CAP_offpolicy_update:-240}s) $(date +%T)"
             timeout -s INT "${CAP_offpolicy_update:-240}" $PY bench/micro/offpolicy_update.py --device cuda \
               --repeats "${REPEATS:-1}" --algos ${ALGOS:-sac td3} > "$OUT/offpolicy_update.log" 2>&1
             echo "exit $?"; tail -n 8 "$OUT/offpolicy_update.log" ;;
    offpolicy-gpu) cap=${CAP_offpolicy_gpu:-240}; echo "== offpolicy-gpu (cap ${cap}s) $(date +%T)"
             mkdir -p bench/runs/gpu-offpolicy
             for env in ${OFFPOLICY_ENVS:-Hopper-v5 HalfCheetah-v5 Walker2d-v5 Ant-v5}; do
               for algo in sac td3; do
                 timeout -s INT "$cap" $PY "algos/$algo.py" --env "$env" --seed 1 --device cuda --mujoco-backend batch --threads 1 --quiet \
                   --no-plots --out-dir "bench/runs/gpu-offpolicy/${env}__$algo" \
                   > "bench/runs/gpu-offpolicy/${env}__$algo.log" 2>&1 &
               done
             done
             wait; echo "exit $?"; tail -qn 2 bench/runs/gpu-offpolicy/*.log | cut -c1-200
             for f in bench/runs/gpu-offpolicy/*/*/metrics.jsonl; do echo "$f: $(tail -n 1 "$f" | cut -c1-90)"; done ;;
    cuda-graphs) pytest_stage graphs "${CAP_graphs:-150}" -m cuda tests/test_graphs.py ${GRAPHS_K:+-k "$GRAPHS_K"} ;;
    *) v="CAP_${stage//-/_}"; bench_stage "$stage" "${!v:-300}" ;;
  esac
done
[ -z "${LIST:-}" ] || exit 0
# results and the runs' metrics come back as one archive (the reply brings at most 8 files)
tar -czf "$OUT/gpu_results.tgz" bench/results/gpu $(ls -d bench/results/mujoco-offpolicy bench/runs/gpu/*/metrics.jsonl \
  bench/runs/gpu-offpolicy/*.log bench/runs/gpu-offpolicy/*/*/metrics.jsonl 2>/dev/null) 2>/dev/null
# the gpu group's table rows (bench/results/gpu/gpu.md; the runs capped by a lease end at their last evaluation)
$PY bench/run.py report gpu 2>&1 | grep -E "^\| (Ant|Humanoid|CartPole)" | cut -c1-400
