"""The run shell every algorithm file shares, so that the file itself holds the algorithm (its
use: CONTRIBUTING.md#make-a-variant-and-add-an-algorithm-file):

    run = Run(ALGO, args, defaults=default_args)       # device, --resume (its settings), seeds
    run.start(env, state, policy)                      # resume `state` in place; guard, schedule
    for iteration in run.iterations(num_iterations, batch_size):
        ...                                            # one iteration of the algorithm
    return run.finish(env)

The checkpoint holds `state` under its names (each `state_dict()`, or the tensor), the file's
`meta`, what `extra()` returns, the counters, the generators and the deployable policy
(common/policy.py); under torchrun every rank's state (`ranks[r]`), rank 0 alone evaluating, logging
and writing. Code around a file's `main` (a benchmark, a population) attaches through `hooks`, never
by replacing a module's names: `with hooks(on_log=..., evaluate=...): module.main(args)`.
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

import torch

from common.checkpoint import (
    RUNNING,
    check_spaces,
    load_checkpoint,
    resume_args,
    resume_hint,
    save_checkpoint,
    spaces_of,
)
from common.device import (
    compile_fn,
    flush_denormals,
    keep_host_memory,
    resolve_device,
    rng_state,
    seed_everything,
    set_rng_state,
    set_threads,
)
from common.errors import UserError
from common.evaluate import evaluate
from common.graphs import Captured
from common.guard import NumericGuard
from common.logger import Logger, Meter, Ticks, make_run_dir
from common.policy import Policy, RecurrentPolicy, deployed
from common.vec_env import keeps_episodes
from common.wrappers import EpisodeStatistics, find_wrapper

# the entries of a file's state that describe where its episodes stand (the names every file uses)
EPISODE_STATE = ("next_obs", "hidden", "window")


@dataclass
class Hooks:
    """What code around a file's `main` attaches to its run (`hooks`); rank 0 calls each."""

    on_open: Callable | None = None  # on_open(run): the run directory and logger are open
    # evaluate(policy, env_id, episodes, seed=, device=) -> dict, in place of the file's evaluation
    evaluate: Callable | None = None
    on_log: Callable | None = None  # on_log(run, row): a row was logged (its evaluation's included)
    on_save: Callable | None = None  # on_save(run, path): the checkpoint was written
    # on_iteration(run): an iteration is done, its evaluation, log and checkpoint included
    on_iteration: Callable | None = None
    # capture(fn, device, state=, enabled=, ...) -> Captured, in place of `run.capture`'s: the one
    # way to see inside a captured loop from outside (a benchmark counting what a replay launches)
    capture: Callable | None = None


_HOOKS: list[Hooks] = []


@contextlib.contextmanager
def hooks(**kwargs) -> Iterator[Hooks]:
    """`Hooks(**kwargs)` for the runs made inside the block."""
    attached = Hooks(**kwargs)
    _HOOKS.append(attached)
    try:
        yield attached
    finally:
        _HOOKS.remove(attached)


class Run:
    """One training run's shell (module docstring); `run.start_iter`, `run.step` and `run.updates`
    say where it stands."""

    def __init__(
        self,
        algo: str,
        args,
        defaults: Callable | None = None,
        ctx=None,
        device=None,
        gather: bool = True,
    ):
        self.algo, self.ctx, self.gather = algo, ctx, gather
        self.device = device if device is not None else resolve_device(args.device)
        self.rank = ctx.rank if ctx is not None else 0
        self.is_main = ctx is None or ctx.is_main
        self.ckpt = self.own = None
        if args.resume:  # continue with the saved settings (see common.checkpoint.resume_args)
            self.ckpt = load_checkpoint(args.resume, algo=algo, map_location=self.device)
            if ctx is not None:  # torchrun: as many ranks as the checkpoint was written by
                from common import distributed

                try:
                    distributed.check_world_size(self.ckpt, ctx, args.resume, f"algos/{algo}.py")
                except ValueError:
                    distributed.shutdown(ctx)
                    raise
            default = (
                defaults(args.env, args.num_envs, args.device) if defaults is not None else None
            )
            args = resume_args(args, self.ckpt, args.resume, defaults=default)
            # this rank's own state (under torchrun every rank saved its own)
            self.own = (
                self.ckpt["ranks"][self.rank] if ctx is not None and ctx.enabled else self.ckpt
            )
        # the CPU threads, before the env is made (the MuJoCo backend sizes its pool from them);
        # args.json and the checkpoint keep the number `auto` resolved to
        flush_denormals()  # subnormal floats as zero: many times faster CPU arithmetic on them
        self.args = replace(args, threads=set_threads(args.threads, self.device))
        keep_host_memory()  # batch-sized host tensors without a page fault each step
        seed_everything(args.seed + self.rank)
        # next iteration, env steps, gradient steps (a file that counts updates adds to them)
        self.start_iter, self.step, self.updates, self.eval_result = 0, 0, 0, {}
        self.meters: list[Meter] = []
        self.hooks = _HOOKS[-1] if _HOOKS else Hooks()

    def start(
        self,
        env,
        state: dict,
        policy: Callable,
        meta: dict | None = None,
        extra: Callable[[], dict] | None = None,
        evaluate: Callable | None = None,
    ) -> None:
        """Check a resumed run's env (its saved spaces), restore `state` in place (anything with
        `load_state_dict`, a tensor copied into, a generator) with the RNGs, step, clock and
        schedule; make the NaN guard (watching every env step through `EpisodeStatistics`) and the
        schedule. An env that cannot save its games starts new ones: `EPISODE_STATE` keeps the
        file's fresh start. `evaluate`: `common.evaluate.evaluate` unless given (`ma_evaluate`)."""
        args = self.args
        check_spaces(self.ckpt, env, args.resume)
        self.env, self.state, self.policy, self.meta = env, state, policy, meta or {}
        self.extra, self.evaluate = extra or dict, evaluate
        self.elapsed = 0.0
        if self.ckpt is not None:
            # where the saved games stood belongs to games that are gone (keeps_episodes)
            gone = () if keeps_episodes(env) else EPISODE_STATE
            for name, obj in state.items():
                # an unused slot, a checkpoint from before it existed, a game that is gone
                if obj is None or name not in self.own or name in gone:
                    continue
                if isinstance(obj, torch.Tensor):
                    with torch.no_grad():
                        obj.copy_(self.own[name])
                elif isinstance(obj, torch.Generator):
                    obj.set_state(self.own[name].cpu())
                else:
                    obj.load_state_dict(self.own[name])
            self.start_iter, self.step, self.elapsed = (
                self.ckpt["iteration"],
                self.ckpt["global_step"],
                self.ckpt["seconds"],
            )
            self.updates = self.ckpt.get("updates", 0)
            set_rng_state(self.own["rng"])
        self.run_dir = self.logger = None
        self.ckpt_path = Path(args.out_dir) / "checkpoint.pt"
        # NaN/Inf: stop, keep the last good checkpoint
        self.guard = NumericGuard(self.device)
        self.ticks = Ticks(args.eval_every, args.save_every, self.step)
        if self.ckpt is not None and "ticks" in self.ckpt:  # the schedule where the run left it
            self.ticks.last_eval, self.ticks.last_save = self.ckpt["ticks"]
        self.episodes = find_wrapper(env, EpisodeStatistics)
        self.episodes.guard = self.guard  # every env step's observations and rewards

    def _open(self, num_iterations: int, steps_per_iteration: int, learning_starts: int) -> None:
        """Refuse a schedule that cannot train, then make the run directory and the logger (rank
        0)."""
        args = self.args
        if num_iterations <= 0:
            raise UserError(
                f"--total-steps {args.total_steps} is below one iteration "
                f"({steps_per_iteration} env steps)"
            )
        if learning_starts >= args.total_steps:
            raise UserError("--learning-starts >= --total-steps: nothing would be learned")
        if self.is_main and self.logger is None:
            self.run_dir = make_run_dir(args.out_dir, self.algo, args.env, args.seed, args.resume)
            resumed = self.step if args.resume else None
            self.logger = Logger(
                self.run_dir,
                self.algo,
                args,
                args.total_steps,
                args.track,
                args.wandb_project,
                args.quiet,
                self.elapsed,
                resume_step=resumed,
            )
            self.ckpt_path = self.guard.checkpoint = self.run_dir / "checkpoint.pt"
            RUNNING[:] = [self.ckpt_path]
            if self.hooks.on_open:
                self.hooks.on_open(self)

    def compile(self, fn: Callable, graphs: bool = True) -> Callable:
        """`fn` under `--compile` (`common.device.compile_fn`), else `fn` itself."""
        return compile_fn(fn, self.device, graphs) if self.args.compile else fn

    def capture(
        self, fn: Callable[[], None], state: list, enabled: bool = True, **kwargs
    ) -> Captured:
        """`fn()` replayed as CUDA graphs on CUDA (`common.graphs.Captured`; `state`: what it
        writes, for the check before capture)."""
        make = self.hooks.capture or Captured
        return make(fn, self.device, state=state, enabled=enabled, **kwargs)

    def meter(self, *names: str) -> Meter:
        """Statistics summed on the device (`common.logger.Meter`), logged as means."""
        self.meters.append(Meter(self.device, *names))
        return self.meters[-1]

    def iterations(
        self,
        num_iterations: int,
        steps_per_iteration: int,
        metrics: Callable[[], dict] = dict,
        learning_starts: int = 0,
        every: int = 1,
    ) -> Iterator[int]:
        """The training loop's contract, `for iteration in run.iterations(...)`: yield the iteration
        numbers from where the run stands (a resumed run: from its checkpoint's; with `every` > 1,
        the first of each segment of that many). Inside the loop body `run.step` is the env steps
        before this iteration. After the body returns, in this order:

        1. `run.step` grows by the iteration's `steps_per_iteration` env steps (all ranks');
        2. the NaN guard checks what the iteration watched (losses, parameters, every env step's
           observations and rewards);
        3. on the evaluation tick (`--eval-every` env steps, and at the end): rank 0 evaluates the
           deployable policy on a separate env;
        4. on the log tick (at most once a second, and on an evaluation): rank 0 logs the meters'
           means, the training episodes, `run.updates` (if the file counts them) and `metrics()`;
        5. on the checkpoint tick (`--save-every` env steps, and at the end): the checkpoint,
           atomic, never with a non-finite value (a collective under torchrun).

        Host syncs happen only on those ticks. The speed the progress line shows counts from the
        first iteration past `learning_starts` env steps. `run.iterations` refuses a schedule that
        cannot train (`--total-steps` below one iteration, `--learning-starts` past the end)."""
        self._open(num_iterations, steps_per_iteration, learning_starts)
        hint = resume_hint(self.ckpt_path) if self.is_main else contextlib.nullcontext()
        with hint:  # Ctrl-C: say which checkpoint to --resume from
            for iteration in range(self.start_iter, num_iterations, every):
                yield iteration
                last = min(iteration + every, num_iterations)
                self.step += (last - iteration) * steps_per_iteration
                self.guard.check(self.step)
                do_log, do_eval, do_save = self.ticks(self.step, is_last=last == num_iterations)
                if self.is_main and do_eval:
                    with self.logger.paused():
                        self.eval_result = (self.hooks.evaluate or self.evaluate or evaluate)(
                            self._evaluated(),
                            self.args.env,
                            self.args.eval_episodes,
                            seed=self.args.seed + 10_000,
                            device=self.device,
                        )
                if self.is_main and do_log:
                    stats = {k: v for m in self.meters for k, v in m.pop().items()}
                    if self.updates:
                        stats["updates"] = self.updates
                    row = self.logger.log(
                        self.step,
                        self.episodes.pop(),
                        self.eval_result if do_eval else None,
                        **stats,
                        **metrics(),
                    )
                    if self.hooks.on_log:
                        self.hooks.on_log(self, row)
                if do_save:
                    self.save(last)
                if self.is_main:
                    self.logger.burn_in(self.step, learned=self.step > learning_starts)
                    if self.hooks.on_iteration:
                        self.hooks.on_iteration(self)

    def save(self, next_iteration: int) -> None:
        """Write the checkpoint (module docstring); under torchrun a collective."""
        from common import distributed

        self.guard.check(self.step, sync=True)  # never a non-finite value in a checkpoint
        own = {name: _saved(obj) for name, obj in self.state.items()}
        own["rng"] = rng_state()
        # (gather=False: rank 0's state only)
        gather = self.gather and self.ctx is not None and self.ctx.enabled
        every = distributed.gather_to_main(self.ctx, own) if gather else None
        if not self.is_main:
            return
        save_checkpoint(
            self.ckpt_path,
            {
                "algo": self.algo,
                "env_id": self.args.env,
                "args": asdict(self.args),
                **self.meta,
                "spaces": spaces_of(self.env),
                **own,
                **self.extra(),
                **self._deployable(),
                "iteration": next_iteration,
                "global_step": self.step,
                "updates": self.updates,
                "seconds": self.logger.seconds,
                "ticks": (self.ticks.last_eval, self.ticks.last_save),
                **({"ranks": every} if every is not None else {}),
            },
        )
        if self.hooks.on_save:
            self.hooks.on_save(self, self.ckpt_path)

    def _evaluated(self):
        """The file's deployable `Policy` as `load_policy` gives it, or its `policy()`."""
        if isinstance(self.policy, Policy):
            return (
                deployed(self.policy, self.device)
                if isinstance(self.policy, RecurrentPolicy)
                else self.policy
            )
        return self.policy()

    def _deployable(self) -> dict:
        """The checkpoint's deployable policy: its tensors and how to rebuild it."""
        if not isinstance(self.policy, Policy):
            return {}
        return {
            "policy": {k: v.detach().clone() for k, v in self.policy.state_dict().items()},
            "policy_spec": self.policy.spec,
        }

    def finish(self, env) -> dict:
        """Close the logger and the env; the run's summary (seconds: before the plot)."""
        seconds = self.logger.seconds if self.is_main else float("nan")
        if self.is_main:
            self.logger.close()
        RUNNING.clear()
        env.close()
        return {
            "eval_return": self.eval_result.get("eval_return", float("nan")),
            "eval_return_std": self.eval_result.get("eval_return_std", float("nan")),
            "steps": self.step,
            "seconds": seconds,
            "checkpoint": str(self.ckpt_path),
            "run_dir": str(self.run_dir),
        }


def _saved(obj):
    """What the checkpoint keeps of one entry of a file's state."""
    if obj is None or isinstance(obj, torch.Tensor):
        return obj if obj is None else obj.detach()
    if isinstance(obj, torch.Generator):
        return obj.get_state()
    return obj.state_dict()
