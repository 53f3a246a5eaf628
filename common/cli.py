"""The one command-line entry of every algorithm file:

    if __name__ == "__main__":
        main(cli(Args, __doc__))                              # or, with per-env defaults:
        main(cli(Args, __doc__, defaults_for=default_args))

tyro parses the flags; a command line it cannot take (a misspelled flag, with the right one named;
a value of the wrong type) is refused in one line of our own, exit status 2. After parsing, a user
error ends the process with one line, `error: <message naming the fix>`, and exit
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
        if not _DEFER_RANGES:
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
    env_id = given.get("--env", args_cls().env)
    default = defaults_for(env_id, **kwargs)
    if description is not None and any(a in ("-h", "--help") for a in argv):
        description += task_defaults_note(args_cls, default)
    args = _parse(args_cls, default=default, description=description, args=argv)
    if ale_game_exists(env_id) and default == args_cls(env=env_id):
        # a file's own defaults are sized for small tasks: on Atari they run, and learn little
        print(
            f"note: this file has no row for {env_id}: the flags not given take its own defaults "
            f"(sized for small tasks); {ATARI_FLAGS}",
            file=sys.stderr,
        )
    return args


def task_defaults(args_cls, tasks: dict):
    """A file's `default_args(env_id, num_envs=None, device="auto")`: `args_cls(env=env_id)` with
    the task's row of `tasks`, if it has one. (A file whose defaults also depend on the scale of
    the run, the PPO files' batched MuJoCo tasks, writes its own.)"""
    from dataclasses import replace

    def default_args(env_id: str, num_envs: int | None = None, device: str = "auto"):
        return replace(args_cls(env=env_id), **tasks.get(task_id(env_id), {}))

    return default_args


MINATAR_GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")


def task_id(env_id: str) -> str:
    """The id a task's row is kept under: a MinAtar game's under `MinAtar/<Game>-v1` whichever of
    its ids names it (`-v0`, its full action set; `<Game>-MinAtar`, gymnax's name)."""
    for game in MINATAR_GAMES:
        if env_id in (f"MinAtar/{game}-v0", f"{game}-MinAtar"):
            return f"MinAtar/{game}-v1"
    return env_id


def ale_id(rom: str) -> str:
    """`space_invaders` -> `ALE/SpaceInvaders-v5` (the id gymnasium registers for an ale-py ROM)."""
    return f"ALE/{rom.title().replace('_', '')}-v5"


def ale_roms() -> list[str]:
    """The ROMs ale-py has (none without it)."""
    try:
        from ale_py.roms import get_all_rom_ids
    except ImportError:
        return []
    return list(get_all_rom_ids())


def ale_rom(env_id: str) -> str | None:
    """`ALE/SpaceInvaders-v5` -> `space_invaders`, the ROM ale-py knows (for a game it does not
    know, the name it would have); None for an id of another form."""
    import re

    m = re.fullmatch(r"ALE/([A-Za-z0-9]+)-v5", env_id)
    if m is None:
        return None
    known = [rom for rom in ale_roms() if ale_id(rom) == env_id]  # TicTacToe3D: tic_tac_toe_3d
    return known[0] if known else re.sub(r"(?<!^)(?=[A-Z])", "_", m.group(1)).lower()


def ale_game_exists(env_id: str) -> bool:
    return (rom := ale_rom(env_id)) is not None and rom in ale_roms()


def rollout_shape(
    num_envs: int,
    batch: int = 4096,
    minibatch: int | None = 512,
    horizon: tuple[int, int] = (8, 2048),
    sequences: bool = False,
) -> dict:
    """The rollout of an on-policy file's CPU defaults at `num_envs` envs: a horizon within
    `horizon` that keeps the batch near `batch` env steps, and minibatches of about `minibatch`
    (with `sequences`, a count that divides `num_envs`: a recurrent file's minibatches are whole
    sub-env sequences; None: one update a rollout, no minibatches). As N changes, the gradient
    steps per env step stay about the same: at N = 64 a 64-step rollout in 8 minibatches, at 256
    16 steps in 8, at 1024 8 steps in 16 (bench/README.md#a-stable-solve)."""
    steps = min(max(batch // num_envs, horizon[0]), horizon[1])
    if minibatch is None:
        return dict(num_envs=num_envs, num_steps=steps)
    most = max(1, num_envs * steps // minibatch)
    whole = num_envs if sequences else num_envs * steps
    count = max(d for d in range(1, most + 1) if whole % d == 0)
    return dict(num_envs=num_envs, num_steps=steps, num_minibatches=count)


ATARI_FLAGS = (
    "the papers' Atari settings as flags: README.md, 'Learning from pixels' "
    "(bench/minatar_learn.py's ATARI)"
)


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
        atari = f"; {ATARI_FLAGS}" if default.env.startswith("ALE/") else ""
        return (
            f"\n\nDefaults below: the file's own ({default.env} has no row of task defaults"
            f"{atari})."
        )
    return (
        f"\n\nDefaults below for {default.env}: the file's own, except {', '.join(changed)} (set "
        "for this task; other tasks get other values: --env X --help)."
    )


def _flag(name: str, v) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(v, bool):
        return flag if v else "--no-" + flag[2:]
    return f"{flag} {' '.join(map(str, v)) if isinstance(v, (tuple, list)) else v}"


def _parse(args_cls, **kwargs):
    """`tyro.cli` with one-line parse errors, `error: <what> — see PROG --help`, exit status 2:
    the command line is checked first against the dataclass's own fields (an unknown flag, with
    the closest known ones; a value its field's type cannot take; a value without a flag), then
    tyro parses it and the ranges are checked on the result (`check_ranges`). A command line that
    tyro still refuses gets a generic line; `PODRACER_DEBUG=1` shows tyro's own message."""
    import contextlib
    import io

    import tyro

    if os.environ.get("PODRACER_DEBUG", "") not in ("", "0"):
        return tyro.cli(args_cls, **kwargs)
    argv, prog = list(kwargs.get("args") or []), sys.argv[0]
    help_asked = any(a in ("-h", "--help") for a in argv)
    buf = io.StringIO()
    try:
        if not help_asked:
            _check_command_line(args_cls, argv)
        global _DEFER_RANGES
        _DEFER_RANGES = True  # tyro builds the dataclass; its ranges are checked just below
        try:
            with contextlib.redirect_stderr(buf):
                args = tyro.cli(args_cls, **kwargs)
        finally:
            _DEFER_RANGES = False
        check_ranges(args)
        return args
    except UserError as e:
        see = f" See {prog} --help" if str(e).endswith("?") else f" — see {prog} --help"
        print(f"error: {e}{see}", file=sys.stderr, flush=True)
    except SystemExit as e:
        if e.code in (0, None):  # --help
            sys.stderr.write(buf.getvalue())
            raise
        print(
            f"error: could not parse {' '.join(argv)!r} — see {prog} --help "
            "(PODRACER_DEBUG=1: the parser's own message)",
            file=sys.stderr,
            flush=True,
        )
    raise SystemExit(2) from None


_DEFER_RANGES = False  # set while tyro builds an `Args` (`_parse` checks it after)


def _check_command_line(args_cls, argv: list[str]) -> None:
    """Refuse (`UserError`) an unknown flag, a value the flag's type cannot take, a flag without
    its value, and a value without a flag: what tyro would refuse, said in one line of our own."""
    import dataclasses
    import difflib
    import typing

    hints = typing.get_type_hints(args_cls, include_extras=True)
    fields = dataclasses.fields(args_cls)
    # tyro.conf.Positional fields take values without a flag, in order
    positional = sum(
        "Positional" in repr(getattr(hints[f.name], "__metadata__", ())) for f in fields
    )
    kinds = {"--" + f.name.replace("_", "-"): _kind(hints[f.name]) for f in fields}
    known = set(kinds) | {"--no-" + n[2:] for n, k in kinds.items() if k == "bool"}
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if not token.startswith("--"):
            if positional:
                positional -= 1
                continue
            raise UserError(f"{token!r} is a value without a flag")
        name, eq, value = token.partition("=")
        name = "--" + name[2:].replace("_", "-")
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            hint = f" — did you mean {close[0]}?" if close else ""
            raise UserError(f"unrecognized option {name}{hint}")
        kind = "bool" if name.startswith("--no-") and name not in kinds else kinds[name]
        if kind == "bool":
            if eq:
                raise UserError(f"{name} takes no value (--no-{name[2:]} turns it off)")
            continue
        values = [value] if eq else []
        while not eq and i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
            if not isinstance(kind, tuple) or kind[0] != "many":
                break
        if not values:
            raise UserError(f"{name} needs a value")
        for v in values:
            _check_value(name, v, kind)


def _kind(t):
    """What a field's type takes on the command line: "bool", "int", "float", "str", ("choice",
    values), ("many", kind) for a tuple, ("optional", kind) for `X | None`, or None (unchecked)."""
    import types
    import typing

    if typing.get_origin(t) is Annotated:
        t = typing.get_args(t)[0]
    origin, args = typing.get_origin(t), typing.get_args(t)
    if t in (bool, int, float, str):
        return t.__name__
    if origin is typing.Literal:
        return ("choice", tuple(str(a) for a in args))
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return ("optional", _kind(rest[0])) if len(rest) == 1 else None
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return ("many", _kind(args[0]))
    return None


def _check_value(name: str, v: str, kind) -> None:
    if isinstance(kind, tuple) and kind[0] == "optional":
        if v == "None":
            return
        kind = kind[1]
    if isinstance(kind, tuple) and kind[0] == "many":
        kind = kind[1]
    try:
        if kind == "int":
            int(v)
        elif kind == "float":
            float(v)
    except ValueError:
        raise UserError(
            f"{name} {v}: not {'an integer' if kind == 'int' else 'a number'}"
        ) from None
    if isinstance(kind, tuple) and kind[0] == "choice" and v not in kind[1]:
        raise UserError(f"{name} {v}: one of {', '.join(kind[1])}")


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
