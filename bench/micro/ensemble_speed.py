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

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
from common.ensemble import EnsembleMLP  # noqa: E402
from micro.timing import machine, parser, publish, rate, script, synchronizer  # noqa: E402


def mlp(sizes: list[int]) -> nn.Sequential:
    layers = [m for a, b in zip(sizes, sizes[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
    return nn.Sequential(*layers[:-1])  # no ReLU after the last layer


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--out", default="bench/results/ensemble.md", help="the table's path")
    p.add_argument("--critics", type=int, default=10)
    p.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--in-dim", type=int, default=17 + 6, help="obs + action dims (HalfCheetah's)")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    sizes = [a.in_dim, *a.hidden, 1]
    critics = [mlp(sizes).to(dev) for _ in range(a.critics)]
    ens = EnsembleMLP.from_mlps(critics).to(dev)
    x, y = torch.randn(a.batch, a.in_dim, device=dev), torch.randn(a.batch, device=dev)
    opt_loop = torch.optim.Adam([p for c in critics for p in c.parameters()], lr=1e-4)
    opt_ens = torch.optim.Adam(ens.parameters(), lr=1e-4)

    def step(opt, loss):
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    def step_loop():
        step(opt_loop, sum((c(x).squeeze(-1) - y).square().mean() for c in critics))

    def step_ens():
        step(opt_ens, (ens(x).squeeze(-1) - y).square().mean(1).sum())

    sync = synchronizer(dev)
    loop, batched = (rate(s, a.seconds, warmup=5, sync=sync) for s in (step_loop, step_ens))
    lines = [
        f"{a.critics} critics {sizes}, batch {a.batch}, {a.device}, {a.threads} torch thread(s): "
        f"critic updates/s ({machine(a.device)})",
        "",
        "| Python loop over critics | one batched EnsembleMLP | ratio |",
        "|---:|---:|---:|",
        f"| {loop:,.0f} | {batched:,.0f} | {batched / loop:.2f}x |",
    ]
    publish("\n".join(lines), a.out)


if __name__ == "__main__":
    script(main)
