"""How many kernel launches a PPO iteration makes, counted on a CPU: the GPU run of
`ppo_vec --env Ant --num-envs 4096` is bound by the host's launches (the GPU idles most of an
iteration, waiting on `cudaLaunchKernel`), and that count does not need a GPU to measure.

    python bench/micro/op_count.py [NUM_ENVS] [--mode eager|capture|both] [--algo ALGO] [--small]

Runs ppo_vec with its Ant GPU defaults on the MuJoCo Warp backend on Warp's CPU device and counts
every torch op that would launch a kernel (not views and allocations) by phase: the env's step (its
ops around the captured graphs), the rest of the rollout, GAE, the update. The NaN guard takes its
accelerator branch; the set-up iterations, the evaluation and the progress logs are left out.
`--mode capture` counts what a GPU run launches with the iteration captured as a CUDA graph (its
default on CUDA, common/graphs.py): a launch for each graph and for each of MuJoCo Warp's own graphs
between them ("graph"), and the ops outside it. `--algo fast_td3` (or td3, sac) counts a vectorized
step of that file once it learns: the step, its exploration and its updates (captured: one graph).
`--small`: ppo_vec at PureJaxRL's CartPole config on a CPU (the small-batch iteration), its ops per
vectorized step by phase, and the env steps/s an eager loop of that many ops could reach at most.
The count reaches the run through `common.run.hooks` alone and finds an op's phase on the Python
stack.
"""

from __future__ import annotations

import collections
import functools
import importlib
import inspect
import sys
import timeit
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
from common.graphs import Captured  # noqa: E402
from common.run import hooks  # noqa: E402
from micro.timing import measured, parser, script  # noqa: E402

NOT_LAUNCHES = {"empty", "empty_strided", "empty_like", "_local_scalar_dense", "detach",
                "lift_fresh", "alias"}  # fmt: skip
COUNTED = 3  # iterations counted, after the set-up ones (eager: 1; capture: 2)


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
    """`fn`'s own code, under its decorators (theirs is shared) and a `partial`'s arguments."""
    return inspect.unwrap(fn.func if isinstance(fn, functools.partial) else fn).__code__


def counted_run(algo, num_envs: int, counted: range, phases: dict, updates=False, **fields):
    """Run the algorithm module `algo` with its Ant defaults for a GPU run on the MuJoCo Warp
    backend on Warp's CPU device, counting the launches of the iterations in `counted` (`Count`)
    by phase: the functions of `phases` ({function: (phase, phase after)}), the env's step and,
    with `updates`, the functions the file captures (replayed as on a GPU). Returns its Args."""
    args = measured(algo.default_args("Ant", 4096, "cuda"), "op_count", env="Ant", device="cpu",
                    mujoco_backend="warp", num_envs=num_envs, **fields)  # fmt: skip
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
        algo.main(args)
    return args


def report(what: str, capture: bool) -> int:
    """Print the launches per counted iteration, by phase and by op; return the total."""
    phases = collections.Counter()
    for (phase, _), c in COUNT.ops.items():
        phases[phase] += c
    total = round(sum(phases.values()) / COUNTED)
    by_phase = ", ".join(f"{p} {round(c / COUNTED):,}" for p, c in phases.items())
    mode = "captured" if capture else "eager"
    print(f"{mode}: kernel launches per {what}; {COUNTED} counted): {total:,}, of which {by_phase}")
    for (phase, name), c in COUNT.ops.most_common(10 if capture else 30):
        print(f"{c / COUNTED:8.0f}  {phase:10s} {name}")
    return total


def count(num_envs: int, capture: bool) -> int:
    """Print the launches per iteration of ppo_vec on Warp Ant (eager, or with the iteration
    captured); return it."""
    import algos.ppo_vec as ppo

    skip = 2 if capture else 1  # the set-up iterations (capture: the eager and the checked one)
    steps = num_envs * ppo.default_args("Ant", 4096, "cuda").num_steps * (skip + COUNTED + 1)
    counted = range(skip + 1, skip + COUNTED + 1)
    a = counted_run(ppo, num_envs, counted, {ppo.compute_gae: ("gae", "update")},
                    total_steps=steps, capture=capture)  # fmt: skip
    shape = f"{a.num_steps} steps x {a.num_minibatches} minibatches x {a.update_epochs} epochs"
    return report(f"PPO iteration ({shape}", capture)


def count_off_policy(num_envs: int, capture: bool, name: str = "fast_td3") -> int:
    """Print the launches per vectorized step of an off-policy file on Warp Ant once it learns
    (the step, its exploration, its updates: eager, or the updates captured); return it."""
    algo = importlib.import_module(f"algos.{name}")
    # learning from the third step (the n-step window's first rows); its first two update calls
    # run eagerly (capture: the eager and the checked one), the counted ones after
    first, n_step = 5, getattr(algo.default_args("Ant", 4096, "cuda"), "n_step", 1)
    a = counted_run(algo, num_envs, range(first, first + COUNTED), {}, updates=True,
                    total_steps=num_envs * (first + COUNTED + 1), capture=capture,
                    learning_starts=n_step * num_envs)  # fmt: skip
    return report(f"vectorized step ({a.gradient_steps} updates of {a.batch_size}", capture)


# PureJaxRL's CartPole config (bench/experiments.py: PUREJAXRL_PPO)
SMALL = dict(num_envs=4, num_steps=128, num_minibatches=4, update_epochs=4, learning_rate=2.5e-4,
             ent_coef=0.01, clip_vloss=True)  # fmt: skip


def count_small() -> None:
    """Print the ops of ppo_vec at PureJaxRL's CartPole config on a CPU (4 envs x 128 steps, 4
    epochs of 4 minibatches): per vectorized step by phase, per minibatch update, per env step;
    and what one op costs here, the floor of an eager step at that count."""
    import algos.ppo_vec as ppo

    a = measured(ppo.default_args("CartPole-v1"), "op_count", env="CartPole-v1", device="cpu",
                 total_steps=512 * (COUNTED + 2), **SMALL)  # fmt: skip
    phases = {ppo.Agent.act: ("act", "rollout"), ppo.compute_gae: ("gae", "update")}
    COUNT.start(range(2, 2 + COUNTED), {code(fn): phase for fn, phase in phases.items()})

    def on_open(run):
        COUNT.phases[code(run.episodes.env.step)] = ("env step", None)
        run.ticks.log_seconds = float("inf")

    with hooks(on_open=on_open, on_iteration=COUNT.next_iteration), COUNT:
        ppo.main(a)
    phases = collections.Counter()
    for (phase, _), c in COUNT.ops.items():
        phases[phase] += c / COUNTED
    minibatches = a.num_minibatches * a.update_epochs
    per_step = {p: c / a.num_steps for p, c in phases.items()}
    total = sum(per_step.values())
    x, y = torch.zeros(4), torch.zeros(4)
    op_us = min(timeit.repeat(lambda: torch.add(x, y), number=2000, repeat=20)) / 2000 * 1e6
    names = {"act": "the policy's act", "env step": "the env's step (CartPole, no wrappers)",
             "rollout": "the rest of the rollout (storage, episode statistics, NaN guard)",
             "gae": "GAE", "update": "the update"}  # fmt: skip
    print(f"ppo_vec at PureJaxRL's CartPole config, ops per vectorized step ({a.num_envs} envs; "
          f"the update's {minibatches} minibatches shared over {a.num_steps} steps):")  # fmt: skip
    for p, c in per_step.items():
        each = f" ({phases[p] / minibatches:.0f} a minibatch)" if p == "update" else ""
        print(f"{c:8.1f}  {names[p]}{each}")
    floor = a.num_envs / (total * op_us) * 1e6
    print(f"{total:8.1f}  in all, {total / a.num_envs:.1f} an env step; at {op_us:.1f} us an op "
          f"(torch.add of 4 floats, here): at most {floor:,.0f} env steps/s")  # fmt: skip


def main() -> None:
    p = parser(__doc__)
    p.add_argument("num_envs", nargs="?", type=int, default=64, help="Ant worlds (no effect)")
    modes = {"eager": [False], "capture": [True], "both": [False, True]}
    p.add_argument("--mode", choices=list(modes), default="both", help="eager, captured or both")
    p.add_argument("--algo", choices=("ppo_vec", "fast_td3", "td3", "sac"), default="ppo_vec")
    p.add_argument("--small", action="store_true", help="ppo_vec at PureJaxRL's CartPole config")
    a = p.parse_args()
    if a.small:
        return count_small()
    for capture in modes[a.mode]:
        if a.algo == "ppo_vec":
            count(a.num_envs, capture)
        else:
            count_off_policy(a.num_envs, capture, a.algo)


if __name__ == "__main__":
    script(main)
