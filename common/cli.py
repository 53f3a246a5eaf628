"""The one command-line entry of every algorithm file:

    if __name__ == "__main__":
        main(cli(Args, __doc__))                              # or, with per-env defaults:
        main(cli(Args, __doc__, defaults_for=default_args))

tyro parses the flags (a misspelled flag: tyro names the right one and exits with status 2). After
parsing, a user error ends the process with one line, `error: <message naming the fix>`, and exit
status 2, without a traceback: any `common.errors.UserError` (unknown env, wrong action kind,
impossible sizes, foreign checkpoint, unwritable directory, a missing optional package, a run that
diverged), and an allocation that does not fit in memory (sizes the user chose). Every other
exception is a bug and keeps its traceback. `PODRACER_DEBUG=1` in the environment shows the
traceback of user errors too.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Annotated

from common.errors import UserError


@dataclass
class RunArgs:
    """The run header every algorithm file's `Args` starts with (`class Args(RunArgs)`): where and
    how long to run, logging, evaluation, checkpoints. A file overrides a default (or a field's
    help) by declaring the field again; it keeps its place at the head of `--help`."""

    # environment id: a torch-native one (CartPole-v1, Pendulum-v1, ...) or any gymnasium id
    env: str = "CartPole-v1"
    num_envs: int = 16  # number of parallel sub-environments
    seed: int = 1  # seed of torch, numpy, python and the environments
    device: str = "auto"  # `auto` (CUDA when present, else CPU), `cpu`, `cuda`, `cuda:N`
    # MuJoCo tasks: `auto` (MuJoCo Warp on CUDA, else the CPU batch), `batch` or `warp`
    mujoco_backend: str = "auto"
    total_steps: Count = 1_000_000  # total environment steps (summed over sub-envs)
    track: bool = False  # log to Weights & Biases (works with WANDB_MODE=offline)
    wandb_project: str = "torch-podracer"  # wandb project name
    out_dir: str = "runs"  # where run directories (metrics, curves, checkpoints) are created
    # also write the logged scalars as TensorBoard events in the run directory (`tensorboard
    # --logdir runs`)
    tensorboard: bool = True
    # redraw `curves.png` at every evaluation and at the end; `--no-plots` for many short runs
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
    """The values a field of an `Args` admits, declared with its type (`gamma: Unit = 0.99`) and
    checked by `check_ranges` when the `Args` is built: at least `lo` (above it with `open_lo`), at
    most `hi` if given, finite unless `finite=False`; for a tuple, each element."""

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
    """Refuse, naming the flag, a value no run can use: a NaN anywhere, and any value outside the
    `Range` its field declares (see `Count`, `Unit`, `Rate`, ...). (The algorithm files check what
    depends on other settings or on the env, in their `check_args`.)"""
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
    """`tyro.cli(args_cls)` on `argv` (default: the command line), where the defaults may depend on
    the task and its scale: `defaults_for(env_id, num_envs=None, device=...)` returns the `args_cls`
    instance to start from for the `--env`, `--num-envs` and `--device` given (so that
    `--env Ant --help` shows the MuJoCo defaults for this machine). Installs `user_error_hook`."""
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
    default = defaults_for(given.get("--env", args_cls().env), **kwargs)
    if description is not None and any(a in ("-h", "--help") for a in argv):
        description += task_defaults_note(args_cls, default)
    return _parse(args_cls, default=default, description=description, args=argv)


def task_defaults(args_cls, tasks: dict):
    """A file's `default_args(env_id, num_envs=None, device="auto")`: `args_cls(env=env_id)` with
    the task's row of `tasks`, if it has one. (A file whose defaults also depend on the scale of
    the run, the PPO files' batched MuJoCo tasks, writes its own.)"""
    from dataclasses import replace

    def default_args(env_id: str, num_envs: int | None = None, device: str = "auto"):
        return replace(args_cls(env=env_id), **tasks.get(env_id, {}))

    return default_args


def task_defaults_note(args_cls, default) -> str:
    """The help's paragraph naming the defaults that the task's row (or its scale) sets over the
    dataclass's, in flag syntax, or saying that the task has none."""
    import dataclasses

    base = args_cls(env=default.env)
    changed = [
        _flag(f.name, getattr(default, f.name))
        for f in dataclasses.fields(default)
        if f.name != "env" and getattr(default, f.name) != getattr(base, f.name)
    ]
    if not changed:
        return f"\n\nDefaults below: the file's own ({default.env} has no row of task defaults)."
    return (
        f"\n\nDefaults below for {default.env}: the file's own, except {', '.join(changed)} (set "
        "for this task; other tasks get other values: --env X --help)."
    )


def _flag(name: str, v) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(v, bool):
        return flag if v else "--no-" + flag[2:]
    return f"{flag} {' '.join(map(str, v)) if isinstance(v, (tuple, list)) else v}"


_BOX = "│╭╮╰╯─"


def _parse(args_cls, **kwargs):
    """`tyro.cli`, with a parse error (misspelled flag, bad value) condensed from tyro's framed
    panel to one line, `error: <what> — <the fix>`, exit status 2 (`PODRACER_DEBUG=1`: tyro's own
    panel)."""
    import contextlib
    import io

    import tyro

    if os.environ.get("PODRACER_DEBUG", "") not in ("", "0"):
        return tyro.cli(args_cls, **kwargs)
    buf = io.StringIO()
    try:
        with contextlib.redirect_stderr(buf):
            return tyro.cli(args_cls, **kwargs)
    except SystemExit as e:
        if e.code in (0, None):
            sys.stderr.write(buf.getvalue())
            raise
        print(_condense(buf.getvalue()), file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def _condense(panel: str) -> str:
    """tyro's error panel as one line: its message (the panel's first section), the flags it
    suggests, where the help is."""
    sections, cur = [], []
    for ln in panel.splitlines():
        ln = ln.strip()
        if not ln.startswith("│"):  # the title and bottom bars
            continue
        body = ln.strip(_BOX).strip()
        if body and not set(body) - set(_BOX):  # a separator inside the panel
            sections.append(cur)
            cur = []
        elif body:
            cur.append(body)
    sections = [sec for sec in sections + [cur] if sec]
    if not sections:  # not a panel (another tyro version): its first line as it is
        first = next(
            (ln.strip() for ln in panel.splitlines() if ln.strip()),
            "could not parse the command line",
        )
        return f"error: {first.removeprefix('error: ')} — see --help"
    what, suggest, see = " ".join(sections[0]), [], ""
    # a range check of RunArgs.__post_init__: its own message
    what = what.removeprefix("Error parsing Args: ")
    for sec in sections[1:]:
        if sec[0].startswith("Perhaps you meant"):
            suggest = [x.split()[0] for x in sec[1:] if x.startswith("--")][:3]
        elif sec[0].startswith("For full helptext"):
            see = sec[0].split(",", 1)[-1].replace("see ", "").replace("run ", "").strip()
    fix = f"did you mean {' or '.join(suggest)}?" if suggest else ""
    if see:
        fix = f"{fix} See {see}" if fix else f"see {see}"
    return f"error: {what}" + (f" — {fix}" if fix else "")


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser for the other entry points (bench/): a parse error is one line naming the
    fix, `error: <what> — see PROG --help`, exit status 2, not the usage block."""

    def error(self, message: str):
        if os.environ.get("PODRACER_DEBUG", "") not in ("", "0"):
            super().error(message)
        print(f"error: {message} — see {self.prog} --help", file=sys.stderr, flush=True)
        raise SystemExit(2)


def install_error_hook() -> None:
    """Make this process's uncaught user errors one line and exit status 2 (`user_error_hook`);
    `cli` does this for the algorithm files, the other entry points (bench/, population/) call it
    first thing."""
    sys.excepthook = user_error_hook


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is an allocation that did not fit (torch's CPU allocator or CUDA): sizes the
    user chose."""
    import torch

    text = str(exc)
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError)
        and ("not enough memory" in text or "can't allocate memory" in text)
    )


def user_error_message(exc_type, exc, tb) -> str | None:
    """The one line a user error gets (see the module docstring), or None for a bug (traceback)."""
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
    """`sys.excepthook`: a user error (see the module docstring) or an allocation that did not fit
    is one line on stderr and exit status 2; anything else goes to Python's own hook (traceback,
    exit status 1)."""
    if (
        issubclass(exc_type, KeyboardInterrupt)
        and "common.run" in sys.modules
        and sys.modules["common.run"].ACTIVE
    ):
        # Ctrl-C inside a file's loop (the run shell's own work has its `resume_hint`): the same one
        # line
        from common.checkpoint import interrupted

        print(
            "\n" + interrupted(sys.modules["common.run"].ACTIVE[0]),
            file=sys.__stderr__ or sys.stderr,
            flush=True,
        )
        raise SystemExit(130)
    line = user_error_message(exc_type, exc, tb)
    if line is not None:
        # the process's own stderr: torch.distributed wraps this hook in one that captures
        # sys.stderr and would drop the line when the hook exits
        print(line, file=sys.__stderr__ or sys.stderr, flush=True)
        raise SystemExit(2)
    sys.__excepthook__(exc_type, exc, tb)
