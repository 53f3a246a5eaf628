"""`--compile` on vs off: training env-steps/s of PPO (CartPole-v1, the file's default settings) and
SAC (Pendulum-v1, 4 envs, hidden (128, 128)), side by side, one torch thread.

Each run is its own process (fresh torch, same seed) and runs `main(Args(...))` of the algorithm
file. The compile warm-up is excluded like this: every algorithm file restarts the Logger's sps
clock after its second iteration that ran updates (`Logger.burn_in`; SAC: the second one past
`learning_starts`), so every compilation happens before it, and evaluation time is left out by
`Logger.paused`. The figure here is the steady-state rate over the logged intervals after that
point, sum(steps) / sum(steps / sps) over the rows of `metrics.jsonl` whose interval starts there or
later. "outside s" is the wall time of the run minus that measured interval time: the compilation
with --compile, the first iteration, the random-action phase before `learning_starts` (SAC), the
final evaluation and process set-up. A later `--compile` run may find inductor's on-disk cache warm
(shorter warm-up), which does not change the steady-state rate.

    python bench/micro/compile_speed.py            # both algorithms, compile off and on
    python bench/micro/compile_speed.py --algos ppo_vec --steps-scale 0.5
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the repository and bench/
sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]
from micro.timing import parser, script  # noqa: E402

CASES = {  # algorithm -> (env, Args fields, description, env step at which the sps clock restarts)
    "ppo_vec": (
        "CartPole-v1",
        dict(total_steps=1_200_000),
        "CartPole-v1, default settings (1024 envs x 16 steps), 1.2M steps",
        1024 * 16,
    ),  # after the first iteration
    "sac": (
        "Pendulum-v1",
        dict(num_envs=4, hidden=(128, 128), total_steps=10_000),
        "Pendulum-v1, 4 envs, hidden (128, 128), 10k steps (learning from 2k, 4 updates per "
        "vectorized step)",
        2000 + 4,
    ),  # after the second iteration that learned
}


def one(algo: str, compile_: bool, scale: float) -> dict:
    """Run in this process (a child of `main`): train, and summarize metrics.jsonl."""
    import importlib

    import torch

    torch.set_num_threads(1)
    module = importlib.import_module(f"algos.{algo}")
    env, fields, _, warm_step = CASES[algo]
    fields = dict(fields, total_steps=int(fields["total_steps"] * scale), env=env, seed=1)
    fields.update(eval_every=0, save_every=0, quiet=True, compile=compile_)
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        r = module.main(module.Args(out_dir=out, **fields))
        wall = time.perf_counter() - t0
        rows = [json.loads(line) for line in open(Path(r["run_dir"]) / "metrics.jsonl")]
    steps = secs = 0.0
    # the intervals that start at or after the restart of the sps clock
    for prev, row in zip(rows, rows[1:]):
        if prev["step"] >= warm_step and math.isfinite(row["sps"]) and row["sps"] > 0:
            steps += row["step"] - prev["step"]
            secs += (row["step"] - prev["step"]) / row["sps"]
    return dict(
        algo=algo,
        compile=compile_,
        sps=steps / secs if secs else float("nan"),
        measured_steps=steps,
        measured_s=secs,
        wall=wall,
        warmup=wall - secs,
        eval=r["eval_return"],
        steps=r["steps"],
    )


def main() -> str | None:
    p = parser(__doc__)
    p.add_argument("--algos", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument(
        "--steps-scale", type=float, default=1.0, help="multiply every run's total steps"
    )
    p.add_argument("--one", nargs=2, metavar=("ALGO", "COMPILE"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        print("RESULT " + json.dumps(one(a.one[0], a.one[1] == "1", a.steps_scale)), flush=True)
        return
    env, scale = dict(os.environ, OMP_NUM_THREADS="1"), ["--steps-scale", str(a.steps_scale)]
    results = []
    for algo in a.algos:
        for compile_ in (False, True):
            print(f"running {algo} compile={compile_} ...", flush=True)
            child = [sys.executable, __file__, "--one", algo, str(int(compile_)), *scale]
            proc = subprocess.run(child, env=env, capture_output=True, text=True)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode or line is None:
                sys.exit(
                    f"{algo} compile={compile_} "
                    f"failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
                )
            results.append(json.loads(line[len("RESULT ") :]))
            print(f"  {results[-1]}", flush=True)
    import torch

    lines = [
        f"## --compile on vs off (torch {torch.__version__}, CPU, one torch thread, warm-up "
        "excluded)",
        "",
        "| algorithm | setting | compile | env-steps/s | speed-up | outside s | wall s "
        "| final eval return |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        base = next(x for x in results if x["algo"] == r["algo"] and not x["compile"])
        lines.append(
            f"| {r['algo']} | {CASES[r['algo']][2]} | {'on' if r['compile'] else 'off'} "
            f"| {r['sps']:,.0f} | {r['sps'] / base['sps']:.2f}x | {r['warmup']:.1f} "
            f"| {r['wall']:.1f} | {r['eval']:.1f} |"
        )
    lines += [
        "",
        "env-steps/s: steady state after the first updates (see the module docstring); "
        "outside s: wall time outside the measured intervals (compilation, first iteration, "
        "random steps before learning_starts, final eval).",
    ]
    print("\n" + "\n".join(lines))
    return "\n".join(lines)


if __name__ == "__main__":
    script(main, "compile")
