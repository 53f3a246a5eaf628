"""MuJoCo env-steps/s: our batched env on each backend vs gymnasium's sync vector env, one run.

Rows (`--backends`): `batch1` and `batch` (mujoco.batch on 1 and on all available CPU threads),
`warp` (MuJoCo Warp on `--device`: CUDA when present, else Warp's CPU device), `gym` (gymnasium's
`make_vec(..., vectorization_mode="sync")`). Every cell steps uniform random actions with same-step
autoreset for about `--seconds` after a warm-up (Warp's one-off kernel compilation is excluded).
Ratios are against gymnasium at the same N, or without it against the first row.

    python bench/micro/mujoco_throughput.py --sizes 64 1024 4096    # bench/results/mujoco.md
    python bench/micro/mujoco_throughput.py --env Ant-v5 Humanoid-v5 --sizes 1024 4096 16384 \\
        --backends batch warp --device cuda --out bench/results/gpu/env.md   # (the gpu group's)
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
import envs  # noqa: E402
from common.device import available_cores  # noqa: E402
from common.errors import UserError  # noqa: E402
from micro.timing import env_rate, gym_rate, machine, parser, publish, script  # noqa: E402

# a step can take long (a large N): timed one at a time after one untimed, at least three
ONE_AT_A_TIME = dict(warmup=1, chunk=1, min_calls=3)
BACKENDS = ("batch1", "batch", "warp", "gym")
GYM = "gymnasium make_vec sync"


def ours(env_id: str, n: int, seconds: float, backend: str, nthread=None, device="cpu") -> float:
    env = envs.make(env_id, num_envs=n, device=device, seed=0, backend=backend, nthread=nthread)
    return env_rate(env, seconds, **ONE_AT_A_TIME)


def measure(backend: str, env_id: str, n: int, a, device: str, cores: int) -> float:
    """Env-steps/s of one backend (`BACKENDS`) at `n` envs; NaN where it is not measured."""
    if backend == "gym":
        return gym_rate(env_id, n, a.seconds, **ONE_AT_A_TIME)
    if backend == "warp":
        fits = device == "cuda" or n <= a.warp_max
        return ours(env_id, n, a.seconds, "warp", device=device) if fits else float("nan")
    return ours(env_id, n, a.seconds, "batch", 1 if backend == "batch1" else cores)


def table(env_id: str, sizes: list[int], results: dict[str, list[float]], where: str) -> str:
    """A row per backend (`results`: its name -> its rates at `sizes`, NaN where not measured),
    each cell with its ratio to gymnasium's, or where there is none to the first row's."""
    ref_name = GYM if GYM in results else next(iter(results))
    lines = [
        f"# {env_id} env-steps/s (random actions, same-step autoreset; {where})",
        "",
        "| backend | " + " | ".join(f"N={n}" for n in sizes) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for name, vals in results.items():
        cells = [
            "-" if v != v else f"{v:,.0f}" + (f" ({v / r:.1f}x)" if r == r else "")
            for v, r in zip(vals, results[ref_name])
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    ratios = (
        f"Ratios (in parentheses) are against {ref_name} at the same N, measured in the same run."
    )
    return "\n".join([*lines, "", ratios])


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--out", default="bench/results/mujoco.md", help="the table's path")
    p.add_argument("--env", nargs="+", default=["Ant-v5"], help="MuJoCo v5 tasks, a table each")
    p.add_argument("--sizes", type=int, nargs="+", default=[64, 1024, 4096])
    p.add_argument("--seconds", type=float, default=5.0, help="measuring time per cell")
    p.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    p.add_argument("--device", default="auto", help="MuJoCo Warp's: cuda, cpu or auto")
    p.add_argument("--warp-max", type=int, default=4096, help="largest N for warp on a CPU")
    a = p.parse_args()
    cores = available_cores()
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    if device == "cuda" and not torch.cuda.is_available():
        raise UserError("no GPU: --device cuda, but torch sees no CUDA device here")
    warp = "CUDA" if device == "cuda" else "Warp CPU device"
    names = {"batch1": "batch, 1 thread", "batch": f"batch, {cores} threads",
             "warp": f"warp ({warp})", "gym": GYM}  # fmt: skip
    # (one core: the batch backend on every core is the one-thread row)
    backends = [b for b in BACKENDS if b in a.backends and not (b == "batch" and cores == 1)]
    tables = []
    for env_id in a.env:
        if "warp" in backends:  # compile the kernels once, untimed
            ours(env_id, 2, 0.0, "warp", device=device)
        results = {}
        for b in backends:
            results[names[b]] = [measure(b, env_id, n, a, device, cores) for n in a.sizes]
            print(env_id, names[b], [f"{v:,.0f}" for v in results[names[b]]], flush=True)
        tables.append(table(env_id, a.sizes, results, machine(device)))
    publish("\n\n".join(tables), a.out)


if __name__ == "__main__":
    script(main)
