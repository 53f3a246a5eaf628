"""Pipeline parallelism (`--pipeline`) of SAC and TD3 against the same runs without it, side by
side.

For each algorithm and setting: env-steps/s (total env steps / wall time of the run, final
evaluation included), the pipeline/plain ratio, the pipeline's measured overlap (fraction of the
training wall time during which the explorer and the learner were both busy, and each one's busy
fraction, averaged over the logging ticks) and the final deterministic 10-episode eval return.
Runs go one after the other on the whole machine. The plain runs use one torch thread (the
pipeline's explorer and learner one each) and, for a fair use of the second core, also two
intra-op threads.

Two settings by default: `learn` is the off-policy learning tests' (4 envs, 4 updates per vectorized
step: learning dominates, the pipeline can hide only the small exploring share) and `wide` (1024
envs, 1 update per vectorized step: on Pendulum the env is nearly free and exploring costs mostly
the actor's forward pass, so it takes this many envs per update before exploring is a sizeable
share of the work; a throughput setting, ~1.9k updates are too few to learn the task).

    python bench/pipeline.py --algos sac_podracer td3_podracer --settings learn wide
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np
import torch

SETTINGS = {  # name -> (Args fields, description)
    "learn": (
        dict(num_envs=4, gradient_steps=4, total_steps=10_000, hidden=(128, 128)),
        "4 envs, 4 updates per vectorized step, 10k steps, hidden (128, 128)",
    ),
    "wide": (
        dict(
            num_envs=1024,
            gradient_steps=1,
            total_steps=2_000_000,
            hidden=(256, 256),
            learning_starts=20_000,
        ),
        "1024 envs, 1 update per vectorized step, 2M steps (~1.9k updates), hidden (256, 256), "
        "learning from 20k",
    ),
}


def run_one(algo: str, setting: str, pipeline: bool, threads: int, seed: int, segment: int) -> dict:
    torch.set_num_threads(threads)
    module = importlib.import_module(f"algos.{algo}")
    kw = dict(
        SETTINGS[setting][0],
        env="Pendulum-v1",
        seed=seed,
        eval_every=0,
        save_every=0,
        quiet=True,
        pipeline=pipeline,
        pipeline_segment=segment,
    )
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        r = module.main(module.Args(out_dir=out, **kw))
        wall = time.perf_counter() - t0
        rows = [json.loads(line) for line in open(Path(r["run_dir"]) / "metrics.jsonl")]
    ticks = [x for x in rows if "pipeline_overlap" in x]
    mean = (lambda k: float(np.mean([x[k] for x in ticks]))) if ticks else (lambda k: float("nan"))
    return dict(
        algo=algo,
        setting=setting,
        pipeline=pipeline,
        threads=threads,
        sps=r["steps"] / wall,
        wall=wall,
        eval=r["eval_return"],
        overlap=mean("pipeline_overlap"),
        explore=mean("explore_busy"),
        learn=mean("learn_busy"),
    )


def command(algo: str, setting: str, pipeline: bool, threads: int, seed: int, segment: int) -> str:
    kw = dict(SETTINGS[setting][0], seed=seed)
    flags = " ".join(
        f"--{k.replace('_', '-')} {' '.join(map(str, v)) if isinstance(v, tuple) else v}"
        for k, v in kw.items()
    )
    pipe = f" --pipeline --pipeline-segment {segment}" if pipeline else ""
    return (
        f"OMP_NUM_THREADS={threads} python algos/{algo}.py --env Pendulum-v1 {flags} "
        f"--eval-every 0{pipe}"
    )


def main() -> str:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--algos", nargs="+", default=["sac_podracer", "td3_podracer"])
    p.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--segment", type=int, default=16, help="--pipeline-segment (vectorized steps)")
    a = p.parse_args()
    results, commands = [], []
    for setting in a.settings:
        for algo in a.algos:
            for pipeline, threads in ((False, 1), (False, 2), (True, 1)):
                r = run_one(algo, setting, pipeline, threads, a.seed, a.segment)
                print(
                    json.dumps(
                        {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()}
                    ),
                    flush=True,
                )
                results.append(r)
                commands.append(command(algo, setting, pipeline, threads, a.seed, a.segment))
    lines = [
        f"Pendulum-v1, `--pipeline` (segment {a.segment} vectorized steps) vs plain, same settings "
        f"and seed {a.seed}, CPU ({os.cpu_count()} cores); env-steps/s over the whole run (final "
        f"eval included); overlap = both busy / training wall time",
        "",
        "| algorithm | setting | plain 1 thr sps | plain 2 thr sps | pipeline sps "
        "| pipeline / plain 1 thr | pipeline / plain 2 thr | overlap | explore busy | learn busy "
        "| eval plain (1 thr) | eval pipeline |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for setting in a.settings:
        for algo in a.algos:
            p1, p2, pp = (
                next(
                    r
                    for r in results
                    if r["algo"] == algo
                    and r["setting"] == setting
                    and r["pipeline"] == pipe
                    and r["threads"] == thr
                )
                for pipe, thr in ((False, 1), (False, 2), (True, 1))
            )
            lines.append(
                f"| {algo} | {setting} | {p1['sps']:.0f} | {p2['sps']:.0f} | {pp['sps']:.0f} | "
                f"{pp['sps'] / p1['sps']:.2f} | {pp['sps'] / p2['sps']:.2f} | {pp['overlap']:.2f} "
                f"| {pp['explore']:.2f} | {pp['learn']:.2f} | {p1['eval']:.1f} | {pp['eval']:.1f} |"
            )
    lines += [
        "",
        "Settings: " + "; ".join(f"`{s}` = {SETTINGS[s][1]}" for s in a.settings) + ".",
        "",
        "Commands:",
        "",
    ]
    lines += [f"    {c}" for c in commands]
    table = "\n".join(lines)
    print("\n" + table)
    return table


if __name__ == "__main__":
    from report import script  # bench/report.py (this script's folder is on sys.path)

    script(main, "pipeline")
