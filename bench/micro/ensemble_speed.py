"""Learner parallelism: REDQ-style critic updates (10 critics) as one batched `EnsembleMLP` vs a
Python loop over the same 10 critics as separate `nn.Sequential` MLPs, side by side.

Each update: forward all critics on a batch of (s, a), squared error to a target, backward, Adam.
    python bench/micro/ensemble_speed.py --critics 10 --hidden 256 256 --batch 256
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn as nn

# the repository and bench/
sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]
from common.ensemble import EnsembleMLP  # noqa: E402
from micro.timing import parser, rate, script, synchronizer  # noqa: E402


def mlp(sizes):
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def main() -> str:
    p = parser(__doc__)
    p.add_argument("--critics", type=int, default=10)
    p.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument(
        "--in-dim", type=int, default=17 + 6, help="obs + action dims (default: HalfCheetah's)"
    )
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    sync = synchronizer(dev)
    sizes = [a.in_dim, *a.hidden, 1]
    loop_critics = [mlp(sizes).to(dev) for _ in range(a.critics)]
    ens = EnsembleMLP.from_mlps(loop_critics).to(dev)
    x = torch.randn(a.batch, a.in_dim, device=dev)
    y = torch.randn(a.batch, device=dev)
    opt_loop = torch.optim.Adam([p for c in loop_critics for p in c.parameters()], lr=1e-4)
    opt_ens = torch.optim.Adam(ens.parameters(), lr=1e-4)

    def step_loop():
        loss = sum((c(x).squeeze(-1) - y).square().mean() for c in loop_critics)
        opt_loop.zero_grad(set_to_none=True)
        loss.backward()
        opt_loop.step()

    def step_ens():
        loss = (ens(x).squeeze(-1) - y).square().mean(1).sum()
        opt_ens.zero_grad(set_to_none=True)
        loss.backward()
        opt_ens.step()

    r_loop, r_ens = (rate(step, a.seconds, warmup=5, sync=sync) for step in (step_loop, step_ens))
    lines = [
        f"{a.critics} critics {sizes}, batch {a.batch}, {a.device}, {a.threads} torch thread(s): "
        f"critic updates/s",
        "",
        "| Python loop over critics | one batched EnsembleMLP | ratio |",
        "|---:|---:|---:|",
        f"| {r_loop:,.0f} | {r_ens:,.0f} | {r_ens / r_loop:.2f}x |",
    ]
    table = "\n".join(lines)
    print(table)
    return table


if __name__ == "__main__":
    script(main, "ensemble")
