"""The one command-line entry of every algorithm file:

    if __name__ == "__main__":
        main(cli(Args, __doc__))                              # or, with per-env defaults:
        main(cli(Args, __doc__, defaults_for=default_args))

tyro parses the flags (a misspelled flag: tyro names the right one and exits with status 2). After
parsing, a user error ends the process with one line, `error: <message naming the fix>`, and exit
status 2, without a traceback: a `ValueError`, `TypeError`, `OSError` (`FileNotFoundError`,
`PermissionError`, a full disk) or `ImportError` (a missing optional package) raised by a `raise`
statement of this repository's own files, i.e. a message we wrote for the user (unknown env, wrong
action kind, impossible sizes, foreign checkpoint, unwritable directory, ...). Any other exception,
including those raised inside libraries and Python's own errors in our code (a bug), keeps its
traceback.
"""

from __future__ import annotations

import linecache
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
USER_ERRORS = (ValueError, TypeError, OSError, ImportError)


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


def cli(args_cls, description: str | None = None, defaults_for=None, argv: list[str] | None = None):
    """`tyro.cli(args_cls)` on `argv` (default: the command line), where the defaults may depend on
    the task and its scale: `defaults_for(env_id, num_envs=None, device=...)` returns the `args_cls`
    instance to start from for the `--env`, `--num-envs` and `--device` given (so that `--env Ant --help`
    shows the MuJoCo defaults for this machine). Installs `user_error_hook`."""
    import tyro

    sys.excepthook = user_error_hook
    argv = sys.argv[1:] if argv is None else list(argv)
    if defaults_for is None:
        return tyro.cli(args_cls, description=description, args=argv)
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
    return tyro.cli(args_cls, default=default, description=description, args=argv)


def _raised_by_us(tb) -> bool:
    """Whether the innermost frame of traceback `tb` is a `raise` statement in this repository's own
    files (not in an installed package, even one installed in a virtual environment inside it)."""
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = tb.tb_frame.f_code.co_filename
    path = Path(filename).resolve()
    ours = ROOT in path.parents and not {"site-packages", "dist-packages", ".venv"} & set(path.parts)
    return ours and linecache.getline(filename, tb.tb_lineno).lstrip().startswith("raise ")


def user_error_hook(exc_type, exc, tb) -> None:
    """`sys.excepthook`: a user error (see the module docstring) is one line on stderr and exit status 2;
    anything else goes to Python's own hook (traceback, exit status 1)."""
    if issubclass(exc_type, USER_ERRORS) and _raised_by_us(tb):
        # the process's own stderr: torch.distributed wraps this hook in one that captures sys.stderr and would
        # drop the line when the hook exits
        print(f"error: {exc}", file=sys.__stderr__ or sys.stderr, flush=True)
        raise SystemExit(2)
    sys.__excepthook__(exc_type, exc, tb)
