"""Ant-v5 env-steps/s: our batched env on each backend vs gymnasium's sync vector env, one run.

Rows: `batch` (mujoco.batch on 1 and on all available CPU threads), `warp` (MuJoCo Warp; on Warp's
CPU device unless CUDA is present), gymnasium `make_vec(..., vectorization_mode="sync")`. Every
cell steps uniform random actions with same-step autoreset for about `--seconds` after a warm-up
(Warp's one-off kernel compilation is excluded). Ratios are against gymnasium at the same N.

    python bench/mujoco_throughput.py --sizes 64 1024 4096
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
from common.device import available_cores


def _rate(step, n: int, seconds: float, sync=lambda: None, min_steps: int = 3) -> float:
    step()
    sync()
    steps, t0 = 0, time.perf_counter()
    while True:
        step()
        steps += 1
        sync()
        dt = time.perf_counter() - t0
        if dt >= seconds and steps >= min_steps:
            return steps * n / dt


def ours(
    env_id: str, n: int, seconds: float, backend: str, nthread: int | None = None, device="cpu"
) -> float:
    env = envs.make(env_id, num_envs=n, device=device, seed=0, backend=backend, nthread=nthread)
    env.reset(seed=0)
    shape = (n, *env.single_action_space.shape)
    sync = torch.cuda.synchronize if env.device.type == "cuda" else (lambda: None)
    gen = torch.Generator(device=env.device).manual_seed(0)
    return _rate(
        lambda: env.step(torch.rand(shape, device=env.device, generator=gen) * 2 - 1),
        n,
        seconds,
        sync,
    )


def gymnasium_sync(env_id: str, n: int, seconds: float) -> float:
    env = gym.make_vec(
        env_id,
        num_envs=n,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP},
    )
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    shape = env.action_space.shape
    rate = _rate(lambda: env.step(rng.uniform(-1, 1, shape)), n, seconds)
    env.close()
    return rate


def main() -> str:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="Ant-v5")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 1024, 4096])
    p.add_argument("--seconds", type=float, default=5.0, help="measuring time per cell")
    p.add_argument("--no-warp", action="store_true", help="skip MuJoCo Warp (e.g. not installed)")
    p.add_argument(
        "--warp-max", type=int, default=4096, help="largest N measured for warp on a CPU"
    )
    a = p.parse_args()
    cores = available_cores()
    cuda = torch.cuda.is_available()
    rows = [("batch, 1 thread", lambda n: ours(a.env, n, a.seconds, "batch", 1))]
    if cores > 1:
        rows.append(
            (f"batch, {cores} threads", lambda n: ours(a.env, n, a.seconds, "batch", cores))
        )
    if not a.no_warp:
        where = "CUDA" if cuda else "Warp CPU device"
        rows.append(
            (
                f"warp ({where})",
                lambda n: (
                    ours(a.env, n, a.seconds, "warp", device="cuda" if cuda else "cpu")
                    if cuda or n <= a.warp_max
                    else float("nan")
                ),
            )
        )
        # compile the kernels once, untimed
        ours(a.env, 2, 0.0, "warp", device="cuda" if cuda else "cpu")
    rows.append(("gymnasium make_vec sync", lambda n: gymnasium_sync(a.env, n, a.seconds)))
    results = {name: [fn(n) for n in a.sizes] for name, fn in rows}
    ref = results["gymnasium make_vec sync"]
    lines = [
        f"# {a.env} env-steps/s (random actions, same-step autoreset; {cores} CPU cores"
        f"{', CUDA' if cuda else ', no GPU'})",
        "",
        "| backend | " + " | ".join(f"N={n}" for n in a.sizes) + " |",
        "|---|" + "---:|" * len(a.sizes),
    ]
    for name, vals in results.items():
        cells = [f"{v:,.0f} ({v / r:.1f}x)" if v == v else "-" for v, r in zip(vals, ref)]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Ratios (in parentheses) are against gymnasium's sync vector env at the same N, measured "
        "in the same run.",
    ]
    out = "\n".join(lines)
    print(out)
    return out


if __name__ == "__main__":
    from report import script  # bench/report.py (this script's folder is on sys.path)

    script(main, "mujoco")
