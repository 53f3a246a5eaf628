"""Env-steps/s of our torch CartPole-v1 vs gymnasium's SyncVectorEnv, side by side in one run.

Both step random actions with same-step autoreset; ours draws its actions on its device, gymnasium
gets numpy actions. Each cell runs for about `--seconds` of wall time after a warm-up.

    python bench/micro/env_throughput.py --sizes 1 64 1024 4096 --ours-only 65536
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

# the repository and bench/
sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]
import envs  # noqa: E402
from micro.timing import parser, rate, script, synchronizer  # noqa: E402


def ours(n: int, seconds: float, device: str = "cpu") -> float:
    env = envs.make("CartPole-v1", num_envs=n, device=device, seed=0)
    env.reset(seed=0)
    sync = synchronizer(env.device)
    return n * rate(
        lambda: env.step(torch.randint(0, 2, (n,), device=env.device)), seconds, sync=sync
    )


def gymnasium_sync(n: int, seconds: float) -> float:
    env = gym.make_vec(
        "CartPole-v1",
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    steps = n * rate(lambda: env.step(rng.integers(0, 2, n)), seconds)
    env.close()
    return steps


def main() -> str:
    p = parser(__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 1024, 4096])
    p.add_argument(
        "--ours-only", type=int, nargs="*", default=[65536], help="sizes measured for ours only"
    )
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
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
    script(main, "envs")
