"""How many kernel launches a PPO iteration makes, counted on a CPU: the GPU run of
`ppo_vec --env Ant --num-envs 4096` is bound by the host's launches (bench/results/gpu/lease.md,
fourth lease: the GPU busy 37% of an iteration, ~9,500 `cudaLaunchKernel` per iteration), and that
count does not need a GPU to measure.

    python bench/op_count.py [NUM_ENVS] [--mode eager|capture|both]  # NUM_ENVS: default 64
                                                                     # (no effect on the count)

Runs ppo_vec with its Ant GPU defaults (16 steps x 4 minibatches x 5 epochs) on the MuJoCo Warp
backend on Warp's CPU device, and counts every torch op that would launch a kernel (views and
allocations left out) by phase: the env's step (its torch ops around the captured graphs), the rest
of the rollout, GAE, the update. The NaN guard is put on its accelerator branch (the on-device flag
a GPU run uses). The set-up iterations and the evaluation are left out.

`--mode capture` counts what a GPU run launches with the iteration captured as a CUDA graph
(ppo_vec's default on CUDA, common/graphs.py): the capture's check runs as on a GPU, each replay
counts one launch ("graph"), and the ops outside it (the learning-rate fill, the guard's check)
count as before. `both` (the default) runs the two in turn.
"""

from __future__ import annotations

import argparse
import collections
import sys
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import algos.ppo_vec as ppo  # noqa: E402
import envs  # noqa: E402
from common.graphs import Captured  # noqa: E402
from common.guard import NumericGuard  # noqa: E402
from common.logger import Logger  # noqa: E402

NOT_LAUNCHES = {
    "empty",
    "empty_strided",
    "empty_like",
    "_local_scalar_dense",
    "detach",
    "lift_fresh",
    "alias",
}
# iterations counted, after the set-up ones (eager: 1; capture: 2, the eager call and the checked
# one)
COUNTED = 3


class Count(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.phase: str | None = None  # None: not counted
        self.ops: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if self.phase and not func.is_view and name not in NOT_LAUNCHES:
            self.ops[(self.phase, name)] += 1
        return func(*args, **(kwargs or {}))


COUNT = Count()


def in_phase(fn, phase, after=None):
    def wrapped(*a, **k):
        before = COUNT.phase
        if before is None:
            return fn(*a, **k)
        COUNT.phase = phase
        try:
            return fn(*a, **k)
        finally:
            COUNT.phase = after or before

    return wrapped


def count(num_envs: int, capture: bool) -> int:
    """Print the launches per iteration of ppo_vec on Warp Ant (eager, or with the iteration
    captured); return it."""
    COUNT.ops.clear()
    skip = 2 if capture else 1
    Captured.simulate = capture
    stand_in = Captured._stand_in

    def replay(self):  # where a GPU replays the graph: one launch, whatever fn runs
        phase, COUNT.phase = COUNT.phase, None
        try:
            stand_in(self)
        finally:
            COUNT.phase = phase
        if phase:
            COUNT.ops[("graph", "replay")] += 1

    Captured._stand_in = replay
    make, guard_init, burn_in = envs.make, NumericGuard.__init__, Logger.burn_in

    def counted_make(*a, **k):
        env = make(*a, **k)
        env.step = in_phase(env.step, "env step")
        return env

    def accelerator_guard(self, *a, **k):  # its deferred branch, as on a GPU
        guard_init(self, *a, **k)
        self.device = torch.device("meta")

    iterations = [0]

    def next_iteration(self, step, learned=True):  # called once per PPO iteration
        iterations[0] += 1
        COUNT.phase = "rollout" if skip <= iterations[0] < skip + COUNTED else None
        return burn_in(self, step, learned)

    import common.run

    gae, evaluate = ppo.compute_gae, common.run.evaluate
    envs.make, NumericGuard.__init__, Logger.burn_in = (
        counted_make,
        accelerator_guard,
        next_iteration,
    )
    ppo.compute_gae = in_phase(ppo.compute_gae, "gae", after="update")
    common.run.evaluate = in_phase(common.run.evaluate, None)
    args = ppo.default_args("Ant", 4096, "cuda")
    args = replace(
        args,
        env="Ant",
        device="cpu",
        mujoco_backend="warp",
        num_envs=num_envs,
        seed=1,
        total_steps=num_envs * args.num_steps * (skip + COUNTED + 1),
        eval_every=0,
        save_every=0,
        quiet=True,
        capture=capture,
        out_dir=str(Path(__file__).resolve().parent / "runs" / "op_count"),
    )
    try:
        with COUNT:
            ppo.main(args)
    finally:
        envs.make, NumericGuard.__init__, Logger.burn_in = make, guard_init, burn_in
        ppo.compute_gae, common.run.evaluate, Captured._stand_in, Captured.simulate = (
            gae,
            evaluate,
            stand_in,
            False,
        )
    n = COUNTED
    phases = collections.Counter()
    for (phase, _), c in COUNT.ops.items():
        phases[phase] += c
    total = round(sum(phases.values()) / n)
    print(
        f"{'captured' if capture else 'eager'}: kernel launches per PPO "
        f"iteration ({args.num_steps} steps x {args.num_minibatches} "
        f"minibatches x {args.update_epochs} epochs; {n} iterations counted): "
        f"{total:,}, of which " + ", ".join(f"{p} {round(c / n):,}" for p, c in phases.items())
    )
    for (phase, name), c in COUNT.ops.most_common(30 if not capture else 10):
        print(f"{c / n:8.0f}  {phase:10s} {name}")
    return total


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("num_envs", nargs="?", type=int, default=64, help="Ant worlds (default 64)")
    p.add_argument(
        "--mode",
        choices=("eager", "capture", "both"),
        default="both",
        help="count the eager iteration, the captured one, or both (default)",
    )
    a = p.parse_args()
    for capture in {"eager": [False], "capture": [True], "both": [False, True]}[a.mode]:
        count(a.num_envs, capture)


if __name__ == "__main__":
    main()
