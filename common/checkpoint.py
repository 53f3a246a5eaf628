"""Checkpoints: one file, written atomically (temp file, fsync, rename), versioned
(`CHECKPOINT_FORMAT`), checked on load (whose it is, which env); the flags a resumed run may change
(`resume_args`); and the Ctrl-C message naming the checkpoint to resume from (`resume_hint`)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
import tempfile
from pathlib import Path

import torch

CHECKPOINT_FORMAT = "rl-checkpoint/1"


def _remove_stale_temps(path: Path) -> None:
    """Remove the temp files that writers of `path` killed mid-write left behind: those named after a
    process that no longer runs (a live writer's, e.g. another population member's, is kept)."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        pid = stale.name[len(path.name) + 2:].split(".", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            stale.unlink(missing_ok=True)
        except OSError:
            pass  # alive, someone else's


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write `data` to `path` atomically: temp file in the same directory, fsync, rename.

    A crash at any point leaves either the previous file or the new one, never a torn file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    _remove_stale_temps(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:  # make the rename durable too
        dfd = os.open(path.parent, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
    except OSError:
        pass
    return path


def save_checkpoint(path: str | os.PathLike, payload: dict) -> Path:
    """Write `payload` (a dict of tensors, state dicts, args ...) to `path` atomically (`atomic_write`)."""
    payload = {"format": CHECKPOINT_FORMAT, **payload}
    buf = io.BytesIO()
    torch.save(payload, buf)
    return atomic_write(path, buf.getbuffer())


def load_checkpoint(path: str | os.PathLike, algo: str | None = None, env_id: str | None = None,
                    map_location="cpu") -> dict:
    """Load a checkpoint written by `save_checkpoint`, checking that it is one and whose it is."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path} (pass the .pt file a run wrote, e.g. runs/<run>/checkpoint.pt)")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:
        raise ValueError(f"{path} is not a readable checkpoint ({type(e).__name__}: {e}); "
                         f"it may be truncated or another kind of file") from None
    if not isinstance(ckpt, dict) or ckpt.get("format") != CHECKPOINT_FORMAT:
        found = ckpt.get("format") if isinstance(ckpt, dict) else type(ckpt).__name__
        raise ValueError(f"{path} is not a checkpoint of this library: found format {found!r}, expected {CHECKPOINT_FORMAT!r}")
    if algo is not None and ckpt.get("algo") != algo:
        raise ValueError(f"{path} was written by algos/{ckpt.get('algo')}.py, not algos/{algo}.py; "
                         f"load it with algos/{ckpt.get('algo')}.py")
    if env_id is not None and ckpt.get("env_id") != env_id:
        raise ValueError(f"{path} was trained on {ckpt.get('env_id')!r}, not {env_id!r}; pass --env {ckpt.get('env_id')}")
    return ckpt


# flags that may change when a run is resumed; every other flag is the run's identity
RESUME_MAY_CHANGE = {"resume", "total_steps", "quiet", "track", "wandb_project", "device", "eval_every",
                     "eval_episodes", "save_every", "out_dir", "compile", "tensorboard"}


def resume_args(args, ckpt: dict, path: str = "the checkpoint", defaults=None):
    """The arguments a resumed run continues with: the saved ones, except the flags in
    `RESUME_MAY_CHANGE`. A flag left at its default (`defaults`, else the dataclass's own) takes the
    saved value; a flag set to another value than the saved one is refused with a message naming both.
    `--total-steps` left at its default also takes the saved value (the run ends where it was meant to)."""
    saved, changes = ckpt["args"], {}
    defaults = type(args)() if defaults is None else defaults
    for f in dataclasses.fields(args):
        if f.name == "total_steps" and f.name in saved and args.total_steps == getattr(defaults, f.name):
            changes[f.name] = saved[f.name]  # not given: the saved run's length (a larger one trains longer)
            continue
        if f.name in RESUME_MAY_CHANGE or f.name not in saved:
            continue
        mine = getattr(args, f.name)
        theirs = tuple(saved[f.name]) if isinstance(saved[f.name], list) else saved[f.name]
        if mine == theirs:
            continue
        # --env is "left out" only at the dataclass's own default (`defaults` may have been built for --env)
        if mine == getattr(type(args)() if f.name == "env" else defaults, f.name):
            changes[f.name] = theirs
        elif f.name == "env":
            raise ValueError(f"{path} was trained on {theirs!r}, not {mine!r}; drop --env or pass --env {theirs}")
        else:
            flag = "--" + f.name.replace("_", "-")
            raise ValueError(f"{path} was trained with {flag} {theirs}, not {mine}: a resumed run keeps its "
                             f"settings (drop {flag}); only {', '.join(sorted(RESUME_MAY_CHANGE))} may change")
    return dataclasses.replace(args, **changes)


@contextlib.contextmanager
def resume_hint(ckpt_path: Path):
    """On Ctrl-C, say which checkpoint is intact and how to continue from it, then re-raise."""
    try:
        yield
    except KeyboardInterrupt:
        if Path(ckpt_path).is_file():
            step = torch.load(ckpt_path, map_location="cpu", weights_only=False).get("global_step", "?")
            print(f"\ninterrupted; {ckpt_path} (step {step}) is intact: continue with --resume {ckpt_path}",
                  file=sys.stderr, flush=True)
        else:
            print("\ninterrupted before the first checkpoint was written (see --save-every)", file=sys.stderr, flush=True)
        raise SystemExit(130) from None
