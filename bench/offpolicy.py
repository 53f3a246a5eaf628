"""Final deterministic evaluation of the off-policy family on Pendulum-v1 (or another env), over
seeds, with RL Baselines3 Zoo's published scores beside ours.

Metric (ours): mean return of 10 deterministic evaluation episodes of the final policy, then mean
+- std over seeds. RL Zoo's: one trained agent, deterministic evaluation over ~150k steps, +- over
episodes (its benchmark.md), at its own training budget.

    python bench/offpolicy.py --algos ddpg td3 sac modsac redq --seeds 1 2 3 --jobs 2
"""

from __future__ import annotations

import argparse
import importlib
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np

# RL Baselines3 Zoo benchmark.md (deterministic eval of one agent; training budget in brackets)
RL_ZOO = {
    "Pendulum-v1": {
        "ppo_vec": "-172.2 +- 104.2 (100k)",
        "sac": "-157.0 +- 88.7 (20k)",
        "td3": "-151.9 +- 90.2 (20k)",
    },
    "LunarLanderContinuous-v3": {
        "sac": "260.4 +- 65.5 (500k, v2)",
        "td3": "207.5 +- 67.6 (300k, v2)",
    },
    "BipedalWalker-v3": {"sac": "297.7 +- 33.1 (500k)", "td3": "306.0 +- 56.9 (1M)"},
}


def run_one(job):
    algo, seed, env, steps, hidden, threads = job
    import torch

    torch.set_num_threads(threads)
    module = importlib.import_module(f"algos.{algo}")
    kw = dict(env=env, seed=seed, total_steps=steps, eval_every=0, save_every=0, quiet=True)
    if hidden:
        kw["hidden"] = tuple(hidden)
    # as in tests/test_learning_offpolicy.py: small ensemble members, early start
    if algo == "redq":
        kw.update(batch_size=128, learning_starts=1_000)
    with tempfile.TemporaryDirectory() as out:
        r = module.main(module.Args(out_dir=out, **kw))
    return algo, seed, r["eval_return"], r["seconds"]


def main() -> str:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="Pendulum-v1")
    p.add_argument("--algos", nargs="+", default=["ddpg", "td3", "sac", "modsac", "redq"])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument(
        "--steps", type=int, default=10_000, help="env steps per run (redq: half, learning from 1k)"
    )
    p.add_argument(
        "--hidden", type=int, nargs="*", default=[128, 128], help="hidden sizes (redq: half width)"
    )
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel, one torch thread each")
    a = p.parse_args()
    jobs = []
    for algo in a.algos:
        hidden = [h // 2 for h in a.hidden] if algo == "redq" and a.hidden else a.hidden
        steps = a.steps // 2 if algo == "redq" else a.steps
        jobs += [(algo, s, a.env, steps, hidden, 1) for s in a.seeds]
    with ProcessPoolExecutor(a.jobs) as pool:
        results = list(pool.map(run_one, jobs))
    ref = RL_ZOO.get(a.env, {})
    lines = [
        f"{a.env}: final policy, 10 deterministic eval episodes, mean +- std over seeds {a.seeds}; "
        f"{a.steps:,} env steps (REDQ {a.steps // 2:,}, learning from step 1,000), hidden "
        f"{tuple(a.hidden)} (REDQ half width), 1 torch thread per run, {a.jobs} runs in parallel",
        "",
        "| algorithm | eval return | wall s / run | RL Zoo (deterministic eval, budget) |",
        "|---|---:|---:|---|",
    ]
    for algo in a.algos:
        rs = np.array([r[2] for r in results if r[0] == algo])
        ts = np.array([r[3] for r in results if r[0] == algo])
        lines.append(
            f"| {algo} | {rs.mean():.1f} +- {rs.std():.1f} | {ts.mean():.0f} "
            f"| {ref.get(algo, '')} |"
        )
        print(algo, rs.round(1).tolist(), flush=True)
    table = "\n".join(lines)
    print("\n" + table)
    return table


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
