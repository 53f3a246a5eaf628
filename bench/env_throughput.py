"""Env-steps/s of our torch CartPole-v1 vs gymnasium's SyncVectorEnv, side by side in one run.

Both step random actions with same-step autoreset; ours draws its actions on its device, gymnasium
gets numpy actions. Each cell runs for about `--seconds` of wall time after a warm-up.

    python bench/env_throughput.py --sizes 1 64 1024 4096 --ours-only 65536
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gymnasium as gym
import numpy as np
import torch

import envs


def _rate(step, n: int, seconds: float, sync=lambda: None) -> float:
    for _ in range(3):
        step()
    sync()
    steps, t0 = 0, time.perf_counter()
    while True:
        for _ in range(10):
            step()
        steps += 10
        sync()
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return steps * n / dt


def ours(n: int, seconds: float, device: str = "cpu") -> float:
    env = envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    env.reset(seed=0)
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    return _rate(lambda: env.step(torch.randint(0, 2, (n,), device=env.device)), n, seconds, sync)


def gymnasium_sync(n: int, seconds: float) -> float:
    env = gym.make_vec(
        "CartPole-v1",
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    rate = _rate(lambda: env.step(rng.integers(0, 2, n)), n, seconds)
    env.close()
    return rate


def main() -> str:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 1024, 4096])
    p.add_argument(
        "--ours-only", type=int, nargs="*", default=[65536], help="sizes measured for ours only"
    )
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    torch.set_num_threads(int(torch.get_num_threads()))
    lines = [
        f"CartPole-v1 env-steps/s, random actions, same-step autoreset, device {a.device}, "
        f"torch threads {torch.get_num_threads()}",
        "",
        "| N | ours (torch) | gymnasium SyncVectorEnv | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for n in a.sizes:
        o, g = ours(n, a.seconds, a.device), gymnasium_sync(n, a.seconds)
        lines.append(f"| {n:,} | {o:,.0f} | {g:,.0f} | {o / g:.1f}x |")
        print(lines[-1], flush=True)
    for n in a.ours_only:
        o = ours(n, a.seconds, a.device)
        lines.append(f"| {n:,} | {o:,.0f} | (not run) | |")
        print(lines[-1], flush=True)
    table = "\n".join(lines)
    print("\n" + table)
    return table


if __name__ == "__main__":
    from report import script  # bench/report.py (this script's folder is on sys.path)

    script(main, "envs")
