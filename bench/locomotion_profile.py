"""Where a locomotion run's time goes: `algos/ppo_vec.py` (its MuJoCo defaults) and rsl_rl's PPO
(IsaacLab's classic config, `bench/peers/rsl_rl.py`) on the same batched env, under cProfile,
the two at the same time on one core each with one torch thread, as in the locomotion group.

    python bench/locomotion_profile.py --task Ant --steps 262144

Buckets, in microseconds per env step (one env of the batch advanced once):
* physics: the batched MuJoCo step (`_BatchBackend.step`, every substep of every env);
* env: the rest of our env's `step` (observations, rewards, terminations, autoreset) and, on
  rsl_rl's side, its adapter (`envs/rsl_rl.py`), on ours the wrappers (observation normalization,
  episode statistics);
* policy: sampling actions during the rollout (our `act`; rsl_rl's `PPO.act`), plus rsl_rl's
  `process_env_step` (its rollout storage and time-out bootstrap);
* advantages: GAE and the value bootstraps at the end of a rollout;
* update: the PPO epochs (losses, backward, optimizer steps);
* other: everything else in the loop (logging, buffers, Python glue).

cProfile adds a few microseconds to every Python call, so the Python-heavy buckets read high on both
sides; the group runs' own totals (whole runs, no profiler, from the checked-in results if the task
has run) are printed below for scale: shares and the ratio between the sides are what carry over,
not the absolute microseconds (a different day can be a different host). rsl_rl is taken from this
venv (requirements.txt has it, test-only).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUCKETS = ("physics", "env", "policy", "advantages", "update", "other")


def cum(stats: pstats.Stats, file_end: str, name: str) -> float:
    """Cumulative seconds of the function `name` defined in a file ending with `file_end` (0 if
    never called)."""
    return sum(v[3] for (f, _, fn), v in stats.stats.items() if f.endswith(file_end) and fn == name)


def env_steps(stats: pstats.Stats) -> tuple[float, float]:
    """(physics, whole env step): the batch backend's `step` and `Locomotion.step`, cumulative
    seconds."""
    # two functions named `step` in that file run: the backend's (inside) and the env's (outside,
    # larger)
    times = sorted(
        v[3]
        for (f, _, fn), v in stats.stats.items()
        if f.endswith("envs/mujoco_locomotion.py") and fn == "step"
    )
    return times[0], times[-1]


def side_ours(
    task: str, steps: int, out_dir: str = str(ROOT / "bench" / "runs" / "profile")
) -> dict:
    import importlib.util

    spec = importlib.util.spec_from_file_location("ppo_vec", ROOT / "algos" / "ppo_vec.py")
    ppo_vec = sys.modules["ppo_vec"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ppo_vec)
    args = ppo_vec.default_args(task, 64)
    args.total_steps, args.eval_every, args.save_every, args.quiet = steps, 10**12, 0, True
    args.out_dir = out_dir
    # no evaluation (a run always evaluates at its end): its env steps would land in the env buckets
    from common.run import hooks

    nan = float("nan")

    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    try:  # no evaluation: the profile is the training loop's
        with hooks(evaluate=lambda *a, **k: {"eval_return": nan, "eval_return_std": nan}):
            res = ppo_vec.main(args)
    finally:
        prof.disable()
    total = time.perf_counter() - t0
    st = pstats.Stats(prof, stream=sys.stderr)
    st.sort_stats("tottime").print_stats(12)  # the heaviest functions, for the log
    physics, env_step = env_steps(st)
    wrappers = max(
        [
            v[3]
            for (f, _, fn), v in st.stats.items()
            if f.endswith("common/wrappers.py") and fn == "step"
        ]
        or [0.0]
    )
    policy = cum(st, "algos/ppo_vec.py", "act")
    # the value bootstraps at the end of a rollout: the calls of `value` made by `main` itself
    value_in_main = sum(
        c[3]
        for (f, _, fn), v in st.stats.items()
        if f.endswith("algos/ppo_vec.py") and fn == "value"
        for (cf, _, cfn), c in v[4].items()
        if cfn == "main"
    )
    adv = cum(st, "algos/ppo_vec.py", "compute_gae") + value_in_main
    update = (
        cum(st, "algos/ppo_vec.py", "ppo_loss")
        + cum(st, "torch/_tensor.py", "backward")
        + cum(st, "algos/ppo_vec.py", "opt_step")
    )
    return {
        "total": res["seconds"],
        "steps": res["steps"],
        "physics": physics,
        "env": max(wrappers, env_step) - physics,
        "policy": policy,
        "advantages": adv,
        "update": update,
        "profiled_wall": total,
    }


def side_rsl(task: str, steps: int) -> dict:
    import numpy as np
    import torch
    import envs
    from envs.rsl_rl import RslRlVecEnv
    from rsl_rl.runners import OnPolicyRunner

    sys.path.insert(0, str(ROOT / "bench"))
    from run import peer_module

    isaaclab_classic_cfg = peer_module("rsl_rl").isaaclab_classic_cfg

    torch.manual_seed(1)
    np.random.seed(1)
    cfg = isaaclab_classic_cfg(True)
    iters = steps // (64 * cfg["num_steps_per_env"])
    env = RslRlVecEnv(envs.make(task, num_envs=64, seed=1), seed=1)
    runner = OnPolicyRunner(env, cfg, log_dir=None, device="cpu")
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    runner.learn(iters)
    prof.disable()
    total = time.perf_counter() - t0
    st = pstats.Stats(prof, stream=sys.stderr)
    st.sort_stats("tottime").print_stats(12)  # the heaviest functions, for the log
    physics, env_step = env_steps(st)
    adapter = cum(st, "envs/rsl_rl.py", "step")
    policy = cum(st, "rsl_rl/algorithms/ppo.py", "act") + cum(
        st, "rsl_rl/algorithms/ppo.py", "process_env_step"
    )
    adv = cum(st, "rsl_rl/algorithms/ppo.py", "compute_returns")
    update = cum(st, "rsl_rl/algorithms/ppo.py", "update")
    return {
        "total": total,
        "steps": iters * 64 * cfg["num_steps_per_env"],
        "physics": physics,
        "env": max(adapter, env_step) - physics,
        "policy": policy,
        "advantages": adv,
        "update": update,
        "profiled_wall": total,
    }


def table(task: str, results: dict) -> str:
    RESULTS = ROOT / "bench" / "results" / "locomotion"
    unprof = {}
    for side in results:
        runs = (
            [json.loads(p.read_text()) for p in (RESULTS / task).glob(f"{side}_seed*.json")]
            if (RESULTS / task).exists()
            else []
        )
        if runs:
            unprof[side] = 1e6 * sum(1 / r["sps"] for r in runs) / len(runs)
    head = "| bucket (µs per env step) | " + " | ".join(results) + " |"
    lines = [
        f"### {task}: 64 envs, one core and one torch thread each, under cProfile",
        "",
        head,
        "|---|" + "---:|" * len(results),
    ]
    for b in BUCKETS + ("total",):
        cells = []
        for side, r in results.items():
            per = 1e6 / r["steps"]
            if b == "other":
                v = r["total"] - sum(r[k] for k in BUCKETS if k != "other")
            else:
                v = r[b]
            cells.append(
                f"{v * per:.0f} ({100 * v / r['total']:.0f}%)" if b != "total" else f"{v * per:.0f}"
            )
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    if unprof:
        lines.append(
            "| total in the group runs (no profiler, whole runs, the day they ran) | "
            + " | ".join(f"{unprof[s]:.0f}" if s in unprof else "—" for s in results)
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="Ant", help="Ant, Humanoid, Hopper, HalfCheetah or Walker2d")
    p.add_argument("--steps", type=int, default=262_144, help="env steps per side")
    p.add_argument("--side", choices=("ours", "rsl_rl"), help=argparse.SUPPRESS)  # a worker
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "locomotion" / "profile.md"))
    a = p.parse_args()
    if a.side:
        import torch

        torch.set_num_threads(1)
        print(json.dumps((side_ours if a.side == "ours" else side_rsl)(a.task, a.steps)))
        return
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MUJOCO_NUM_THREADS="1")
    procs = {
        side: subprocess.Popen(
            [
                "taskset",
                "-c",
                str(i % (os.cpu_count() or 1)),
                sys.executable,
                __file__,
                "--task",
                a.task,
                "--steps",
                str(a.steps),
                "--side",
                side,
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i, side in enumerate(("ours", "rsl_rl"))
    }
    results, outs = {}, {side: proc.communicate()[0] for side, proc in procs.items()}
    for side, proc in procs.items():
        out = outs[side]
        if proc.returncode != 0:
            raise SystemExit(f"the {side} side failed (exit {proc.returncode})")
        results[side] = json.loads(out.strip().splitlines()[-1])
    text = table(a.task, results)
    print(text)
    path = Path(a.out)
    old = path.read_text() if path.exists() else ""
    blocks = [
        b
        for b in old.split("\n\n### ")
        if b and not b.startswith(f"{a.task}:") and not b.startswith(f"### {a.task}:")
    ]
    blocks = [b if b.startswith("### ") or b.startswith("#") else "### " + b for b in blocks]
    path.write_text("\n\n".join(blocks + [text]) + "\n")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
