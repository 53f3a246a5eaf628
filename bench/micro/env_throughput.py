"""Env-steps/s of our torch CartPole-v1 vs gymnasium's SyncVectorEnv, side by side in one run.

Both step random actions with same-step autoreset; ours draws its actions on its device, gymnasium
gets numpy actions. Each cell runs for about `--seconds` of wall time after a warm-up.

    python bench/micro/env_throughput.py --sizes 1 64 1024 4096 --ours-only 65536
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
import envs  # noqa: E402
from micro.timing import env_rate, gym_rate, machine, parser, publish, script  # noqa: E402


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--out", default="bench/results/envs.md", help="the table's path")
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 1024, 4096])
    p.add_argument("--ours-only", type=int, nargs="*", default=[65536], help="sizes of ours alone")
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    lines = [
        f"CartPole-v1 env-steps/s, random actions, same-step autoreset, device {a.device}, "
        f"torch threads {torch.get_num_threads()} ({machine(a.device)})",
        "",
        "| N | ours (torch) | gymnasium SyncVectorEnv | ratio |",
        "|---:|---:|---:|---:|",
    ]
    for i, n in enumerate([*a.sizes, *a.ours_only]):
        env = envs.make("CartPole-v1", num_envs=n, device=a.device, seed=0)
        o = env_rate(env, a.seconds)
        if i < len(a.sizes):
            g = gym_rate("CartPole-v1", n, a.seconds)
            lines.append(f"| {n:,} | {o:,.0f} | {g:,.0f} | {o / g:.1f}x |")
        else:
            lines.append(f"| {n:,} | {o:,.0f} | (not run) | |")
        print(lines[-1], flush=True)
    publish("\n".join(lines), a.out)


if __name__ == "__main__":
    script(main)
