"""MinAtar env-steps per second: our batched torch port (envs/minatar.py) at N sub-envs against
the `minatar` package (one game object a sub-env, stepped in a Python loop, as a vectorized wrapper
of it would), each game, random actions, one torch thread, on this machine's CPU (on a GPU:
`--device cuda`). The package's rate does not grow with N on one core: it is one game stepped
after another.

    python bench/minatar_speed.py                      # N = 1, 64, 4096, the five games
    python bench/minatar_speed.py --num-envs 1 64 4096 16384 --device cuda \
        --out bench/results/minatar_gpu.md
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from envs.minatar import GAMES  # noqa: E402

PACKAGE = {"Breakout": "breakout", "Asterix": "asterix", "Freeway": "freeway",
           "Seaquest": "seaquest", "SpaceInvaders": "space_invaders"}  # fmt: skip


def ours(game: str, n: int, device: str, seconds: float) -> float:
    env = GAMES[game](num_envs=n, seed=0, device=device)
    env.reset(seed=0)
    g = torch.Generator(device=device).manual_seed(0)
    k = env.single_action_space.n

    def steps(count):
        for _ in range(count):
            env.step(torch.randint(0, k, (n,), generator=g, device=device))
        if device != "cpu":
            torch.cuda.synchronize()

    steps(5)  # warm-up
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        steps(10)
        count += 10
    return count * n / (time.perf_counter() - t0)


def package(game: str, seconds: float) -> float:
    import logging

    logging.disable(logging.WARNING)  # the package warns that it cannot render
    from minatar import Environment

    env = Environment(PACKAGE[game])
    env.seed(0)
    env.reset()
    rng = np.random.default_rng(0)
    count, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for a in rng.integers(0, 6, 1000):
            _, done = env.act(int(a))
            env.state()  # an agent needs the observation of every step
            if done:
                env.reset()
        count += 1000
    return count / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--num-envs", type=int, nargs="+", default=[1, 64, 4096])
    p.add_argument("--games", nargs="+", default=list(GAMES), choices=list(GAMES))
    p.add_argument("--device", default="cpu")
    p.add_argument("--seconds", type=float, default=3.0, help="measuring time per cell")
    p.add_argument("--out", default="bench/results/minatar.md")
    a = p.parse_args()
    torch.set_num_threads(1)
    rows = []
    for game in a.games:
        ref = package(game, a.seconds)
        cells = [ours(game, n, a.device, a.seconds) for n in a.num_envs]
        rows.append((game, ref, cells))
        print(game, f"package {ref:,.0f}", *(f"N={n} {c:,.0f}" for n, c in zip(a.num_envs, cells)))
    head = " | ".join(f"ours N={n:,} (x package)" for n in a.num_envs)
    when = datetime.datetime.now(datetime.UTC)
    lines = [
        "# MinAtar env-steps per second: envs/minatar.py against the minatar package",
        "",
        f"`python bench/minatar_speed.py {' '.join(sys.argv[1:])}`, {when:%Y-%m-%d %H:%M} UTC, "
        f"{platform.processor() or platform.machine()}, device {a.device}, one torch thread; "
        f"torch {torch.__version__}. Random actions; the package steps one game object at a time "
        "(and builds each step's observation, as an agent needs it), so its rate is the same at "
        "any N on one core.",
        "",
        f"| game | package (1 core) | {head} |",
        "|---|---:|" + "---:|" * len(a.num_envs),
    ]
    for game, ref, cells in rows:
        lines.append(
            f"| {game} | {ref:,.0f} | "
            + " | ".join(f"{c:,.0f} ({c / ref:.1f}x)" for c in cells)
            + " |"
        )
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
