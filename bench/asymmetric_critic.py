"""What a privileged critic buys: ppo_vec on CartPole seen through sensor noise, with and without a
`critic` observation group holding the noise-free state (IsaacLab's usual split), seeds 1-3, same
budget.

    python bench/asymmetric_critic.py            # -> bench/results/asymmetric_critic.md
                                                 #    (a few minutes on one core)
    python bench/asymmetric_critic.py --seeds 4 5 6

Both runs see the same noisy observations in the actor (`CartPoleNoisy-v0` vs
`CartPoleNoisy-Privileged-v0`, noise std `envs.partial.CARTPOLE_NOISE`); the only difference is the
value function's input. Evaluation: the deterministic policy, 10 episodes of the same noisy task
(the deployed policy sees noise too).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

OUT = ROOT / "bench" / "results" / "asymmetric_critic.md"
SETTINGS = dict(num_envs=64, total_steps=200_000, eval_every=50_000, quiet=True, tensorboard=False)
SEEDS = (1, 2, 3)


def main(seeds=SEEDS) -> None:
    import numpy as np

    import envs.partial
    from algos import ppo_vec

    rows, finals = [], {}
    for env_id in ("CartPoleNoisy-v0", "CartPoleNoisy-Privileged-v0"):
        for seed in seeds:
            args = dataclasses.replace(
                ppo_vec.default_args(env_id),
                env=env_id,
                seed=seed,
                out_dir=str(ROOT / "bench" / "runs" / "asymmetric"),
                **SETTINGS,
            )
            t0 = time.perf_counter()
            r = ppo_vec.main(args)
            curve = [
                json.loads(line)
                for line in (Path(r["run_dir"]) / "metrics.jsonl").read_text().splitlines()
            ]
            evals = [round(c["eval_return"]) for c in curve if "eval_return" in c]
            finals.setdefault(env_id, []).append(r["eval_return"])
            rows.append(
                f"| {env_id} | {seed} | {r['eval_return']:.1f} | {' / '.join(map(str, evals))} | "
                f"{time.perf_counter() - t0:.0f} s |"
            )
            print(rows[-1], flush=True)
    mean = {k: (float(np.mean(v)), float(np.std(v))) for k, v in finals.items()}
    text = (
        "# Asymmetric critic: CartPole through sensor noise, with and without a "
        "privileged critic group\n\n"
        f"`python bench/asymmetric_critic.py`: ppo_vec (file defaults, {SETTINGS['num_envs']} "
        f"envs, {SETTINGS['total_steps']:,} steps), noise std {envs.partial.CARTPOLE_NOISE} "
        "on (x, x_dot, theta, theta_dot) in the policy's observation; the critic reads "
        "the same noisy observation (`CartPoleNoisy-v0`) or the noise-free state "
        "(`CartPoleNoisy-Privileged-v0`). Final: deterministic policy, 10 noisy episodes (max "
        f"500). {time.strftime('%Y-%m-%d')}.\n\n"
        "| env | seed | final eval return | eval at 50k / 100k / 150k / 200k steps | wall time |\n"
        "|---|---:|---:|---|---:|\n"
        + "\n".join(rows)
        + "\n\n"
        + "\n".join(
            f"- {k}: {m:.1f} ± {s:.1f} over seeds {', '.join(map(str, seeds))}"
            for k, (m, s) in mean.items()
        )
        + "\n"
    )
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=list(SEEDS),
        help="seeds of each of the two settings",
    )
    main(tuple(p.parse_args().seeds))
