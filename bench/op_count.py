"""How many kernel launches a PPO iteration makes, counted on a CPU: the GPU run of `ppo_vec --env Ant --num-envs
4096` is bound by the host's launches (bench/results/gpu/lease.md, fourth lease: the GPU busy 37% of an iteration,
~9,500 `cudaLaunchKernel` per iteration), and that count does not need a GPU to measure.

    python bench/op_count.py [NUM_ENVS]       # default 64; the count per iteration does not depend on it

Runs ppo_vec with its Ant GPU defaults (16 steps x 4 minibatches x 5 epochs) on the MuJoCo Warp backend on Warp's
CPU device, and counts every torch op that would launch a kernel (views and allocations left out) by phase: the
env's step (its torch ops around the captured graphs), the rest of the rollout, GAE, the update. The NaN guard is put
on its accelerator branch (the on-device flag a GPU run uses). Iteration 1 (set-up) and the evaluation are left out.
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
from common.guard import NumericGuard  # noqa: E402
from common.logger import Logger  # noqa: E402

NOT_LAUNCHES = {"empty", "empty_strided", "empty_like", "_local_scalar_dense", "detach", "lift_fresh", "alias"}
ITERATIONS = 4  # the first is left out


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("num_envs", nargs="?", type=int, default=64, help="Ant worlds (default 64)")
    num_envs = p.parse_args().num_envs
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
        COUNT.phase = "rollout" if 1 <= iterations[0] < ITERATIONS else None
        return burn_in(self, step, learned)

    envs.make, NumericGuard.__init__, Logger.burn_in = counted_make, accelerator_guard, next_iteration
    ppo.compute_gae = in_phase(ppo.compute_gae, "gae", after="update")
    ppo.evaluate = in_phase(ppo.evaluate, None)
    args = ppo.default_args("Ant", 4096, "cuda")
    args = replace(args, env="Ant", device="cpu", mujoco_backend="warp", num_envs=num_envs, seed=1,
                   total_steps=num_envs * args.num_steps * (ITERATIONS + 1), eval_every=0, save_every=0, quiet=True,
                   out_dir=str(Path(__file__).resolve().parent / "runs" / "op_count"))
    with COUNT:
        ppo.main(args)
    n = ITERATIONS - 1
    phases = collections.Counter()
    for (phase, _), c in COUNT.ops.items():
        phases[phase] += c
    print(f"kernel launches per PPO iteration ({args.num_steps} steps x {args.num_minibatches} minibatches x "
          f"{args.update_epochs} epochs; {n} iterations counted): {round(sum(phases.values()) / n):,}, of which "
          + ", ".join(f"{p} {round(c / n):,}" for p, c in phases.items()))
    for (phase, name), c in COUNT.ops.most_common(30):
        print(f"{c / n:8.0f}  {phase:10s} {name}")


if __name__ == "__main__":
    main()
