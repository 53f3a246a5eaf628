"""How many kernel launches a PPO iteration makes, counted on a CPU: the GPU run of
`ppo_vec --env Ant --num-envs 4096` is bound by the host's launches (bench/results/gpu/lease.md,
fourth lease: the GPU idle most of an iteration, waiting on `cudaLaunchKernel`), and that count
does not need a GPU to measure.

    python bench/micro/op_count.py [NUM_ENVS] [--mode eager|capture|both] [--algo ALGO]
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

The count reaches the run through `common.run.hooks` alone (the run once open, the end of each
iteration, the functions it captures) and finds an op's phase on the Python stack: nothing of the
library is replaced.
"""

from __future__ import annotations

import collections
import contextlib
import inspect
import sys
from dataclasses import replace
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# the repository and bench/
sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]
from common.graphs import Captured  # noqa: E402
from common.run import hooks  # noqa: E402
from micro.timing import ROOT, parser, script  # noqa: E402

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
    """The ops that would launch a kernel, by phase. An op's phase is its iteration's ("rollout"
    from the start of an iteration in `counted`, 1-based; None: not counted) or, run inside a
    function of `phases` (its code -> its phase and the iteration's phase after it, None: as
    before), that function's (the innermost on the Python stack)."""

    def __init__(self):
        super().__init__()
        self.phase: str | None = None
        self.ops: collections.Counter = collections.Counter()

    def start(self, counted: range, phases: dict) -> None:
        self.phase, self.counted, self.phases, self.iteration = None, counted, phases, 0
        self.ops.clear()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if self.phase and not func.is_view and name not in NOT_LAUNCHES:
            self.ops[(self.where(), name)] += 1
        return func(*args, **(kwargs or {}))

    def where(self) -> str:
        """The phase of the op being dispatched (and the iteration's from here on)."""
        frame = sys._getframe(2)  # the code that called the op
        while frame is not None:
            if frame.f_code in self.phases:
                phase, after = self.phases[frame.f_code]
                self.phase = after or self.phase
                return phase
            frame = frame.f_back
        return self.phase

    def next_iteration(self, run=None) -> None:
        """The run's `on_iteration`: whether the next iteration is counted."""
        self.iteration += 1
        self.phase = "rollout" if self.iteration + 1 in self.counted else None


COUNT = Count()


class Replayed(Captured):
    """`Captured` as on a GPU (`simulate`): where a GPU replays the graphs, `fn` runs uncounted
    and each replay counts a launch for each graph and each of MuJoCo Warp's own between them."""

    simulate = True

    def _stand_in(self) -> None:
        phase, COUNT.phase = COUNT.phase, None
        try:
            super()._stand_in()
        finally:
            COUNT.phase = phase
        if phase:
            COUNT.ops[("graph", "replay")] += self.launches


def code(fn):
    """The code of `fn` itself, under its decorators (theirs is shared by every function they
    wrap)."""
    return inspect.unwrap(fn).__code__


@contextlib.contextmanager
def counting(counted: range, phases: dict, updates: bool = False):
    """Count the launches of the run made inside the block on the iterations in `counted`
    (`Count`), in phases of their own: the functions of `phases` ({function: (phase, phase
    after)}), the env's step and, with `updates`, the functions the file captures (its updates).
    The captured functions replay as on a GPU, the NaN guard takes its accelerator branch."""
    COUNT.start(counted, {code(fn): phase for fn, phase in phases.items()})

    def on_open(run):
        env = run.episodes.env  # what envs.make returned (under the file's wrappers)
        COUNT.phases[code(env.step)] = ("env step", None)
        run.guard.device = torch.device("meta")  # its deferred branch, as on a GPU
        # no progress log (once a second of wall time) on whichever iteration a host reaches then
        run.ticks.log_seconds = float("inf")

    def capture(fn, device, **kwargs):
        if updates:
            COUNT.phases[code(fn)] = ("update", "rollout")
        return Replayed(fn, device, **kwargs)

    with hooks(on_open=on_open, on_iteration=COUNT.next_iteration, capture=capture), COUNT:
        yield


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
        out_dir=str(ROOT / "bench" / "runs" / "op_count"),
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
    with counting(range(skip + 1, skip + COUNTED + 1), {ppo.compute_gae: ("gae", "update")}):
        ppo.main(args)
    shape = f"{args.num_steps} steps x {args.num_minibatches} minibatches x {args.update_epochs}"
    return report(f"PPO iteration ({shape} epochs", capture)


def count_off_policy(num_envs: int, capture: bool, name: str = "fast_td3") -> int:
    """Print the launches per vectorized step of an off-policy file on Warp Ant once it learns
    (the step, its exploration, its `gradient_steps` updates: eager, or the updates captured);
    return it."""
    import importlib

    algo = importlib.import_module(f"algos.{name}")

    # learning from the third step (the n-step window's first rows); its first two update calls
    # run eagerly (capture: the eager and the checked one), the counted ones after
    first = 5
    total_steps = num_envs * (first + COUNTED + 1)
    args = run_args(algo, num_envs, total_steps=total_steps, capture=capture)
    args = replace(args, learning_starts=getattr(args, "n_step", 1) * num_envs)
    with counting(range(first, first + COUNTED), {}, updates=True):
        algo.main(args)
    what = f"vectorized step ({args.gradient_steps} updates of {args.batch_size}"
    return report(what, capture)


def main() -> None:
    p = parser(__doc__)
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
    script(main)
