"""How many kernel launches a PPO iteration makes, counted on a CPU: the GPU run of
`ppo_vec --env Ant --num-envs 4096` is bound by the host's launches (bench/results/gpu/lease.md,
fourth lease: the GPU busy 37% of an iteration, ~9,500 `cudaLaunchKernel` per iteration), and that
count does not need a GPU to measure.

    python bench/op_count.py [NUM_ENVS] [--mode eager|capture|both] [--algo ALGO]
    # ALGO: ppo_vec (default), fast_td3, td3 or sac
    # NUM_ENVS: default 64 (no effect on the count)

Runs ppo_vec with its Ant GPU defaults (16 steps x 4 minibatches x 5 epochs) on the MuJoCo Warp
backend on Warp's CPU device, and counts every torch op that would launch a kernel (views and
allocations left out) by phase: the env's step (its torch ops around the captured graphs), the rest
of the rollout, GAE, the update. The NaN guard is put on its accelerator branch (the on-device flag
a GPU run uses). The set-up iterations, the evaluation and the progress logs (once a second of
wall time, on whichever iteration a host reaches then) are left out.

`--mode capture` counts what a GPU run launches with the iteration captured as a CUDA graph
(ppo_vec's default on CUDA, common/graphs.py): the capture's check runs as on a GPU, each replay
counts a launch for each graph and for each of MuJoCo Warp's own graphs launched between them
("graph"), and the ops outside it (the learning-rate fill, the guard's check) count as before.
`both` (the default) runs the two in turn.

`--algo fast_td3` (or td3, sac) counts a vectorized step of that file on the same env once it
learns (4 updates a step by default): the step, its exploration, and the updates, eager or
captured as one graph (the default on CUDA).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import sys
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import envs  # noqa: E402
from common.graphs import Captured  # noqa: E402
from common.guard import NumericGuard  # noqa: E402
from common.logger import Logger, Ticks  # noqa: E402

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


@contextlib.contextmanager
def hooks(capture: bool, counted: range):
    """The run's hooks while counting: each replay of a captured function counts its launches (as
    on a GPU), the env's step its own phase, the NaN guard on its accelerator branch, the
    evaluations and the progress logs (once a second, on no fixed iteration) left out;
    `COUNT.phase` is "rollout" on the iterations in `counted` (1-based) and None (not counted) on
    the others."""
    import common.run

    COUNT.ops.clear()
    Captured.simulate = capture
    stand_in = Captured._stand_in

    def replay(self):  # where a GPU replays the graphs: one launch each, whatever fn runs
        phase, COUNT.phase = COUNT.phase, None
        try:
            stand_in(self)
        finally:
            COUNT.phase = phase
        if phase:  # and a launch for each of MuJoCo Warp's own graphs between them
            COUNT.ops[("graph", "replay")] += self.launches

    make, guard_init, burn_in = envs.make, NumericGuard.__init__, Logger.burn_in
    evaluate, ticks_init = common.run.evaluate, Ticks.__init__

    def no_timed_logs(self, *a, **k):  # a log once a second of wall time lands on whichever
        ticks_init(self, *a, **k)  # iteration a slow host reaches then: not one an iteration
        self.log_seconds = float("inf")

    def counted_make(*a, **k):
        env = make(*a, **k)
        env.step = in_phase(env.step, "env step")
        return env

    def accelerator_guard(self, *a, **k):  # its deferred branch, as on a GPU
        guard_init(self, *a, **k)
        self.device = torch.device("meta")

    iterations = [0]

    def next_iteration(self, step, learned=True):  # called once per iteration
        iterations[0] += 1
        COUNT.phase = "rollout" if iterations[0] + 1 in counted else None
        return burn_in(self, step, learned)

    Captured._stand_in, envs.make, NumericGuard.__init__ = replay, counted_make, accelerator_guard
    Logger.burn_in, common.run.evaluate = next_iteration, in_phase(evaluate, None)
    Ticks.__init__ = no_timed_logs
    try:
        with COUNT:
            yield
    finally:
        envs.make, NumericGuard.__init__, Logger.burn_in = make, guard_init, burn_in
        common.run.evaluate, Captured._stand_in, Captured.simulate = evaluate, stand_in, False
        Ticks.__init__ = ticks_init


def report(what: str, capture: bool) -> int:
    """Print the launches per counted iteration, by phase and by op; return the total."""
    phases = collections.Counter()
    for (phase, _), c in COUNT.ops.items():
        phases[phase] += c
    n = COUNTED
    total = round(sum(phases.values()) / n)
    print(
        f"{'captured' if capture else 'eager'}: kernel launches per {what}; {n} counted): "
        f"{total:,}, of which " + ", ".join(f"{p} {round(c / n):,}" for p, c in phases.items())
    )
    for (phase, name), c in COUNT.ops.most_common(30 if not capture else 10):
        print(f"{c / n:8.0f}  {phase:10s} {name}")
    return total


def run_args(algo, num_envs: int, **kw):
    """The file's Ant defaults for a GPU run, on the MuJoCo Warp backend on Warp's CPU device."""
    args = algo.default_args("Ant", 4096, "cuda")
    return replace(
        args,
        env="Ant",
        device="cpu",
        mujoco_backend="warp",
        num_envs=num_envs,
        seed=1,
        eval_every=0,
        save_every=0,
        quiet=True,
        out_dir=str(Path(__file__).resolve().parent / "runs" / "op_count"),
        **kw,
    )


def count(num_envs: int, capture: bool) -> int:
    """Print the launches per iteration of ppo_vec on Warp Ant (eager, or with the iteration
    captured); return it."""
    import algos.ppo_vec as ppo

    skip = 2 if capture else 1  # the set-up iterations (capture: the eager and the checked one)
    args = ppo.default_args("Ant", 4096, "cuda")
    total_steps = num_envs * args.num_steps * (skip + COUNTED + 1)
    args = run_args(ppo, num_envs, total_steps=total_steps, capture=capture)
    gae = ppo.compute_gae
    ppo.compute_gae = in_phase(gae, "gae", after="update")
    try:
        with hooks(capture, range(skip + 1, skip + COUNTED + 1)):
            ppo.main(args)
    finally:
        ppo.compute_gae = gae
    shape = f"{args.num_steps} steps x {args.num_minibatches} minibatches x {args.update_epochs}"
    return report(f"PPO iteration ({shape} epochs", capture)


def count_off_policy(num_envs: int, capture: bool, name: str = "fast_td3") -> int:
    """Print the launches per vectorized step of an off-policy file on Warp Ant once it learns
    (the step, its exploration, its `gradient_steps` updates: eager, or the updates captured);
    return it."""
    import importlib

    import common.run

    algo = importlib.import_module(f"algos.{name}")

    # learning from the third step (the n-step window's first rows); its first two update calls
    # run eagerly (capture: the eager and the checked one), the counted ones after
    first = 5
    total_steps = num_envs * (first + COUNTED + 1)
    args = run_args(algo, num_envs, total_steps=total_steps, capture=capture)
    args = replace(args, learning_starts=getattr(args, "n_step", 1) * num_envs)
    capture_fn = common.run.Run.capture

    def updates_phase(self, fn, *a, **k):  # the updates: their own phase
        return capture_fn(self, in_phase(fn, "update", after="rollout"), *a, **k)

    common.run.Run.capture = updates_phase
    try:
        with hooks(capture, range(first, first + COUNTED)):
            algo.main(args)
    finally:
        common.run.Run.capture = capture_fn
    what = f"vectorized step ({args.gradient_steps} updates of {args.batch_size}"
    return report(what, capture)


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
    p.add_argument(
        "--algo",
        choices=("ppo_vec", "fast_td3", "td3", "sac"),
        default="ppo_vec",
        help="ppo_vec: a PPO iteration (default); the others: a vectorized step and its updates",
    )
    a = p.parse_args()
    for capture in {"eager": [False], "capture": [True], "both": [False, True]}[a.mode]:
        if a.algo == "ppo_vec":
            count(a.num_envs, capture)
        else:
            count_off_policy(a.num_envs, capture, a.algo)


if __name__ == "__main__":
    main()
