"""`--compile` on vs off: training env-steps/s of PPO (CartPole-v1, the file's default settings) and
SAC (Pendulum-v1, 4 envs, hidden (128, 128)), side by side, one torch thread, a process a run.

    python bench/micro/compile_speed.py            # both algorithms, compile off and on
    python bench/micro/compile_speed.py --algos ppo_vec --steps-scale 0.5

The warm-up is left out: every algorithm file restarts the Logger's sps clock after its second
iteration that ran updates (`Logger.burn_in`; SAC: the second one past `learning_starts`), after
every compilation, and `Logger.paused` leaves evaluation out. The figure is the steady-state rate
from there, sum(steps) / sum(steps / sps) over those rows of `metrics.jsonl`; "outside s" is the
rest of the run's wall time (compilation, first iteration, SAC's random steps, final evaluation,
process set-up; shorter where inductor's on-disk cache is warm, the steady state the same).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
from micro.timing import children, machine, measured, parser, publish, script  # noqa: E402

# algorithm: (env, Args fields, the table's setting, the env step at which the sps clock restarts)
CASES = {
    "ppo_vec": ("CartPole-v1", dict(total_steps=1_200_000),
                "CartPole-v1, default settings (1024 envs x 16 steps), 1.2M steps",
                1024 * 16),  # after the first iteration
    "sac": ("Pendulum-v1", dict(num_envs=4, hidden=(128, 128), total_steps=10_000),
            "Pendulum-v1, 4 envs, hidden (128, 128), 10k steps (learning from 2k, 4 updates per "
            "vectorized step)",
            2000 + 4),  # after the second iteration that learned
}  # fmt: skip


def one(algo: str, compile_: bool, scale: float) -> dict:
    """A run in this process (a child of `main`), its metrics.jsonl summarized."""
    import importlib

    import torch

    torch.set_num_threads(1)
    module = importlib.import_module(f"algos.{algo}")
    env, fields, _, warm_step = CASES[algo]
    fields = dict(fields, total_steps=int(fields["total_steps"] * scale), env=env, compile=compile_)
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        r = module.main(measured(module.Args(), out_dir=out, **fields))
        wall = time.perf_counter() - t0
        rows = [json.loads(line) for line in open(Path(r["run_dir"]) / "metrics.jsonl")]
    steps = secs = 0.0
    for prev, row in zip(rows, rows[1:]):  # the intervals from the restart of the sps clock on
        if prev["step"] >= warm_step and math.isfinite(row["sps"]) and row["sps"] > 0:
            steps += row["step"] - prev["step"]
            secs += (row["step"] - prev["step"]) / row["sps"]
    sps = steps / secs if secs else float("nan")
    return dict(algo=algo, compile=compile_, sps=sps, measured_s=secs, wall=wall,
                warmup=wall - secs, eval=r["eval_return"])  # fmt: skip


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--out", default="bench/results/compile.md", help="the table's path")
    p.add_argument("--algos", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--steps-scale", type=float, default=1.0, help="multiply every run's steps")
    p.add_argument("--one", nargs=2, metavar=("ALGO", "COMPILE"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:  # a child of the run below
        print(json.dumps(one(a.one[0], a.one[1] == "1", a.steps_scale)))
        return
    lines = [
        f"## --compile on vs off ({machine()}, CPU, one torch thread, warm-up excluded)",
        "",
        "| algorithm | setting | compile | env-steps/s | speed-up | outside s | wall s "
        "| final eval return |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for algo in a.algos:
        off = None
        for compile_ in (0, 1):
            print(f"running {algo} compile={bool(compile_)} ...", flush=True)
            cmd = [__file__, "--one", algo, str(compile_), "--steps-scale", str(a.steps_scale)]
            (r,) = children([sys.executable, *cmd], env={"OMP_NUM_THREADS": "1"})
            print(f"  {r}", flush=True)
            off = off or r
            lines.append(
                f"| {algo} | {CASES[algo][2]} | {'on' if compile_ else 'off'} | {r['sps']:,.0f} "
                f"| {r['sps'] / off['sps']:.2f}x | {r['warmup']:.1f} | {r['wall']:.1f} "
                f"| {r['eval']:.1f} |"
            )
    lines += [
        "",
        "env-steps/s: steady state after the first updates (see the module docstring); outside s: "
        "wall time outside the measured intervals (compilation, first iteration, random steps "
        "before learning_starts, final eval).",
    ]
    publish("\n".join(lines), a.out)


if __name__ == "__main__":
    script(main)
