"""What a run writes (docs/usage.md#what-a-run-writes): the run directory, the progress line,
`metrics.jsonl`, TensorBoard and wandb; at the end `metrics.csv` and `curves.png`. `Meter` sums
statistics on the device; `Ticks` says when to log, evaluate and save."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from common.errors import MissingPackage, UserOSError, UserPermissionError


def run_name(algo: str, env_id: str, seed: int) -> str:
    return f"{env_id}__{algo}__s{seed}__{time.strftime('%Y%m%d-%H%M%S')}"


# below this much free disk a run refuses to start (checkpoints would fail later)
MIN_FREE_BYTES = 256 * 2**20


def check_writable(directory: Path, what: str = "the run directory") -> None:
    """Fail now, naming the fix, if `directory` cannot take files or its disk is nearly full (not at
    the first checkpoint an hour in)."""
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".write-probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserPermissionError(
            f"cannot write to {what} {directory} ({type(e).__name__}: {e.strerror or e}); "
            f"pass a writable --out-dir"
        ) from None
    free = shutil.disk_usage(directory).free
    if free < MIN_FREE_BYTES:
        raise UserOSError(
            f"only {free / 2**20:.0f} MiB free on the disk of {what} {directory} (at least "
            f"{MIN_FREE_BYTES // 2**20} MiB wanted for checkpoints and metrics): free some space "
            "or pass an --out-dir on another disk"
        )


def make_run_dir(
    out_dir: str, algo: str, env_id: str, seed: int, resume: str | None = None
) -> Path:
    """A fresh directory under `out_dir`, or the resumed checkpoint's; checked writable."""
    if resume:
        path = Path(resume).resolve().parent
        check_writable(path, "the resumed run's directory")
        return path
    base = Path(out_dir) / run_name(algo, env_id, seed)
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserPermissionError(
            f"cannot create --out-dir {out_dir} ({type(e).__name__}: {e.strerror or e}); "
            f"pass a writable --out-dir"
        ) from None
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
    """The writers of one run. `log(step, episodes, evaluation, **metrics)` is the one call at a
    logging tick (`seconds` and `sps` added here); TensorBoard gets every numeric field under the
    same name. A resumed run drops the rows and events logged after its checkpoint."""

    def __init__(
        self,
        run_dir: Path,
        algo: str,
        args,
        total_steps: int,
        track: bool = False,
        wandb_project: str = "torch-podracer",
        quiet: bool = False,
        elapsed: float = 0.0,
        resume_step: int | None = None,
    ):
        self.run_dir = Path(run_dir)
        self.algo, self.total_steps, self.quiet = algo, total_steps, quiet
        self.env_id = getattr(args, "env", "")
        self._burnt = 0  # iterations with updates seen by burn_in
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
        self.plots = getattr(args, "plots", True)  # RunArgs.plots
        self.tb = None
        if getattr(args, "tensorboard", False):
            try:
                from torch.utils.tensorboard import SummaryWriter
            # on by default: a missing package costs the events, not the run
            except ImportError:
                print(
                    "note: the tensorboard package is not installed, so no TensorBoard events are "
                    "written (pip install tensorboard, or --no-tensorboard to silence this)",
                    flush=True,
                )
            else:
                # events after the checkpoint go
                purge = None if resume_step is None else resume_step + 1
                self.tb = SummaryWriter(str(self.run_dir), purge_step=purge, flush_secs=30)
        self.wandb = None
        if track:
            try:
                import wandb
            except ImportError:
                raise MissingPackage("--track needs wandb: pip install wandb") from None
            self.wandb = wandb.init(
                project=wandb_project,
                name=self.run_dir.name,
                dir=str(self.run_dir),
                config=_jsonable(args),
                resume="allow",
                id=self.run_dir.name.replace("/", "_"),
            )
        # the clock starts once the writers are set up: that is set-up, not training
        self.t0 = time.perf_counter() - elapsed
        self._last = (time.perf_counter(), None)
        self._rate = None  # the recent env steps a second that the ETA divides by

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
        """Start the next `sps` figure here, at env step `step`."""
        self._last = (time.perf_counter(), step)
        self._rate = None

    def burn_in(self, step: int, learned: bool = True) -> None:
        """The one burn-in rule, called after every iteration (`learned`: it ran updates): `sps`
        restarts once two iterations have learned, leaving the warm-up (first allocations,
        `--compile`'s tracing) out; a resumed run burns in again."""
        if learned and self._burnt < 2:
            self._burnt += 1
            if self._burnt == 2:
                self.restart_sps(step)

    def log(
        self, step: int, episodes: dict | None = None, evaluation: dict | None = None, **metrics
    ) -> dict:
        """One row: `metrics`, the training episodes' mean `return` and `ep_length`, the
        evaluation's fields (but its per-episode `returns`)."""
        if episodes is not None:
            metrics.update({"ep_length": episodes["length"], "return": episodes["return"]})
        if evaluation is not None:
            metrics.update({k: v for k, v in evaluation.items() if k != "returns"})
        row = self._log(step, metrics)
        if evaluation is not None and self.tb is not None:
            self.tb.flush()
        return row

    def _log(self, step: int, metrics: dict) -> dict:
        now = time.perf_counter()
        last_t, last_step = self._last
        sps = (
            (step - last_step) / max(now - last_t, 1e-9) if last_step is not None else float("nan")
        )
        self._last = (now, step)
        row = {"step": int(step), "seconds": round(self.seconds, 3), "sps": round(sps, 1)}
        row["time"] = round(time.time(), 3)  # the wall clock (Unix seconds), as W&B and TB keep it
        row.update(
            {
                k: (float(v) if isinstance(v, (int, float, np.floating, torch.Tensor)) else v)
                for k, v in metrics.items()
            }
        )
        self.rows.append(row)
        with open(self.jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        shown = {k: v for k, v in row.items() if k != "time"}  # (both keep their own wall clock)
        if self.wandb is not None:
            self.wandb.log(shown, step=int(step))
        if self.tb is not None:
            for k, v in shown.items():
                if k != "step" and isinstance(v, float):
                    self.tb.add_scalar(k, v, int(step))
        if not self.quiet:
            self._print(row)
        return row

    def _print(self, row: dict) -> None:
        step = row["step"]
        frac = step / max(self.total_steps, 1)
        # the steps left at the recent rate (smoothed): an off-policy run's random warm-up steps
        # thousands a second, so the run's mean rate would promise an end hours too soon
        if math.isfinite(row["sps"]) and row["sps"] > 0:
            self._rate = row["sps"] if self._rate is None else 0.8 * self._rate + 0.2 * row["sps"]
        if self._rate:
            eta = max(self.total_steps - step, 0) / self._rate
        else:
            eta = row["seconds"] * (1 - frac) / frac if frac > 0 else float("nan")
        parts = [
            f"[{self.algo} {self.env_id}] step {step:,}/{self.total_steps:,} ({100 * frac:.0f}%)"
        ]
        if math.isfinite(row["sps"]):
            parts.append(f"{row['sps']:,.0f} sps")
        for key in ("return", "eval_return"):
            if key in row and row[key] is not None and math.isfinite(row[key]):
                parts.append(f"{key} {row[key]:.1f}")
        parts.append(f"elapsed {_fmt_time(row['seconds'])} ETA {_fmt_time(eta)}")
        print(" | ".join(parts), flush=True)

    def write_files(self) -> None:
        """`metrics.csv` and `curves.png` (unless `--no-plots`), at the end of the run."""
        keys: list[str] = []
        for r in self.rows:
            keys += [k for k in r if k not in keys]
        with open(self.run_dir / "metrics.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            w.writerows(self.rows)
        if self.plots:
            plot_curves(
                self.rows, self.run_dir / "curves.png", title=f"{self.algo} on {self.env_id}"
            )

    def close(self) -> None:
        self.write_files()
        # where it all went, and the last evaluation (the progress lines scroll away)
        if not self.quiet:
            last = next((r for r in reversed(self.rows) if r.get("eval_return") is not None), None)
            done = (
                f"[{self.algo} {self.env_id}] done: {self.rows[-1]['step']:,} steps"
                if self.rows
                else f"[{self.algo} {self.env_id}] done"
            )
            if last is not None:
                done += f", eval_return {last['eval_return']:.1f} at step {last['step']:,}"
            print(
                f"{done}; {_fmt_time(self.seconds)} of training; run dir {self.run_dir}", flush=True
            )
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def plot_curves(rows: list[dict], path: Path, title: str = "") -> None:
    """Return vs environment steps and vs wall time (training episodes and evaluations)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for key, style in (
        ("return", dict(alpha=0.6, label="training episodes")),
        ("eval_return", dict(marker="o", label="deterministic eval")),
    ):
        pts = [
            (r["step"], r["seconds"], r[key])
            for r in rows
            if r.get(key) is not None and math.isfinite(r[key])
        ]
        if pts:
            s, t, v = zip(*pts)
            axes[0].plot(s, v, **style)
            axes[1].plot(t, v, **style)
    axes[0].set_xlabel("environment steps")
    axes[1].set_xlabel("wall time (s)")
    for ax in axes:
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="best")
    fig.suptitle(title)
    # fixed margins: `tight_layout` measures every label's extent on each call
    fig.subplots_adjust(left=0.08, right=0.985, bottom=0.13, top=0.88, wspace=0.22)
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


class Meter:
    """Named statistics summed on the device between logging ticks: `add(name=tensor, ...)` never
    syncs; `pop()` reads every name's mean since the last `pop` (NaN if none) in one host read."""

    def __init__(self, device, *names: str):
        self.names = list(names)
        # the sums, the count of `add`s with every name, the count of each name alone: on the
        # device, so that a captured loop (its Python run once) counts each replay
        self.sums = torch.zeros(2 * len(names) + 1, device=device)
        self._one = torch.ones((), device=device)

    def add(self, **values: torch.Tensor) -> None:
        n = len(self.names)
        # every name, in order: one stack and one add for all
        if list(values) == self.names:
            self.sums[: n + 1].add_(
                torch.stack([*(v.detach() for v in values.values()), self._one])
            )
            return
        for name, v in values.items():
            i = self.names.index(name)
            # in place on the views: one kernel each (`+=` on an item adds a copy back)
            self.sums[i].add_(v.detach())
            self.sums[n + 1 + i].add_(1)

    def pop(self) -> dict[str, float]:
        n = len(self.names)
        values = self.sums.tolist()  # one host read
        sums, every, alone = values[:n], values[n], values[n + 1 :]
        out = {
            name: s / (k + every) if k + every else float("nan")
            for name, s, k in zip(self.names, sums, alone)
        }
        self.sums.zero_()
        return out


class Ticks:
    """`ticks(step, is_last)` -> (log, evaluate, save): evaluate every `eval_every` env steps, save
    every `save_every` (0: at the end only), both at the last iteration; log on an evaluation, else
    at most once per `log_seconds`. Evaluate and save depend on `step` alone (every torchrun rank
    agrees) counted from the last of each, which a checkpoint keeps: a resumed run keeps them."""

    def __init__(self, eval_every: int, save_every: int, step: int, log_seconds: float = 1.0):
        self.eval_every, self.save_every, self.log_seconds = eval_every, save_every, log_seconds
        self.last_eval = self.last_save = step
        self.last_log = time.perf_counter()

    def __call__(self, step: int, is_last: bool) -> tuple[bool, bool, bool]:
        do_eval = is_last or (self.eval_every > 0 and step - self.last_eval >= self.eval_every)
        do_save = is_last or (self.save_every > 0 and step - self.last_save >= self.save_every)
        do_log = do_eval or time.perf_counter() - self.last_log > self.log_seconds
        if do_eval:
            self.last_eval = step
        if do_save:
            self.last_save = step
        if do_log:
            self.last_log = time.perf_counter()
        return do_log, do_eval, do_save
