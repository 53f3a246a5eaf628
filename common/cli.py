"""The one command-line entry of every algorithm file, `main(cli(Args, __doc__,
defaults_for=default_args))`: tyro parses the flags (a command line it refuses gets its own message,
exit status 2); after parsing, a `common.errors.UserError` or an allocation that does not fit ends
the process with one line, `error: <the fix>`, exit status 2, no traceback (`PODRACER_DEBUG=1` shows
it). Any other exception is a bug and keeps its traceback."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Annotated, Literal

from common.errors import UserError


@dataclass
class RunArgs:
    """The run header every file's `Args` starts with (`class Args(RunArgs)`); a file overrides a
    default or a field's help by declaring the field again."""

    # environment id: a torch-native one (CartPole-v1, Pendulum-v1, ...) or any gymnasium id
    env: str = "CartPole-v1"
    num_envs: int = 16  # number of parallel sub-environments
    seed: int = 1  # seed of torch, numpy, python and the environments
    device: str = "auto"  # `auto` (CUDA when present, else CPU), `cpu`, `cuda`, `cuda:N`
    # CPU threads: `auto` is OMP_NUM_THREADS when set, else one torch thread on a CPU run (runs side
    # by side then take a core each; a CNN run alone is faster with more) and torch's own on a GPU;
    # the CPU MuJoCo backend takes the number given, else the cores, and host (gymnasium) sub-envs
    # run in worker processes from 4 of those, in-process below
    threads: int | Literal["auto"] = "auto"
    # MuJoCo tasks: `auto` (MuJoCo Warp on CUDA where it is installed, else the CPU batch), `batch`
    # or `warp`
    mujoco_backend: str = "auto"
    total_steps: Count = 1_000_000  # total environment steps (summed over sub-envs)
    track: bool = False  # log to Weights & Biases (works with WANDB_MODE=offline)
    wandb_project: str = "torch-podracer"  # wandb project name
    out_dir: str = "runs"  # where run directories (metrics, curves, checkpoints) are created
    # also write the logged scalars as TensorBoard events in the run directory (`tensorboard
    # --logdir runs`)
    tensorboard: bool = True
    # draw `curves.png` at the end of the run (`python -m tools.plot RUN_DIR` at any time)
    plots: bool = True
    eval_every: Count0 = 100_000  # evaluate the policy every this many env steps (0: at the end)
    eval_episodes: Count = 10  # episodes per evaluation (run in parallel on a separate env)
    save_every: Count0 = 200_000  # write the checkpoint every this many env steps (0: at the end)
    resume: str | None = None  # path of a checkpoint.pt to continue from
    # torch.compile the updates and the policy step (CUDA graphs and capturable Adams on CUDA)
    compile: bool = False
    quiet: bool = False  # no console progress line

    def __post_init__(self):
        check_ranges(self)


@dataclass(frozen=True)
class Range:
    """The values a field admits, declared with its type (`gamma: Unit = 0.99`): at least `lo`
    (above it with `open_lo`), at most `hi`, finite unless `finite=False`; each element of a
    tuple."""

    lo: float
    hi: float | None = None
    open_lo: bool = False
    finite: bool = True


Count = Annotated[int, Range(1)]  # a number of things or steps: at least 1
Count0 = Annotated[int, Range(0)]  # an interval or a warm-up: 0 or more (0: off)
Frac = Annotated[float, Range(0, 1, open_lo=True)]  # a Polyak rate: above 0, at most 1
Unit = Annotated[float, Range(0, 1)]  # a discount, a mixing weight, a probability
# a learning rate or a coefficient that must be positive
Rate = Annotated[float, Range(0, open_lo=True)]
NonNeg = Annotated[float, Range(0)]  # a coefficient or a noise scale: 0 or more
# a clipping bound: positive, `inf` for none
Clip = Annotated[float, Range(0, open_lo=True, finite=False)]
Layers = Annotated[tuple[int, ...], Range(1)]  # hidden layer sizes: every layer at least 1 unit


def check_ranges(args) -> None:
    """Refuse, naming the flag, a NaN or a value outside its field's `Range` (what depends on other
    settings or the env is the file's `check_args`)."""
    import dataclasses
    import math
    import typing

    hints = typing.get_type_hints(type(args), include_extras=True)
    for f in dataclasses.fields(args):
        v, flag = getattr(args, f.name), "--" + f.name.replace("_", "-")
        if isinstance(v, float) and math.isnan(v):
            raise UserError(f"{flag} is NaN; give it a number")
        rng = next(
            (m for m in getattr(hints.get(f.name), "__metadata__", ()) if isinstance(m, Range)),
            None,
        )
        if rng is None or isinstance(v, bool) or v is None:
            continue
        for x in v if isinstance(v, tuple) else (v,):
            if isinstance(x, (int, float)) and not isinstance(x, bool) and not _within(x, rng):
                raise UserError(_range_error(flag, v, rng))


def _within(x: float, rng: Range) -> bool:
    import math

    return (
        (x > rng.lo if rng.open_lo else x >= rng.lo)
        and (rng.hi is None or x <= rng.hi)
        and not (rng.finite and math.isinf(x))
    )


def _range_error(flag: str, v, rng: Range) -> str:
    if isinstance(v, tuple):
        return f"{flag} {' '.join(map(str, v))}: every value must be at least {rng.lo:g}"
    if rng.hi is not None:
        return f"{flag} must be in {'(' if rng.open_lo else '['}{rng.lo:g}, {rng.hi:g}], got {v}"
    if rng.open_lo:
        return f"{flag} must be positive{' and finite' if rng.finite else ''}, got {v}"
    bound = "0 or more" if rng.lo == 0 else f"at least {rng.lo:g}"
    return (
        f"{flag} must be {bound}{' and finite' if rng.finite and isinstance(v, float) else ''}, "
        f"got {v}"
    )


def cli(args_cls, description: str | None = None, defaults_for=None, argv: list[str] | None = None):
    """`tyro.cli(args_cls)` on `argv` (default: the command line), starting from
    `defaults_for(env_id, num_envs=None, device=...)` for the `--env`, `--num-envs` and `--device`
    given (`--env Ant --help` shows the MuJoCo defaults). Installs `user_error_hook`."""
    sys.excepthook = user_error_hook
    argv = sys.argv[1:] if argv is None else list(argv)
    if defaults_for is None:
        return _parse(args_cls, description=description, args=argv)
    given = {}  # the flags the defaults may depend on, as given on the command line
    for i, a in enumerate(argv):
        for flag in ("--env", "--num-envs", "--device"):
            if a == flag and i + 1 < len(argv):
                given[flag] = argv[i + 1]
            elif a.startswith(flag + "="):
                given[flag] = a.split("=", 1)[1]
    kwargs = {"device": given.get("--device", args_cls().device)}
    if given.get("--num-envs", "").isdigit():
        kwargs["num_envs"] = int(given["--num-envs"])
    env_id = given.get("--env", args_cls().env)
    default = defaults_for(env_id, **kwargs)
    if description is not None and any(a in ("-h", "--help") for a in argv):
        rows = getattr(sys.modules.get(args_cls.__module__), "TASK_DEFAULTS", {})
        description += task_defaults_note(args_cls, default, tuple(rows))
    args = _parse(args_cls, default=default, description=description, args=argv)
    if env_id.startswith("ALE/") and default == args_cls(env=env_id):
        # a file's own defaults are sized for small tasks: on Atari they run, and learn little
        print(
            f"note: this file has no row for {env_id}: the flags not given take its own defaults "
            f"(sized for small tasks); {ATARI_FLAGS}",
            file=sys.stderr,
        )
    return args


def _parse(args_cls, **kwargs):
    import tyro

    return tyro.cli(args_cls, **kwargs)


def task_defaults(args_cls, tasks: dict):
    """A file's `default_args(env_id, num_envs=None, device="auto")`: `args_cls(env=env_id)` with
    the task's row of `tasks`, if it has one."""
    from dataclasses import replace

    def default_args(env_id: str, num_envs: int | None = None, device: str = "auto"):
        return replace(args_cls(env=env_id), **tasks.get(task_id(env_id), {}))

    return default_args


MINATAR_GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
MUJOCO_TASKS = ("Ant", "HalfCheetah", "Hopper", "Walker2d", "Humanoid")  # the batched v5 tasks


def task_id(env_id: str) -> str:
    """The id a task's row is kept under: `MinAtar/<Game>-v1` for each of a MinAtar game's ids,
    `<Task>-v5` for a batched MuJoCo task's short name (`--env Hopper`)."""
    for game in MINATAR_GAMES:
        if env_id in (f"MinAtar/{game}-v0", f"{game}-MinAtar"):
            return f"MinAtar/{game}-v1"
    return f"{env_id}-v5" if env_id in MUJOCO_TASKS else env_id


def rollout_shape(
    num_envs: int,
    batch: int = 4096,
    minibatch: int | None = 512,
    horizon: tuple[int, int] = (8, 2048),
    sequences: bool = False,
) -> dict:
    """An on-policy file's CPU rollout at `num_envs` envs: a horizon within `horizon` keeping the
    batch near `batch` env steps, minibatches of about `minibatch` (None: none; with `sequences`, a
    count dividing `num_envs`: whole sub-env sequences), so the gradient steps per env step stay
    about the same as N changes (bench/NOTES.md#a-stable-solve)."""
    steps = min(max(batch // num_envs, horizon[0]), horizon[1])
    if minibatch is None:
        return dict(num_envs=num_envs, num_steps=steps)
    most = max(1, num_envs * steps // minibatch)
    whole = num_envs if sequences else num_envs * steps
    count = max(d for d in range(1, most + 1) if whole % d == 0)
    return dict(num_envs=num_envs, num_steps=steps, num_minibatches=count)


ATARI_FLAGS = (
    "the papers' Atari settings as flags: docs/usage.md, 'Learning from pixels' "
    "(bench/experiments.py's ATARI)"
)


def task_defaults_note(args_cls, default, tasks: tuple[str, ...] = ()) -> str:
    """The help's paragraph naming, as flags, the defaults the task's row sets over the file's,
    then the tasks that have a row (`tasks`: the file's TASK_DEFAULTS keys)."""
    import dataclasses

    rows = f" Tasks with a row: {', '.join(tasks)}." if tasks else ""

    base = args_cls(env=default.env)
    changed = [
        _flag(f.name, getattr(default, f.name))
        for f in dataclasses.fields(default)
        if f.name != "env" and getattr(default, f.name) != getattr(base, f.name)
    ]
    if not changed:
        atari = f"; {ATARI_FLAGS}" if default.env.startswith("ALE/") else ""
        return (
            f"\n\nDefaults below: the file's own ({default.env} has no row of task defaults"
            f"{atari}).{rows}"
        )
    return (
        f"\n\nDefaults below for {default.env}: the file's own, except {', '.join(changed)} (set "
        f"for this task; other tasks get other values: --env X --help).{rows}"
    )


def _flag(name: str, v) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(v, bool):
        return flag if v else "--no-" + flag[2:]
    return f"{flag} {' '.join(map(str, v)) if isinstance(v, (tuple, list)) else v}"


class ArgumentParser(argparse.ArgumentParser):
    """argparse for the other entry points (bench/): a parse error is one line, exit status 2."""

    def error(self, message: str):
        if os.environ.get("PODRACER_DEBUG", "") not in ("", "0"):
            super().error(message)
        print(f"error: {message} — see {self.prog} --help", file=sys.stderr, flush=True)
        raise SystemExit(2)


def install_error_hook() -> None:
    """`user_error_hook` for the entry points that do not go through `cli` (bench/, population/)."""
    sys.excepthook = user_error_hook


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is an allocation that did not fit (CPU or CUDA): sizes the user chose."""
    import torch

    text = str(exc)
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError)
        and ("not enough memory" in text or "can't allocate memory" in text)
    )


def user_error_message(exc_type, exc, tb) -> str | None:
    """The one line a user error gets, or None for a bug (traceback)."""
    if os.environ.get("PODRACER_DEBUG", "") not in ("", "0"):
        return None
    if isinstance(exc, UserError):
        return f"error: {exc}"
    if out_of_memory(exc):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc_type.__name__
        return (
            f"error: out of memory ({first}) — lower the sizes: --num-envs, --buffer-size, "
            "--batch-size, --num-steps, --hidden"
        )
    return None


def user_error_hook(exc_type, exc, tb) -> None:
    """`sys.excepthook`: a user error is one line on stderr and exit status 2 (Ctrl-C in a run: the
    checkpoint to resume from, 130); anything else goes to Python's own hook."""
    if issubclass(exc_type, KeyboardInterrupt):
        from common.checkpoint import RUNNING, interrupted

        if RUNNING:  # Ctrl-C in a file's loop body (the run shell's own work has `resume_hint`)
            print("\n" + interrupted(RUNNING[0]), file=sys.__stderr__ or sys.stderr, flush=True)
            raise SystemExit(130)
    line = user_error_message(exc_type, exc, tb)
    if line is not None:
        # the process's own stderr: torch.distributed's wrapper of this hook drops sys.stderr
        print(line, file=sys.__stderr__ or sys.stderr, flush=True)
        raise SystemExit(2)
    sys.__excepthook__(exc_type, exc, tb)
