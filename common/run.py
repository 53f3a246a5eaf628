"""Run helpers shared by every algorithm file: device and seeding, run directories, the console
progress line, metrics files (JSONL + CSV), learning-curve PNGs, wandb tracking, atomic
checkpoints with RNG states, and deterministic evaluation on a separate env.

Nothing here is an algorithm; everything here is called at logging/eval/checkpoint ticks only.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

CHECKPOINT_FORMAT = "rl-checkpoint/1"


# ---------------------------------------------------------------------------------------------
# device, seeds, RNG state
# ---------------------------------------------------------------------------------------------
def resolve_device(spec: str) -> torch.device:
    """`auto` -> CUDA when present, else CPU; anything else must be a valid, available device."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(spec)
    except RuntimeError as e:
        raise ValueError(f"--device {spec!r} is not a device: use auto, cpu, cuda or cuda:N ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {spec} asked for CUDA but torch sees no GPU here; use --device auto or cpu")
    return dev


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Host RNG states (python, numpy, torch CPU and CUDA) as checkpoint-safe objects."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    name, keys, *rest = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---------------------------------------------------------------------------------------------
# run directory, logging, curves, wandb
# ---------------------------------------------------------------------------------------------
def run_name(algo: str, env_id: str, seed: int) -> str:
    return f"{env_id}__{algo}__s{seed}__{time.strftime('%Y%m%d-%H%M%S')}"


MIN_FREE_BYTES = 256 * 2**20  # below this much free disk a run refuses to start (checkpoints would fail later)


def check_writable(directory: Path, what: str = "the run directory") -> None:
    """Fail now, with the fix, if `directory` cannot take files or its disk is (nearly) full, rather than
    at the first checkpoint an hour into the run."""
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".write-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise PermissionError(f"cannot write to {what} {directory} ({type(e).__name__}: {e.strerror or e}); "
                              f"pass a writable --out-dir") from None
    free = shutil.disk_usage(directory).free
    if free < MIN_FREE_BYTES:
        raise OSError(f"only {free / 2**20:.0f} MiB free on the disk of {what} {directory} (at least "
                      f"{MIN_FREE_BYTES // 2**20} MiB wanted for checkpoints and metrics): free some space or pass "
                      f"an --out-dir on another disk")


def make_run_dir(out_dir: str, algo: str, env_id: str, seed: int, resume: str | None = None) -> Path:
    """A fresh directory under `out_dir`, or the resumed checkpoint's directory; checked to be writable
    with disk space to spare (`check_writable`)."""
    if resume:
        path = Path(resume).resolve().parent
        check_writable(path, "the resumed run's directory")
        return path
    base = Path(out_dir) / run_name(algo, env_id, seed)
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise PermissionError(f"cannot create --out-dir {out_dir} ({type(e).__name__}: {e.strerror or e}); "
                              f"pass a writable --out-dir") from None
    check_writable(base.parent, "--out-dir")
    path, k = base, 1
    while True:  # mkdir is the atomic claim: runs started in the same second get -1, -2, ...
        try:
            path.mkdir()
            return path
        except FileExistsError:
            path, k = base.with_name(f"{base.name}-{k}"), k + 1


def _fmt_time(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Logger:
    """Console progress line, `metrics.jsonl` + `metrics.csv`, `curves.png`, optional wandb.

    `log(step, **metrics)` is the one call a training loop makes at a logging tick; `seconds`
    (wall time since start, resumed runs included) and `sps` are added here.
    """

    def __init__(self, run_dir: Path, algo: str, args, total_steps: int, track: bool = False,
                 wandb_project: str = "torch-podracer", quiet: bool = False, elapsed: float = 0.0,
                 resume_step: int | None = None):
        self.run_dir = Path(run_dir)
        self.algo, self.total_steps, self.quiet = algo, total_steps, quiet
        self.env_id = getattr(args, "env", "")
        self.t0 = time.perf_counter() - elapsed
        self._last = (time.perf_counter(), None)
        self.jsonl = self.run_dir / "metrics.jsonl"
        self.rows: list[dict] = []
        if self.jsonl.exists():  # resumed: keep the curve so far
            with open(self.jsonl) as f:
                self.rows = [json.loads(line) for line in f if line.strip()]
            if resume_step is not None:  # drop what was logged after the checkpoint we resume from
                self.rows = [r for r in self.rows if r["step"] <= resume_step]
                with open(self.jsonl, "w") as f:
                    f.writelines(json.dumps(r) + "\n" for r in self.rows)
        (self.run_dir / "args.json").write_text(json.dumps(_jsonable(args), indent=2))
        self.wandb = None
        if track:
            try:
                import wandb
            except ImportError:
                raise ImportError("--track needs wandb: pip install wandb") from None
            self.wandb = wandb.init(project=wandb_project, name=self.run_dir.name, dir=str(self.run_dir),
                                    config=_jsonable(args), resume="allow", id=self.run_dir.name.replace("/", "_"))

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.t0

    @contextlib.contextmanager
    def paused(self):
        """Time spent inside (evaluation, plotting) is left out of the next `sps` figure."""
        t = time.perf_counter()
        try:
            yield
        finally:
            now, (last_t, last_step) = time.perf_counter(), self._last
            self._last = (last_t + (now - t), last_step)

    def restart_sps(self, step: int) -> None:
        """Start the next `sps` figure here, at env step `step`: called once the first updates have run,
        so that `--compile`'s warm-up (tracing and compiling on the first calls) is left out of it."""
        self._last = (time.perf_counter(), step)

    def log(self, step: int, **metrics) -> dict:
        now = time.perf_counter()
        last_t, last_step = self._last
        sps = (step - last_step) / max(now - last_t, 1e-9) if last_step is not None else float("nan")
        self._last = (now, step)
        row = {"step": int(step), "seconds": round(self.seconds, 3), "sps": round(sps, 1)}
        row.update({k: (float(v) if isinstance(v, (int, float, np.floating, torch.Tensor)) else v) for k, v in metrics.items()})
        self.rows.append(row)
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self.wandb is not None:
            self.wandb.log(row, step=int(step))
        if not self.quiet:
            self._print(row)
        return row

    def _print(self, row: dict) -> None:
        step = row["step"]
        frac = step / max(self.total_steps, 1)
        eta = row["seconds"] * (1 - frac) / frac if frac > 0 else float("nan")
        parts = [f"[{self.algo} {self.env_id}] step {step:,}/{self.total_steps:,} ({100 * frac:.0f}%)"]
        if math.isfinite(row["sps"]):
            parts.append(f"{row['sps']:,.0f} sps")
        for key in ("return", "eval_return"):
            if key in row and row[key] is not None and math.isfinite(row[key]):
                parts.append(f"{key} {row[key]:.1f}")
        parts.append(f"elapsed {_fmt_time(row['seconds'])} ETA {_fmt_time(eta)}")
        print(" | ".join(parts), flush=True)

    def write_files(self) -> None:
        """Rewrite `metrics.csv` and `curves.png` from everything logged so far."""
        keys: list[str] = []
        for r in self.rows:
            keys += [k for k in r if k not in keys]
        with open(self.run_dir / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(self.rows)
        plot_curves(self.rows, self.run_dir / "curves.png", title=f"{self.algo} on {self.env_id}")

    def close(self) -> None:
        self.write_files()
        if self.wandb is not None:
            self.wandb.finish()


def plot_curves(rows: list[dict], path: Path, title: str = "") -> None:
    """Return vs environment steps and vs wall time (training episodes and evaluations)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for key, style in (("return", dict(alpha=0.6, label="training episodes")),
                       ("eval_return", dict(marker="o", label="deterministic eval"))):
        pts = [(r["step"], r["seconds"], r[key]) for r in rows if r.get(key) is not None and math.isfinite(r[key])]
        if pts:
            s, t, v = zip(*pts)
            axes[0].plot(s, v, **style)
            axes[1].plot(t, v, **style)
    axes[0].set_xlabel("environment steps")
    axes[1].set_xlabel("wall time (s)")
    for ax in axes:
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
    fig.suptitle(title)
    fig.tight_layout()
    tmp = Path(path).with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, path)


def _jsonable(obj):
    if dataclasses.is_dataclass(obj):
        obj = dataclasses.asdict(obj)
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


# ---------------------------------------------------------------------------------------------
# checkpoints
# ---------------------------------------------------------------------------------------------
class NumericGuard:
    """Stops a run at the first NaN/Inf in what it watches (observations, rewards, losses, parameters),
    within one update, naming the quantity, before a bad value reaches a checkpoint.

    `watch(name, *tensors)` checks the tensors. On CPU it reads the answer at once (one sum per
    tensor; there is no device to wait for) and raises `FloatingPointError` there. On an accelerator
    it folds "is any of these non-finite?" into an on-device flag that keeps the first bad name (no
    host sync), and `check(step)` reports it: it starts a non-blocking copy of the flag and reads the
    copy the previous `check` started once that copy has landed, so the loop never waits and a NaN
    is reported an update late at most. `check(step, sync=True)`, called before every checkpoint
    write, waits: a checkpoint never holds a non-finite value, and the last one written before the
    error stays the last good one.
    """

    def __init__(self, device, checkpoint: str | os.PathLike | None = None):
        self.device = torch.device(device)
        self.checkpoint = checkpoint
        self.names: list[str] = []
        self.first = torch.zeros((), dtype=torch.int32, device=self.device)  # 0: all finite; k: names[k-1] went bad
        self._host = self._event = None
        self._last_step = 0
        self._lock = threading.Lock()  # --pipeline: the explorer thread watches too
        if self.device.type == "cuda":
            self._host = torch.zeros((), dtype=torch.int32).pin_memory()
            self._event = torch.cuda.Event()

    def watch(self, name: str, *tensors: torch.Tensor) -> None:
        if name not in self.names:
            self.names.append(name)
        code = self.names.index(name) + 1
        floats = [t for t in tensors if t.is_floating_point()]
        if not floats:
            return
        if self.device.type == "cpu":  # a NaN/Inf makes the sum non-finite (a finite overflow is re-checked)
            total = floats[0].sum() if len(floats) == 1 else torch.stack([t.sum() for t in floats]).sum()
            if not math.isfinite(total.item()) and not all(bool(torch.isfinite(t).all()) for t in floats):
                self._raise(code, None)
            return
        ok = torch.stack([torch.isfinite(t).all() for t in floats]).all()
        with self._lock:
            self.first = torch.where((self.first == 0) & ~ok, code, self.first)

    def watch_params(self, name: str, modules) -> None:
        """`watch` every parameter of `modules` (one module or several)."""
        modules = modules if isinstance(modules, (list, tuple)) else [modules]
        self.watch(name, *(p for m in modules for p in m.parameters()))

    def check(self, step: int, sync: bool = False) -> None:
        """Report a non-finite value watched on an accelerator (on CPU `watch` has reported it already)."""
        code = 0
        if self.device.type != "cpu":
            if sync:
                code = int(self.first.item())
            elif self._event is not None and self._event.query():  # the previous copy landed: read it, start the next
                code = int(self._host.item())
                self._host.copy_(self.first, non_blocking=True)
                self._event.record()
        if code:
            self._raise(code, step)
        self._last_step = step

    def _raise(self, code: int, step: int | None) -> None:
        if step is None:
            where = f"after env step {self._last_step:,}"
        else:
            where = f"between env steps {self._last_step:,} and {step:,}" if step > self._last_step else f"at env step {step:,}"
        kept = "no checkpoint was written yet"
        if self.checkpoint is not None and Path(self.checkpoint).is_file():
            saved = torch.load(self.checkpoint, map_location="cpu", weights_only=False).get("global_step", "?")
            kept = (f"{self.checkpoint} (env step {saved}) is the last good checkpoint, kept as it was: resume "
                    f"from it with --resume {self.checkpoint} (a lower --learning-rate helps if the losses blew up)")
        raise FloatingPointError(
            f"non-finite value (NaN or Inf) in the {self.names[code - 1]} {where}, the first of the watched "
            f"quantities ({', '.join(self.names)}) to go bad; the run stopped: {kept}. If the env produced "
            f"it, check its observations and rewards (a NaN there is a bug in the env or its inputs).")


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


# ---------------------------------------------------------------------------------------------
# deployment and evaluation
# ---------------------------------------------------------------------------------------------
class PolicyFn:
    """A deterministic policy for deployment: `policy(obs) -> action`.

    Takes a torch tensor or a numpy array, batched `[B, *obs_shape]` or single `[*obs_shape]`, and
    answers in kind (numpy in, numpy out), so the same object drives our vec envs and a plain
    `gymnasium.make(env_id)` env. `core` maps raw observations to env-native actions on `device`.
    """

    def __init__(self, core: Callable[[torch.Tensor], torch.Tensor], device="cpu", env_id: str | None = None,
                 obs_shape: tuple | None = None):
        self.core, self.device, self.env_id, self.obs_shape = core, torch.device(device), env_id, obs_shape

    @torch.no_grad()
    def __call__(self, obs):
        as_numpy = not isinstance(obs, torch.Tensor)
        x = torch.as_tensor(np.asarray(obs) if as_numpy else obs, dtype=torch.float32, device=self.device)
        single = self.obs_shape is not None and x.dim() == len(self.obs_shape)
        if single:
            x = x.unsqueeze(0)
        a = self.core(x)
        if single:
            a = a.squeeze(0)
        return a.cpu().numpy() if as_numpy else a


def compile_fn(fn, device):
    """`torch.compile(fn)` for `--compile`: CUDA graphs (mode "reduce-overhead") on CUDA, where the
    algorithms create their Adam optimizers with `capturable=True` so that the step counter stays on
    the device; inductor's default mode elsewhere."""
    return torch.compile(fn, mode="reduce-overhead" if torch.device(device).type == "cuda" else None)


# flags that may change when a run is resumed; every other flag is the run's identity
RESUME_MAY_CHANGE = {"resume", "total_steps", "quiet", "track", "wandb_project", "device", "eval_every",
                     "eval_episodes", "save_every", "out_dir", "compile"}


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


def cli(args_cls, description: str | None = None, defaults_for=None, argv: list[str] | None = None):
    """`tyro.cli(args_cls)` on `argv` (default: the command line), where the defaults may depend on
    the task: `defaults_for(env_id)` returns the `args_cls` instance to start from for the `--env`
    given (so that `--env Ant --help` shows the MuJoCo defaults)."""
    import tyro

    argv = sys.argv[1:] if argv is None else list(argv)
    if defaults_for is None:
        return tyro.cli(args_cls, description=description, args=argv)
    env_id = args_cls().env
    for i, a in enumerate(argv):
        if a == "--env" and i + 1 < len(argv):
            env_id = argv[i + 1]
        elif a.startswith("--env="):
            env_id = a.split("=", 1)[1]
    return tyro.cli(args_cls, default=defaults_for(env_id), description=description, args=argv)


# ---------------------------------------------------------------------------------------------
# evaluation
# ---------------------------------------------------------------------------------------------
@torch.no_grad()
def evaluate(policy: Callable[[torch.Tensor], torch.Tensor], env_id: str, episodes: int = 10,
             seed: int = 12345, device="cpu", max_steps: int = 100_000) -> dict:
    """Run `episodes` episodes of a deterministic `policy` (obs -> env-native action) in parallel,
    one per sub-env of a fresh `envs.make(env_id)`, and return their mean/std return and length."""
    import envs

    # in-process sub-envs for host simulators: no worker processes spawned per evaluation
    env = envs.make(env_id, num_envs=episodes, device=device, seed=seed, vectorization_mode="sync")
    obs, _ = env.reset(seed=seed)
    ret = torch.zeros(episodes, dtype=torch.float64, device=env.device)
    length = torch.zeros(episodes, dtype=torch.long, device=env.device)
    running = torch.ones(episodes, dtype=torch.bool, device=env.device)
    for t in range(max_steps):
        obs, reward, term, trunc, _ = env.step(policy(obs))
        ret += reward * running
        length += running
        running &= ~(term | trunc)
        if t % 32 == 31 and not bool(running.any()):
            break
    env.close()
    r = ret.cpu().numpy()
    return {"eval_return": float(r.mean()), "eval_return_std": float(r.std()),
            "eval_length": float(length.double().mean()), "returns": r.tolist()}
