"""Do the MuJoCo defaults follow `--num-envs`? `algos/ppo_vec.py` with nothing but the task, the
number of envs, the step budget and the seed on the command line, at 64, 256 and 1024 envs on a CPU,
each final policy evaluated on gymnasium's own env (10 deterministic episodes).

    python bench/mujoco_num_envs.py  # Hopper-v5 and Ant-v5, N 64/256/1024, seeds 1-2 (~40 min)
    python bench/mujoco_num_envs.py --envs Hopper-v5 --num-envs 256 --seeds 1 --steps 200000

Each run is its own process with one torch thread (OMP_NUM_THREADS=1), `--jobs` at a time (2 on
this 2-core machine: a run's seconds then include sharing the memory bus with the other).
The rollout the defaults choose at each N (`common.cli.rollout_shape`) is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "runs" / "num_envs"


def worker(argv: list[str], flags: list[str]) -> dict:
    """One run in this process (`--worker`): ppo_vec with `argv`, then its final policy on
    gymnasium's env."""
    import torch

    from algos import ppo_vec
    from common.cli import cli
    from tools.evaluate import gym_rollouts

    torch.set_num_threads(1)
    args = cli(ppo_vec.Args, argv=argv, defaults_for=ppo_vec.default_args)
    t = time.perf_counter()
    res = ppo_vec.main(args)
    wall = time.perf_counter() - t
    policy = ppo_vec.load_policy(res["checkpoint"])
    ref = gym_rollouts(policy, args.env, 10, seed=args.seed + 10_000)
    return dict(
        env=args.env, num_envs=args.num_envs, seed=args.seed, num_steps=args.num_steps,
        num_minibatches=args.num_minibatches, update_epochs=args.update_epochs,
        train_seconds=res["seconds"], wall=wall, steps=res["steps"], gym=ref["eval_return"],
        gym_std=ref["eval_return_std"], flags=flags,
    )  # fmt: skip


def one(env: str, n: int, seed: int, steps: int, flags: list[str]) -> dict:
    argv = [
        "--env", env, "--num-envs", str(n), "--seed", str(seed), "--total-steps", str(steps),
        "--device", "cpu", "--quiet", "--no-plots", "--eval-every", "0", "--save-every", "0",
        "--out-dir", str(OUT),
    ]  # fmt: skip
    env_vars = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="disabled")
    cmd = [sys.executable, __file__, "--worker", json.dumps([argv, flags])]
    p = subprocess.run(cmd, cwd=ROOT, env=env_vars, capture_output=True, text=True)
    line = next((l for l in p.stdout.splitlines() if l.startswith("RESULT ")), None)
    if line is None:
        raise SystemExit(f"run failed: {env} N={n} seed {seed}\n{p.stderr[-3000:]}")
    return json.loads(line[7:])


def table(rows: list[dict], steps: int) -> str:
    out = [
        "ppo_vec's MuJoCo defaults on a CPU at N envs (`python algos/ppo_vec.py --env TASK "
        "--num-envs N`, nothing else but the budget and the seed)",
        "",
        "| task | N | rollout (steps x N, minibatches x epochs) | gymnasium return, final policy "
        "(per seed) | mean | training s (mean) |",
        "|---|---:|---|---|---:|---:|",
    ]
    key = lambda r: (r["env"], r["num_envs"], " ".join(r.get("flags", [])))
    for k in sorted({key(r) for r in rows}):
        rs = sorted((r for r in rows if key(r) == k), key=lambda r: r["seed"])
        r0, n = rs[0], k[1]
        out.append(
            f"| {k[0]} | {n}{' ' + k[2] if k[2] else ''} | {r0['num_steps']} x {n} = "
            f"{r0['num_steps'] * n:,}, {r0['num_minibatches']} x {r0['update_epochs']} | "
            + ", ".join(f"{r['gym']:.0f} (seed {r['seed']})" for r in rs)
            + f" | {statistics.mean(r['gym'] for r in rs):.0f} "
            f"| {statistics.mean(r['train_seconds'] for r in rs):.0f} |"
        )
    return (
        "\n".join(out)
        + f"\n\n{steps:,} env steps each, one torch thread, final policy's gymnasium evaluation."
    )


def main() -> str | None:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", nargs="+", default=["Hopper-v5", "Ant-v5"])
    p.add_argument("--num-envs", type=int, nargs="+", default=[64, 256, 1024])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (default 2)")
    p.add_argument(
        "--flags", default="", help='more ppo_vec flags, one string: --flags="--num-steps 4"'
    )
    p.add_argument(
        "--log",
        default="bench/results/mujoco_num_envs.jsonl",
        help="JSON lines, one a run, appended (a later sweep into the same log keeps the earlier)",
    )
    p.add_argument("--from-log", action="store_true", help="no runs: the table of --log")
    p.add_argument("--worker", help=argparse.SUPPRESS)  # one run: JSON [ppo_vec argv, flags]
    a = p.parse_args()
    if a.worker:
        argv, flags = json.loads(a.worker)
        print("RESULT " + json.dumps(worker(argv + flags, flags)), flush=True)
        return
    log = ROOT / a.log
    if a.from_log:
        text = table([json.loads(l) for l in open(log)], a.steps)
        print(text)
        return text  # the whole log's table: the committed one
    todo = [(e, n, s) for e in a.envs for n in a.num_envs for s in a.seeds]
    t0 = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as f, ThreadPoolExecutor(a.jobs) as ex:
        rows = []
        for r in ex.map(lambda x: one(*x, a.steps, a.flags.split()), todo):
            print(json.dumps(r), flush=True)
            f.write(json.dumps(r) + "\n")
            f.flush()
            rows.append(r)
    text = (
        table(rows, a.steps) + f"\n\n{(time.perf_counter() - t0) / 60:.0f} min, {a.jobs} at a time"
    )
    print(text)
    return text


if __name__ == "__main__":
    from report import script  # bench/report.py (this script's folder is on sys.path)

    script(main, "mujoco_num_envs")
