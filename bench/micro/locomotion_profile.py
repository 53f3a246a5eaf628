"""Where a locomotion run's time goes: `algos/ppo_vec.py` (its MuJoCo defaults) and rsl_rl's PPO
(IsaacLab's classic config, `bench/peers/rsl_rl.py`) on the same batched env under cProfile, the
two at once on one core each with one torch thread, as in the locomotion group.

    python bench/micro/locomotion_profile.py --task Ant --steps 262144

Buckets, in microseconds per env step: physics (the batched MuJoCo step); env (the rest of our
env's `step`, and our wrappers or rsl_rl's adapter `envs/rsl_rl.py`); policy (sampling actions in
the rollout: our `act`, rsl_rl's `act` and `process_env_step` with its storage and time-out
bootstrap); advantages (GAE and the value bootstraps); update (the PPO epochs); other (logging,
buffers, Python glue). cProfile adds a few microseconds to every Python call, so the Python-heavy
buckets read high on both sides: the shares and the ratio between the sides carry over, not the
absolute microseconds; the locomotion group's own runs (no profiler, their checked-in metrics) are
given for scale. rsl_rl comes from this venv (requirements.txt has it, test-only).
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
from micro.timing import RESULTS, ROOT, children, parser, publish, script  # noqa: E402

BUCKETS = ("physics", "env", "policy", "advantages", "update", "other")


def found(st: pstats.Stats, file_end: str, *names: str) -> list[tuple]:
    """cProfile's rows (calls, primitive calls, own s, cumulative s, callers) of the functions
    `names` defined in a file ending with `file_end`."""
    return [v for (f, _, fn), v in st.stats.items() if f.endswith(file_end) and fn in names]


def cum(st: pstats.Stats, file_end: str, *names: str, caller: str | None = None) -> float:
    """Their cumulative seconds (`caller`: of their calls from the functions of that name alone)."""
    rows = found(st, file_end, *names)
    if caller is not None:
        rows = [c for v in rows for (_, _, fn), c in v[4].items() if fn == caller]
    return sum(r[3] for r in rows)


def profiled(run) -> tuple[pstats.Stats, dict]:
    """`run()` under cProfile; the physics and whole-env-step seconds (two functions named `step`
    in envs/mujoco_locomotion.py run: the backend's inside, the env's outside and larger)."""
    with cProfile.Profile() as prof:
        run()
    st = pstats.Stats(prof, stream=sys.stderr)
    st.sort_stats("tottime").print_stats(12)  # the heaviest functions, for the log
    steps = sorted(v[3] for v in found(st, "envs/mujoco_locomotion.py", "step"))
    return st, {"physics": steps[0], "env_step": steps[-1]}


def side_ours(task: str, steps: int, out_dir: str = str(ROOT / "bench" / "runs" / "profile")):
    from algos import ppo_vec
    from common.run import hooks

    args = ppo_vec.default_args(task, 64)
    args.total_steps, args.eval_every, args.save_every, args.quiet = steps, 10**12, 0, True
    args.out_dir, nan, res = out_dir, float("nan"), {}
    # no evaluation (a run evaluates at its end): its env steps would land in the env buckets
    with hooks(evaluate=lambda *a, **k: {"eval_return": nan, "eval_return_std": nan}):
        st, t = profiled(lambda: res.update(ppo_vec.main(args)))
    # the outermost wrapper's `step` (they nest: each one's time holds the ones inside)
    wrapped = max([v[3] for v in found(st, "common/wrappers.py", "step")] or [0.0])
    ppo, backward = "algos/ppo_vec.py", cum(st, "torch/_tensor.py", "backward")
    return dict(total=res["seconds"], steps=res["steps"], physics=t["physics"],
                env=max(wrapped, t["env_step"]) - t["physics"], policy=cum(st, ppo, "act"),
                # GAE and the value bootstraps at the end of a rollout (`value` called by `main`)
                advantages=cum(st, ppo, "compute_gae") + cum(st, ppo, "value", caller="main"),
                update=cum(st, ppo, "ppo_loss", "opt_step") + backward)  # fmt: skip


def side_rsl(task: str, steps: int) -> dict:
    import time

    import numpy as np
    import torch
    from rsl_rl.runners import OnPolicyRunner

    import envs
    from envs.rsl_rl import RslRlVecEnv
    from run import peer_module

    torch.manual_seed(1)
    np.random.seed(1)
    cfg = peer_module("rsl_rl").isaaclab_classic_cfg(True)
    iters = steps // (64 * cfg["num_steps_per_env"])
    runner = OnPolicyRunner(RslRlVecEnv(envs.make(task, num_envs=64, seed=1), seed=1), cfg,
                            log_dir=None, device="cpu")  # fmt: skip
    t0 = time.perf_counter()
    st, t = profiled(lambda: runner.learn(iters))
    ppo = "rsl_rl/algorithms/ppo.py"
    adapter = cum(st, "envs/rsl_rl.py", "step")
    return dict(total=time.perf_counter() - t0, steps=iters * 64 * cfg["num_steps_per_env"],
                physics=t["physics"], env=max(adapter, t["env_step"]) - t["physics"],
                policy=cum(st, ppo, "act", "process_env_step"),
                advantages=cum(st, ppo, "compute_returns"),
                update=cum(st, ppo, "update"))  # fmt: skip


def unprofiled(task: str) -> dict:
    """µs per env step of the locomotion group's runs of `task` (training seconds over env steps,
    mean over seeds), by side, from their metrics."""
    import report

    out = {}
    for side, label in (("ours", "ppo_vec"), ("rsl_rl", "rsl_rl")):
        paths = (RESULTS / "locomotion" / "runs").glob(f"{task}-v5__{label}__s*.jsonl")
        ends = [c[-1] for p in paths if (c := report.eval_curve(report.load_rows(p)))]
        if ends:
            out[side] = 1e6 * sum(secs / step for step, secs, _ in ends) / len(ends)
    return out


def table(task: str, results: dict) -> str:
    lines = [f"### {task}: 64 envs, one core and one torch thread each, under cProfile", "",
             "| bucket (µs per env step) | " + " | ".join(results) + " |",
             "|---|" + "---:|" * len(results)]  # fmt: skip
    for b in (*BUCKETS, "total"):
        cells = []
        for r in results.values():
            v = r["total"] - sum(r[k] for k in BUCKETS[:-1]) if b == "other" else r[b]
            share = f" ({100 * v / r['total']:.0f}%)" if b != "total" else ""
            cells.append(f"{v * 1e6 / r['steps']:.0f}{share}")
        lines.append(f"| {b} | " + " | ".join(cells) + " |")
    if runs := unprofiled(task):
        cells = " | ".join(f"{runs[s]:.0f}" if s in runs else "-" for s in results)
        lines.append(
            f"| total in the group runs (no profiler, whole runs, the day they ran) | {cells} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--out", default="bench/results/locomotion/profile.md", help="the table's path")
    p.add_argument("--task", default="Ant", help="Ant, Humanoid, Hopper, HalfCheetah or Walker2d")
    p.add_argument("--steps", type=int, default=262_144, help="env steps per side")
    p.add_argument("--side", choices=("ours", "rsl_rl"), help="(a worker: one side)")
    a = p.parse_args()
    if a.side:
        import torch

        torch.set_num_threads(1)
        print(json.dumps((side_ours if a.side == "ours" else side_rsl)(a.task, a.steps)))
        return
    # the two sides at once, a core each
    one_thread = {v: "1" for v in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MUJOCO_NUM_THREADS")}
    cmd = [sys.executable, __file__, "--task", a.task, "--steps", str(a.steps), "--side"]
    sides = {"ours": "0", "rsl_rl": str(1 % (os.cpu_count() or 1))}
    pinned = [["taskset", "-c", core, *cmd, side] for side, core in sides.items()]
    runs = children(*pinned, env=one_thread)
    # the file keeps one block per task: this task's replaced, the others kept
    old = (ROOT / a.out).read_text().split("### ") if (ROOT / a.out).exists() else []
    kept = ["### " + b.strip() for b in old if b.strip() and not b.startswith(f"{a.task}:")]
    publish("\n\n".join([*kept, table(a.task, dict(zip(sides, runs)))]), a.out)


if __name__ == "__main__":
    script(main)
