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
from pathlib import Path

from common.errors import UserError



@dataclass
class RunArgs:
    """The run header every algorithm file's `Args` starts with (`class Args(RunArgs)`): where and how long
    to run, logging, evaluation, checkpoints. A file overrides a default (or a field's help) by declaring the
    field again; it keeps its place at the head of `--help`."""

    env: str = "CartPole-v1"
    """environment id: a torch-native one (CartPole-v1, Pendulum-v1, ...) or any gymnasium id"""
    num_envs: int = 16
    """number of parallel sub-environments"""
    seed: int = 1
    """seed of torch, numpy, python and the environments"""
    device: str = "auto"
    """`auto` (CUDA when present, else CPU), `cpu`, `cuda`, `cuda:N`"""
    mujoco_backend: str = "auto"
    """MuJoCo tasks: `auto` (MuJoCo Warp on CUDA, else the CPU batch), `batch` or `warp`"""
    total_steps: int = 1_000_000
    """total environment steps (summed over sub-envs)"""
    track: bool = False
    """log to Weights & Biases (works with WANDB_MODE=offline)"""
    wandb_project: str = "torch-podracer"
    """wandb project name"""
    out_dir: str = "runs"
    """where run directories (metrics, curves, checkpoints) are created"""
    tensorboard: bool = True
    """also write the logged scalars as TensorBoard events in the run directory (`tensorboard --logdir runs`)"""
    plots: bool = True
    """redraw `curves.png` at every evaluation and at the end; `--no-plots` for many short runs"""
    eval_every: int = 100_000
    """evaluate the deterministic policy every this many environment steps (0: only at the end)"""
    eval_episodes: int = 10
    """episodes per evaluation (run in parallel on a separate env)"""
    save_every: int = 200_000
    """write the checkpoint every this many environment steps (0: only at the end)"""
    resume: str | None = None
    """path of a checkpoint.pt to continue from"""
    compile: bool = False
    """torch.compile the updates and the policy step (CUDA graphs and capturable Adams on CUDA)"""
    quiet: bool = False
    """no console progress line"""

    def __post_init__(self):
        check_ranges(self)


# range checks by field name, for whichever of these fields an algorithm's Args has (`check_ranges`)
AT_LEAST_ONE = {"total_steps", "batch_size", "buffer_size", "num_steps", "num_minibatches", "update_epochs",
                "eval_episodes", "target_every", "gradient_steps", "policy_delay", "num_critics", "num_min", "utd",
                "n_step", "rnn_hidden"}
AT_LEAST_ZERO = {"eval_every", "save_every", "learning_starts", "fuse_every"}
IN_UNIT = {"gamma", "tau", "gae_lambda", "q_lambda", "start_e", "end_e", "exploration_fraction", "per_alpha",
           "per_beta", "h_term_gamma", "h_term_lambda", "h_term_drop_rate"}
POSITIVE = {"learning_rate", "init_alpha", "clip_coef", "desired_kl", "max_grad_norm"}  # and every *_lr
NON_NEGATIVE = {"ent_coef", "vf_coef", "exploration_noise", "target_noise", "noise_clip"}


def check_ranges(args) -> None:
    """Refuse, naming the flag, a value no run can use: a count below its minimum, a NaN, a learning rate that
    is not a positive number, a discount or a mixing weight outside [0, 1], a layer without units. (The
    algorithm files check what depends on other settings or on the env, in their `check_args`.)"""
    import dataclasses
    import math

    for f in dataclasses.fields(args):
        v, name, flag = getattr(args, f.name), f.name, "--" + f.name.replace("_", "-")
        if isinstance(v, bool) or v is None:
            continue
        if isinstance(v, float) and math.isnan(v):
            raise UserError(f"{flag} is NaN; give it a number")
        if name in AT_LEAST_ONE and isinstance(v, int) and v < 1:
            raise UserError(f"{flag} must be at least 1, got {v}")
        if name in AT_LEAST_ZERO and isinstance(v, int) and v < 0:
            raise UserError(f"{flag} must be 0 or more, got {v}")
        if name in IN_UNIT and isinstance(v, (int, float)) and not 0 <= v <= 1:
            raise UserError(f"{flag} must be in [0, 1], got {v}")
        if (name in POSITIVE or name.endswith("_lr")) and isinstance(v, (int, float)) and not v > 0:
            raise UserError(f"{flag} must be positive, got {v}")
        if (name in POSITIVE and name != "max_grad_norm" or name.endswith("_lr")) and isinstance(v, float) \
                and math.isinf(v):
            raise UserError(f"{flag} must be finite, got {v}")
        if name in NON_NEGATIVE and isinstance(v, (int, float)) and not 0 <= v < math.inf:
            raise UserError(f"{flag} must be a finite number >= 0, got {v}")
        if name == "hidden" and isinstance(v, tuple) and any(not isinstance(h, int) or h < 1 for h in v):
            raise UserError(f"--hidden {' '.join(map(str, v))}: every layer needs at least 1 unit")


def cli(args_cls, description: str | None = None, defaults_for=None, argv: list[str] | None = None):
    """`tyro.cli(args_cls)` on `argv` (default: the command line), where the defaults may depend on
    the task and its scale: `defaults_for(env_id, num_envs=None, device=...)` returns the `args_cls`
    instance to start from for the `--env`, `--num-envs` and `--device` given (so that `--env Ant --help`
    shows the MuJoCo defaults for this machine). Installs `user_error_hook`."""
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


def task_defaults_note(args_cls, default) -> str:
    """The help's paragraph naming the defaults that the task's row (or its scale) sets over the dataclass's, in
    flag syntax, or saying that the task has none."""
    import dataclasses

    base = args_cls(env=default.env)
    changed = [_flag(f.name, getattr(default, f.name)) for f in dataclasses.fields(default)
               if f.name != "env" and getattr(default, f.name) != getattr(base, f.name)]
    if not changed:
        return f"\n\nDefaults below: the file's own ({default.env} has no row of task defaults)."
    return (f"\n\nDefaults below for {default.env}: the file's own, except {', '.join(changed)} (set for this task; "
            f"other tasks get other values: --env X --help).")


def _flag(name: str, v) -> str:
    flag = "--" + name.replace("_", "-")
    if isinstance(v, bool):
        return flag if v else "--no-" + flag[2:]
    return f"{flag} {' '.join(map(str, v)) if isinstance(v, (tuple, list)) else v}"


_BOX = "│╭╮╰╯─"


def _parse(args_cls, **kwargs):
    """`tyro.cli`, with a parse error (misspelled flag, bad value) condensed from tyro's framed panel to
    one line, `error: <what> — <the fix>`, exit status 2 (`PODRACER_DEBUG=1`: tyro's own panel)."""
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
    """tyro's error panel as one line: its message (the panel's first section), the flags it suggests,
    where the help is."""
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
        first = next((ln.strip() for ln in panel.splitlines() if ln.strip()), "could not parse the command line")
        return f"error: {first.removeprefix('error: ')} — see --help"
    what, suggest, see = " ".join(sections[0]), [], ""
    what = what.removeprefix("Error parsing Args: ")  # a range check of RunArgs.__post_init__: its own message
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
    """Make this process's uncaught user errors one line and exit status 2 (`user_error_hook`); `cli`
    does this for the algorithm files, the other entry points (bench/, population/) call it first thing."""
    sys.excepthook = user_error_hook


def out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` is an allocation that did not fit (torch's CPU allocator or CUDA): sizes the user chose."""
    import torch

    text = str(exc)
    return isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError) and ("not enough memory" in text or "can't allocate memory" in text))


def user_error_message(exc_type, exc, tb) -> str | None:
    """The one line a user error gets (see the module docstring), or None for a bug (traceback)."""
    if os.environ.get("PODRACER_DEBUG", "") not in ("", "0"):
        return None
    if isinstance(exc, UserError):
        return f"error: {exc}"
    if out_of_memory(exc):
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc_type.__name__
        return (f"error: out of memory ({first}) — lower the sizes: --num-envs, --buffer-size, --batch-size, "
                f"--num-steps, --hidden")
    return None


def user_error_hook(exc_type, exc, tb) -> None:
    """`sys.excepthook`: a user error (see the module docstring) or an allocation that did not fit is one
    line on stderr and exit status 2; anything else goes to Python's own hook (traceback, exit status 1)."""
    line = user_error_message(exc_type, exc, tb)
    if line is not None:
        # the process's own stderr: torch.distributed wraps this hook in one that captures sys.stderr and would
        # drop the line when the hook exits
        print(line, file=sys.__stderr__ or sys.stderr, flush=True)
        raise SystemExit(2)
    sys.__excepthook__(exc_type, exc, tb)
