"""Ant-v5 env-steps/s: our batched env on each backend vs gymnasium's sync vector env, one run.

Rows: `batch` (mujoco.batch on 1 and on all available CPU threads), `warp` (MuJoCo Warp; on Warp's
CPU device unless CUDA is present), gymnasium `make_vec(..., vectorization_mode="sync")`. Every
cell steps uniform random actions with same-step autoreset for about `--seconds` after a warm-up
(Warp's one-off kernel compilation is excluded). Ratios are against gymnasium at the same N.

    python bench/micro/mujoco_throughput.py --sizes 64 1024 4096
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
from common.device import available_cores  # noqa: E402
from micro.timing import parser, rate, script, synchronizer  # noqa: E402

# a step can take long (a large N): timed one at a time after one untimed, at least three
ONE_AT_A_TIME = dict(warmup=1, chunk=1, min_calls=3)


def ours(
    env_id: str, n: int, seconds: float, backend: str, nthread: int | None = None, device="cpu"
) -> float:
    env = envs.make(env_id, num_envs=n, device=device, seed=0, backend=backend, nthread=nthread)
    env.reset(seed=0)
    shape = (n, *env.single_action_space.shape)
    gen = torch.Generator(device=env.device).manual_seed(0)
    sync = synchronizer(env.device)

    def step():
        env.step(torch.rand(shape, device=env.device, generator=gen) * 2 - 1)

    return n * rate(step, seconds, sync=sync, **ONE_AT_A_TIME)


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
    steps = n * rate(lambda: env.step(rng.uniform(-1, 1, shape)), seconds, **ONE_AT_A_TIME)
    env.close()
    return steps


def main() -> str:
    p = parser(__doc__)
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
    script(main, "mujoco")
