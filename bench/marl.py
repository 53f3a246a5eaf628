"""The multi-agent algorithms on MPE simple_spread, over seeds: final return, wall time, curves.

Each algorithm runs at the settings of its learning test (`CONFIGS`, with a longer budget), on the
torch-native `simple_spread` (discrete actions for MAPPO/QMIX/VDN, continuous for MADDPG/MATD3).
Metric: mean episode return (sum over the 25 steps of the mean over agents of the reward) of the
final deterministic policy over `--episodes` evaluation episodes, then mean +- std over seeds.
A uniform-random policy is measured the same way.

    python bench/marl.py --algos mappo qmix vdn maddpg matd3 --seeds 1 2 3 --jobs 2
"""

from __future__ import annotations

import argparse
import csv
import importlib
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np
import torch

# settings per algorithm: those of its learning test in tests/ (MADDPG/MATD3 with a longer budget)
_COMMON = dict(env="simple_spread", eval_every=0, eval_episodes=100)
CONFIGS: dict[str, dict] = {
    "mappo": dict(
        _COMMON,
        num_envs=64,
        num_steps=25,
        num_minibatches=4,
        update_epochs=10,
        hidden=(128, 128),
        total_steps=600_000,
    ),
    "vdn": dict(_COMMON, total_steps=150_000),
    "qmix": dict(_COMMON, total_steps=100_000, gamma=0.95),
    "maddpg": dict(_COMMON, num_envs=16, total_steps=150_000),
    "matd3": dict(_COMMON, num_envs=16, total_steps=150_000),
}
CONTINUOUS = {"maddpg", "matd3"}  # trained on simple_spread with continuous_actions=True


def random_return(continuous: bool, episodes: int, seed: int) -> float:
    from common.evaluate import ma_evaluate

    gen = torch.Generator().manual_seed(seed)

    def policy(obs, info):
        n, a = obs.shape[:2]
        if continuous:
            return torch.rand(n, a, 5, generator=gen)
        return torch.randint(0, 5, (n, a), generator=gen)

    return ma_evaluate(
        policy, "simple_spread", episodes=episodes, seed=seed, continuous_actions=continuous
    )["eval_return"]


def run_one(job):
    algo, seed, scale, threads, out = job
    torch.set_num_threads(threads)
    module = importlib.import_module(f"algos.{algo}")
    kw = dict(CONFIGS[algo])
    kw["total_steps"] = int(kw["total_steps"] * scale)
    kw.update(seed=seed, quiet=True, save_every=0)
    r = module.main(module.Args(out_dir=out, **kw))
    with open(Path(r["run_dir"]) / "metrics.csv") as f:
        rows = [row for row in csv.DictReader(f) if row.get("return")]
    curve = [
        (float(row["step"]), float(row["return"]))
        for row in rows
        if row["return"] not in ("", "nan")
    ]
    return algo, seed, r["eval_return"], r["seconds"], curve


def plot(results, algos, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for algo in algos:
        curves = [r[4] for r in results if r[0] == algo and r[4]]
        if not curves:
            continue
        grid = np.linspace(0, min(c[-1][0] for c in curves), 50)
        ys = np.array([np.interp(grid, [p[0] for p in c], [p[1] for p in c]) for c in curves])
        m, s = ys.mean(0), ys.std(0)
        ax.plot(grid, m, label=algo)
        ax.fill_between(grid, m - s, m + s, alpha=0.2)
    ax.set_xlabel("environment steps (summed over worlds)")
    ax.set_ylabel("training episode return (mean over agents)")
    ax.set_title("MPE simple_spread: mean +- std over seeds")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> str:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", nargs="+", default=list(CONFIGS))
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument(
        "--scale", type=float, default=1.0, help="multiplies each algorithm's step budget"
    )
    p.add_argument("--jobs", type=int, default=2, help="runs in parallel, one torch thread each")
    p.add_argument("--episodes", type=int, default=100, help="random-policy evaluation episodes")
    p.add_argument("--png", default="bench/results/marl_simple_spread.png")
    a = p.parse_args()
    unknown = [x for x in a.algos if x not in CONFIGS]
    if unknown:
        p.error(f"unknown algorithm(s) {unknown}; choose from {sorted(CONFIGS)}")
    with tempfile.TemporaryDirectory() as out:
        jobs = [(algo, s, a.scale, 1, out) for algo in a.algos for s in a.seeds]
        with ProcessPoolExecutor(a.jobs) as pool:
            results = list(pool.map(run_one, jobs))
    rnd = {c: random_return(c, a.episodes, seed=123) for c in (False, True)}
    lines = [
        f"MPE simple_spread (3 agents, 25-step episodes): final deterministic policy, mean +- std "
        f"over seeds {a.seeds}; 1 torch thread per run, {a.jobs} runs in parallel",
        "",
        "| algorithm | actions | env steps | final return | wall s / run |",
        "|---|---|---:|---:|---:|",
    ]
    for algo in a.algos:
        rs = np.array([r[2] for r in results if r[0] == algo])
        ts = np.array([r[3] for r in results if r[0] == algo])
        cont = algo in CONTINUOUS
        steps = int(CONFIGS[algo]["total_steps"] * a.scale)
        lines.append(
            f"| {algo} | {'continuous' if cont else 'discrete'} | {steps:,} | "
            f"{rs.mean():.2f} +- {rs.std():.2f} | {ts.mean():.0f} |"
        )
        print(algo, rs.round(2).tolist(), flush=True)
    lines += [
        "",
        f"Uniform-random policy ({a.episodes} episodes): discrete {rnd[False]:.2f}, "
        f"continuous {rnd[True]:.2f}. Curves: {Path(a.png).name}.",
    ]
    plot(results, a.algos, a.png)
    table = "\n".join(lines)
    print("\n" + table)
    return table


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
