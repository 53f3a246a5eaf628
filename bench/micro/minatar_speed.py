"""MinAtar env-steps per second: our batched torch port (envs/minatar.py) at N sub-envs against
the `minatar` package (a game object a sub-env, stepped in a Python loop as a vectorized wrapper of
it would: its rate does not grow with N on one core), each game, random actions, one torch thread.

    python bench/micro/minatar_speed.py                      # N = 1, 64, 4096, the five games
    python bench/micro/minatar_speed.py --num-envs 1 64 4096 16384 --device cuda \\
        --out bench/results/minatar_gpu.md
    python bench/micro/minatar_speed.py --jax --num-envs 64 4096 --out bench/results/minatar_jax.md

`--jax`: also gymnax's JAX port at each N (bench/peers/jax.py in bench/.venv-jax, one thread: a
`vmap` over the sub-envs, 100 steps a compiled `scan`, as PureJaxRL steps it; compile excluded).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
from common.device import keep_host_memory  # noqa: E402
from envs.minatar import GAMES  # noqa: E402
from micro.timing import children, env_rate, machine, parser, publish, rate, script  # noqa: E402

PACKAGE = {"Breakout": "breakout", "Asterix": "asterix", "Freeway": "freeway",
           "Seaquest": "seaquest", "SpaceInvaders": "space_invaders"}  # fmt: skip


def package(game: str, seconds: float) -> float:
    import logging

    logging.disable(logging.WARNING)  # the package warns that it cannot render
    from minatar import Environment

    env = Environment(PACKAGE[game])
    env.seed(0)
    env.reset()
    rng = np.random.default_rng(0)

    def thousand_steps():
        for a in rng.integers(0, 6, 1000):
            _, done = env.act(int(a))
            env.state()  # an agent needs the observation of every step
            if done:
                env.reset()

    return 1000 * rate(thousand_steps, seconds, warmup=0, chunk=1)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--out", default="bench/results/minatar.md", help="the table's path")
    p.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 4096])
    p.add_argument("--games", nargs="+", default=list(GAMES), choices=list(GAMES))
    p.add_argument("--device", default="cpu")
    p.add_argument("--seconds", type=float, default=3.0, help="measuring time per cell")
    p.add_argument("--jax", action="store_true", help="gymnax at each N too (its own venv)")
    a = p.parse_args()
    torch.set_num_threads(1)
    keep_host_memory()  # as a training run's process does (common.run.Run)
    head = " | ".join(f"ours N={n:,} (x package)" for n in a.num_envs)
    if a.jax:
        from run import venv

        py = venv("jax")
        head += " | " + " | ".join(f"gymnax N={n:,} (ours / it)" for n in a.num_envs)
    lines = [
        "# MinAtar env-steps per second: envs/minatar.py against the minatar package",
        "",
        f"`python bench/micro/minatar_speed.py {' '.join(sys.argv[1:])}`, {machine(a.device)}, "
        f"device {a.device}, one torch thread. Random actions; the package steps one game object "
        "at a time (and builds each step's observation, as an agent needs it), so its rate is the "
        "same at any N on one core.",
        "",
        f"| game | package (1 core) | {head} |",
        "|---|---:|" + "---:|" * len(a.num_envs) * (2 if a.jax else 1),
    ]
    for game in a.games:
        ref = package(game, a.seconds)
        made = (GAMES[game](num_envs=n, seed=0, device=a.device) for n in a.num_envs)
        cells = [env_rate(env, a.seconds, warmup=5) for env in made]
        row = " | ".join(f"{c:,.0f} ({c / ref:.1f}x)" for c in cells)
        if a.jax:
            one = {"OMP_NUM_THREADS": "1"}  # (the adapter holds XLA to one thread then)
            step = [py, "bench/peers/jax.py", "step", "--game", game, "--seconds", str(a.seconds)]
            theirs = [children([*step, "--num-envs", str(n)], env=one)[0]["sps"]
                      for n in a.num_envs]  # fmt: skip
            row += " | " + " | ".join(f"{t:,.0f} ({c / t:.2f}x)" for c, t in zip(cells, theirs))
        lines.append(f"| {game} | {ref:,.0f} | {row} |")
        print(lines[-1], flush=True)
    publish("\n".join(lines), a.out)


if __name__ == "__main__":
    script(main)
