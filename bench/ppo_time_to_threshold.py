"""Wall time for algos/ppo_vec.py to reach a deterministic 10-episode evaluation >= 475 on
CartPole-v1 (evaluation time included in the wall time), over several seeds.

    python bench/ppo_time_to_threshold.py --seeds 1 2 3
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import torch

from algos import ppo_vec


def main() -> str:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--threshold", type=float, default=475.0)
    p.add_argument("--eval-every", type=int, default=16_384)
    p.add_argument("--total-steps", type=int, default=1_000_000)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    rows = []
    for seed in a.seeds:
        with tempfile.TemporaryDirectory() as out:
            ppo_vec.main(
                ppo_vec.Args(
                    seed=seed,
                    total_steps=a.total_steps,
                    eval_every=a.eval_every,
                    save_every=0,
                    out_dir=out,
                    quiet=True,
                )
            )
            run = next(Path(out).iterdir())
            log = [json.loads(line) for line in open(run / "metrics.jsonl")]
        hit = next((r for r in log if r.get("eval_return", -np.inf) >= a.threshold), None)
        rows.append((seed, hit["seconds"] if hit else float("nan"), hit["step"] if hit else None))
        print(
            f"seed {seed}: eval >= {a.threshold} at {rows[-1][2]} steps, {rows[-1][1]:.1f} s",
            flush=True,
        )
    secs = np.array([r[1] for r in rows])
    lines = [
        f"ppo_vec defaults on CartPole-v1 (1024 envs), torch threads {a.threads}: wall time "
        f"until a deterministic 10-episode eval >= {a.threshold:g} (eval every {a.eval_every:,} "
        f"steps, eval time included)",
        "",
        "| seed | steps | seconds |",
        "|---:|---:|---:|",
    ]
    lines += [
        f"| {s} | {st:,} | {t:.1f} |" if st else f"| {s} | not reached | |" for s, t, st in rows
    ]
    lines.append(f"| mean | | {np.nanmean(secs):.1f} +- {np.nanstd(secs):.1f} |")
    table = "\n".join(lines)
    print("\n" + table)
    return table


if __name__ == "__main__":
    from report import script  # bench/report.py (this script's folder is on sys.path)

    script(main, "ppo")
