"""Checkpoints: one file written atomically (temp file, fsync, rename), versioned (older formats
migrated on load: `MIGRATIONS`), checked on load (whose, which env, on resume the env's spaces);
the flags a resumed run may change (`resume_args`); Ctrl-C naming the checkpoint (`resume_hint`).

Formats: /1 had 0-dim SAC temperatures and no env spaces; /2 records `spaces` (a changed env is
refused by name); /3 keeps the DDPG/TD3/SAC files' observations as named groups.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
import tempfile
from pathlib import Path

import torch

from common.errors import UserError, UserFileNotFoundError, UserOSError

CHECKPOINT_FORMAT = "rl-checkpoint/3"


def _v1_to_v2(ckpt: dict) -> dict:
    """/1 -> /2: a 0-dim `log_alpha` and its Adam moments get shape (1,)."""
    if torch.is_tensor(ckpt.get("log_alpha")) and ckpt["log_alpha"].dim() == 0:
        ckpt["log_alpha"] = ckpt["log_alpha"].reshape(1)
        for state in ckpt.get("alpha_opt", {}).get("state", {}).values():
            for k, v in state.items():
                if k != "step" and torch.is_tensor(v) and v.dim() == 0:
                    state[k] = v.reshape(1)
    ckpt["format"] = "rl-checkpoint/2"
    return ckpt


# the files whose observations became named groups in rl-checkpoint/3
GROUPED_IN_3 = ("ddpg", "td3", "sac", "modsac", "redq", "fast_td3", "ddpg_h", "td3_h", "sac_h")
GROUPED_IN_3 += ("sac_podracer", "td3_podracer")


def _v2_to_v3(ckpt: dict) -> dict:
    """/2 -> /3: in a checkpoint of `GROUPED_IN_3`, `{"policy": x}` where an observation tensor `x`
    stood (every rank's), and a policy that takes named groups."""

    def group(x):
        return {"policy": x} if torch.is_tensor(x) else x

    if ckpt.get("algo") in GROUPED_IN_3:
        for state in [ckpt, *ckpt.get("ranks", [])]:
            if "next_obs" in state:
                state["next_obs"] = group(state["next_obs"])
            for entry, keys in (("buffer", ("obs", "next_obs")), ("h_store", ("obs",))):
                for k in keys if entry in state else ():
                    state[entry][k] = group(state[entry][k])
            if "window" in state:  # fast_td3: (obs, actions, reward, final_obs, terminated, done)
                steps = state["window"]["steps"]
                state["window"]["steps"] = [
                    (group(s[0]), *s[1:3], group(s[3]), *s[4:]) for s in steps
                ]
        if "policy_spec" in ckpt:
            ckpt["policy_spec"]["groups"] = True
    ckpt["format"] = "rl-checkpoint/3"
    return ckpt


# format found -> the function that brings it one version forward
MIGRATIONS = {"rl-checkpoint/1": _v1_to_v2, "rl-checkpoint/2": _v2_to_v3}


def _remove_stale_temps(path: Path) -> None:
    """Remove temp files of `path` left by writers killed mid-write (named after a dead process)."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        pid = stale.name[len(path.name) + 2 :].split(".", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            stale.unlink(missing_ok=True)
        except OSError:
            pass  # alive, someone else's


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write `data` to `path` atomically (temp file, fsync, rename): a crash leaves the previous
    file or the new one, never a torn one."""
    path = Path(path)
    if isinstance(data, str):
        data = data.encode()
    _remove_stale_temps(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(
            dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp"
        )
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        # a full disk, a read-only or vanished directory: the user's to fix
        if isinstance(e, OSError):
            kept = "the previous file is intact" if path.exists() else "nothing was written"
            raise UserOSError(
                f"could not write {path} ({e.strerror or e}; {kept}): free disk space or "
                f"pass a writable --out-dir, then continue with --resume"
            ) from None
        raise
    try:  # make the rename durable too
        dfd = os.open(path.parent, os.O_RDONLY)
        os.fsync(dfd)
        os.close(dfd)
    except OSError:
        pass
    return path


def save_checkpoint(path: str | os.PathLike, payload: dict) -> Path:
    """`payload` to `path`, atomically, with this format's tag."""
    payload = {"format": CHECKPOINT_FORMAT, **payload}
    buf = io.BytesIO()
    torch.save(payload, buf)
    return atomic_write(path, buf.getbuffer())


def load_checkpoint(
    path: str | os.PathLike, algo: str | None = None, env_id: str | None = None, map_location="cpu"
) -> dict:
    """Load a checkpoint written by `save_checkpoint`, checking that it is one and whose it is."""
    path = Path(path)
    if not path.is_file():
        raise UserFileNotFoundError(
            f"no checkpoint at {path} (pass the .pt file a run wrote, e.g. "
            f"runs/<run>/checkpoint.pt)"
        )
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=False)
    except Exception as e:
        raise UserError(
            f"{path} is not a readable checkpoint ({type(e).__name__}: {e}); "
            f"it may be truncated or another kind of file"
        ) from None
    if not isinstance(ckpt, dict) or "format" not in ckpt:
        found = (
            "a dict without a format entry"
            if isinstance(ckpt, dict)
            else f"a {type(ckpt).__name__}"
        )
        raise UserError(
            f"{path} is not a checkpoint of this library (found {found}, expected format "
            f"{CHECKPOINT_FORMAT!r}); pass a checkpoint.pt written by one of algos/*.py"
        )
    while ckpt["format"] in MIGRATIONS:
        ckpt = MIGRATIONS[ckpt["format"]](ckpt)
    if ckpt["format"] != CHECKPOINT_FORMAT:
        raise UserError(
            f"{path} has checkpoint format {ckpt['format']!r}; this version of the library reads "
            f"{CHECKPOINT_FORMAT!r} (and migrates {', '.join(map(repr, MIGRATIONS))}): load it "
            "with the version of the library that wrote it"
        )
    if algo is not None and ckpt.get("algo") != algo:
        raise UserError(
            f"{path} was written by algos/{ckpt.get('algo')}.py, not algos/{algo}.py; "
            f"load it with algos/{ckpt.get('algo')}.py"
        )
    if env_id is not None and ckpt.get("env_id") != env_id:
        raise UserError(
            f"{path} was trained on {ckpt.get('env_id')!r}, not {env_id!r}; pass --env "
            f"{ckpt.get('env_id')}"
        )
    return ckpt


def spaces_of(env) -> dict:
    """What a checkpoint records of its env: its own (unwrapped) spaces, described, and agents."""
    from common.vec_env import describe

    env = getattr(env, "unwrapped", env)
    out = {
        "observation": describe(env.single_observation_space),
        "action": describe(env.single_action_space),
    }
    if hasattr(env, "n_agents"):
        out["agents"] = int(env.n_agents)
    return out


def check_spaces(ckpt: dict | None, env, path: str | None) -> None:
    """On resume, refuse by name an env whose spaces differ from the saved run's (an edited env)."""
    if ckpt is None or "spaces" not in ckpt:
        return
    saved, mine = ckpt["spaces"], spaces_of(env)
    for key in ("observation", "action", "agents"):
        if saved.get(key) != mine.get(key):
            what = "number of agents" if key == "agents" else f"{key} space"
            raise UserError(
                f"{path} was trained on {ckpt.get('env_id')!r} with {what} {saved.get(key)}, but "
                f"this env has {mine.get(key)}: the env changed since the checkpoint was written; "
                "resume with the env it was trained on, or start a new run (without --resume)"
            )


# flags that may change when a run is resumed; every other flag is the run's identity
RESUME_MAY_CHANGE = {
    "resume",
    "total_steps",
    "quiet",
    "track",
    "wandb_project",
    "device",
    "threads",
    "eval_every",
    "eval_episodes",
    "save_every",
    "out_dir",
    "compile",
    "tensorboard",
}


def resume_args(args, ckpt: dict, path: str = "the checkpoint", defaults=None):
    """The saved arguments: a flag left at its default (`defaults` or the dataclass's) takes the
    saved value; one set otherwise is refused naming both, but `RESUME_MAY_CHANGE` (length and
    bookkeeping), which take the value given; `--device` and `--threads` are this machine's."""
    saved, changes = ckpt["args"], {}
    plain = type(args)()  # the dataclass's own defaults: what `main(Args(resume=...))` starts from
    defaults = plain if defaults is None else defaults

    # at the task's default (the command line) or the dataclass's (in code)
    def left_out(name: str) -> bool:
        return getattr(args, name) in (getattr(defaults, name), getattr(plain, name))

    for f in dataclasses.fields(args):
        if f.name in ("resume", "device", "threads") or f.name not in saved:
            continue
        mine = getattr(args, f.name)
        theirs = tuple(saved[f.name]) if isinstance(saved[f.name], list) else saved[f.name]
        if mine == theirs:
            continue
        if f.name in RESUME_MAY_CHANGE:
            # not given: the saved run's (its length, its checkpoint cadence, ...)
            if left_out(f.name):
                changes[f.name] = theirs
            continue
        # --env is "left out" only at the dataclass's default (`defaults` were built for it)
        if (mine == plain.env) if f.name == "env" else left_out(f.name):
            changes[f.name] = theirs
        elif f.name == "env":
            raise UserError(
                f"{path} was trained on {theirs!r}, not {mine!r}; drop --env or pass --env {theirs}"
            )
        else:
            flag = "--" + f.name.replace("_", "-")
            raise UserError(
                f"{path} was trained with {flag} {theirs}, not {mine}: a resumed run keeps its "
                f"settings (drop {flag}); only {', '.join(sorted(RESUME_MAY_CHANGE))} may change"
            )
    return dataclasses.replace(args, **changes)


# the checkpoint of the run under way (`Run` sets it): Ctrl-C in a file's loop body names it
RUNNING: list[Path] = []


def interrupted(ckpt_path: Path) -> str:
    """The line a run stopped by Ctrl-C ends with: the intact checkpoint and how to resume."""
    if Path(ckpt_path).is_file():
        step = torch.load(ckpt_path, map_location="cpu", weights_only=False).get("global_step", "?")
        return (
            f"interrupted; {ckpt_path} (step {step}) is intact: continue with --resume {ckpt_path}"
        )
    return "interrupted before the first checkpoint was written (see --save-every)"


@contextlib.contextmanager
def resume_hint(ckpt_path: Path):
    """On Ctrl-C, say which checkpoint is intact and how to continue from it, then re-raise."""
    try:
        yield
    except KeyboardInterrupt:
        print("\n" + interrupted(ckpt_path), file=sys.stderr, flush=True)
        raise SystemExit(130) from None
