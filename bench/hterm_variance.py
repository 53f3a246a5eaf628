"""Seed-variance study of the H-term: PPO vs PPO-H, SAC vs SAC-H, TD3 vs TD3-H on Pendulum-v1,
8 seeds each at equal environment steps. Reports, per algorithm, the mean and the std across seeds
of the final deterministic evaluation (10 episodes), the mean wall time, and writes one PNG per
pair with the 8 evaluation curves of each side.

    python bench/hterm_variance.py --pairs ppo sac td3 --seeds 1 2 3 4 5 6 7 8 --jobs 2
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np

# the same settings as the learning tests of each parent (tests/conftest.py,
# tests/test_learning_offpolicy.py)
SETTINGS = {
    "ppo": dict(
        num_envs=64,
        num_steps=64,
        num_minibatches=32,
        update_epochs=10,
        learning_rate=1e-3,
        gamma=0.9,
        norm_reward=True,
        total_steps=150_000,
    ),
    "sac": dict(num_envs=4, hidden=(128, 128), total_steps=10_000),
    "td3": dict(num_envs=4, hidden=(128, 128), total_steps=12_000),
}
# the longer optional group (through the gymnasium adapter; needs `pip install mujoco`): common
# MuJoCo settings (CleanRL's continuous PPO; SAC/TD3 as in their papers), 1M / 300k steps
HOPPER = {
    "ppo": dict(
        num_envs=16,
        num_steps=128,
        num_minibatches=32,
        update_epochs=10,
        learning_rate=3e-4,
        gamma=0.99,
        norm_obs=True,
        norm_reward=True,
        total_steps=1_000_000,
    ),
    "sac": dict(num_envs=1, gradient_steps=1, learning_starts=5_000, total_steps=300_000),
    "td3": dict(num_envs=1, gradient_steps=1, learning_starts=25_000, total_steps=300_000),
}
FILES = {"ppo": ("ppo_vec", "ppo_h"), "sac": ("sac", "sac_h"), "td3": ("td3", "td3_h")}


def run_one(job):
    algo, pair, seed, env = job
    import torch

    torch.set_num_threads(1)
    module = importlib.import_module(f"algos.{algo}")
    kw = dict(
        (HOPPER if env.startswith("Hopper") else SETTINGS)[pair],
        env=env,
        seed=seed,
        save_every=0,
        quiet=True,
    )
    kw["eval_every"] = kw["total_steps"] // 5
    with tempfile.TemporaryDirectory() as out:
        r = module.main(module.Args(out_dir=out, **kw))
        rows = [json.loads(line) for line in open(Path(r["run_dir"]) / "metrics.jsonl")]
    curve = [(row["step"], row["eval_return"]) for row in rows if "eval_return" in row]
    share = max((row.get("h_term_time_share", 0.0) for row in rows), default=0.0)
    return algo, seed, r["eval_return"], r["seconds"], curve, share


def plot(pair: str, results, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, algo in zip(axes, FILES[pair]):
        for a, seed, final, secs, curve, _ in results:
            if a == algo and curve:
                s, v = zip(*curve)
                ax.plot(s, v, alpha=0.7, label=f"seed {seed}")
        ax.set_title(algo)
        ax.set_xlabel("environment steps")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("deterministic eval return (10 episodes)")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> str:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="Pendulum-v1")
    p.add_argument("--pairs", nargs="+", default=["ppo", "sac", "td3"], choices=list(FILES))
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 9)))
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = p.parse_args()
    jobs = [(algo, pair, s, a.env) for pair in a.pairs for algo in FILES[pair] for s in a.seeds]
    with ProcessPoolExecutor(a.jobs) as pool:
        results = list(pool.map(run_one, jobs))
    Path(a.out).mkdir(parents=True, exist_ok=True)
    lines = [
        f"{a.env}: H-term seed-variance study, {len(a.seeds)} seeds, final policy's deterministic "
        f"10-episode eval; each pair at its parent's test settings and equal steps; 1 torch thread "
        f"per run, {a.jobs} in parallel",
        "",
        "| algorithm | steps | mean | std across seeds | worst seed | mean wall s "
        "| H-term time share |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for pair in a.pairs:
        for algo in FILES[pair]:
            rs = [r for r in results if r[0] == algo]
            f = np.array([r[2] for r in rs])
            steps = (HOPPER if a.env.startswith("Hopper") else SETTINGS)[pair]["total_steps"]
            lines.append(
                f"| {algo} | {steps:,} | {f.mean():.1f} | {f.std():.1f} | {f.min():.1f} | "
                f"{np.mean([r[3] for r in rs]):.0f} | {np.mean([r[5] for r in rs]):.0%} |"
            )
            print(algo, f.round(1).tolist(), flush=True)
        plot(pair, results, Path(a.out) / f"hterm_{a.env.split('-')[0].lower()}_{pair}.png")
    table = "\n".join(lines)
    print("\n" + table)
    return table


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
