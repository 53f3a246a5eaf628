"""Does PPO learn on the batched MuJoCo envs (CPU `batch` backend)? A stated budget, one table, a
curve.

Runs `algos/ppo_vec.py` with its MuJoCo defaults (`MUJOCO_DEFAULTS`) scaled to a CPU (fewer envs,
a longer horizon), then evaluates the deterministic policy on gymnasium's own `<Task>-v5` (the
reference simulator, not ours) and a uniform-random policy the same way.

    python bench/mujoco_learning.py --env Hopper-v5 --steps 3000000 --seeds 1
"""

from __future__ import annotations

import argparse
import shutil
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np

from algos import ppo_vec
from tools.evaluate import gym_rollouts


def random_return(env_id: str, episodes: int, seed: int) -> tuple[float, float]:
    env = gym.make(env_id)
    space = env.action_space
    rets = []
    for ep in range(episodes):
        env.reset(seed=seed + ep)
        space.seed(seed + ep)
        total, done = 0.0, False
        while not done:
            _, r, term, trunc, _ = env.step(space.sample())
            total += r
            done = term or trunc
        rets.append(total)
    return float(np.mean(rets)), float(np.std(rets))


def main() -> str:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--steps", type=int, default=3_000_000)
    p.add_argument("--num-envs", type=int, default=256)
    p.add_argument("--num-steps", type=int, default=32)
    p.add_argument("--num-minibatches", type=int, default=4)
    p.add_argument("--update-epochs", type=int, default=5)
    p.add_argument("--seeds", type=int, nargs="+", default=[1])
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--out", default="bench/results")
    a = p.parse_args()
    rnd, rnd_std = random_return(a.env, a.episodes, seed=10_000)
    rows = []
    for seed in a.seeds:
        args = replace(
            ppo_vec.default_args(a.env),
            num_envs=a.num_envs,
            num_steps=a.num_steps,
            seed=seed,
            num_minibatches=a.num_minibatches,
            update_epochs=a.update_epochs,
            total_steps=a.steps,
            eval_every=a.steps // 6,
            save_every=0,
            quiet=True,
            out_dir="runs/bench-mujoco",
            mujoco_backend="batch",
        )
        res = ppo_vec.main(args)
        policy = ppo_vec.load_policy(res["checkpoint"])
        ref = gym_rollouts(policy, a.env, a.episodes, seed=20_000)
        png = Path(a.out) / f"mujoco_{a.env.split('-')[0].lower()}_ppo_seed{seed}.png"
        shutil.copy(Path(res["run_dir"]) / "curves.png", png)
        rows.append((seed, res, ref, png))
    lines = [
        f"# PPO on {a.env}: batched CPU env (`batch` backend), {a.steps:,} steps, "
        f"{a.num_envs} envs x {a.num_steps} steps per rollout, {a.num_minibatches} minibatches x "
        f"{a.update_epochs} epochs",
        "",
        "| seed | eval on our env | eval on gymnasium's env | wall time | env-steps/s | curve |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for seed, res, ref, png in rows:
        lines.append(
            f"| {seed} | {res['eval_return']:.1f} ± {res['eval_return_std']:.1f} | "
            f"{ref['eval_return']:.1f} ± {ref['eval_return_std']:.1f} | {res['seconds']:.0f} s | "
            f"{res['steps'] / res['seconds']:,.0f} | {png.name} |"
        )
    lines += [
        "",
        f"Uniform-random policy on gymnasium's {a.env}: {rnd:.1f} ± {rnd_std:.1f} "
        f"({a.episodes} episodes). Evaluations: deterministic policy, {a.episodes} episodes.",
    ]
    out = "\n".join(lines)
    print(out)
    return out


if __name__ == "__main__":
    from report import script  # bench/report.py (this script's folder is on sys.path)

    script(main, "mujoco-learn")
