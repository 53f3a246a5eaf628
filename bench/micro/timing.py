"""What the micro-benchmarks in bench/micro/ share. A script here measures one thing and writes its
Markdown table (`--out`, a path from the repository), by default where its committed table is
(bench/results/), so that a rerun replaces it. It runs as `python bench/micro/NAME.py` from
anywhere: its first line puts the repository and bench/ on sys.path, `parser(__doc__)` makes its
command line (`--help` is its docstring, a wrong flag one line and exit status 2) and
`script(main)` runs it (a user error: one line, exit status 2).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np
import stats
from common.cli import ArgumentParser, install_error_hook

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"


def parser(doc: str) -> argparse.ArgumentParser:
    """A script's parser: `doc` (its module docstring) as `--help`, a parse error one line."""
    return ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)


def script(main: Callable[[], object]) -> None:
    """`main()`, a user error one line and exit status 2."""
    install_error_hook()
    main()


def measured(args, runs: str = "", **fields):
    """`args` (an algorithm file's Args) for a measured run: seed 1, evaluation and the checkpoint
    at the end only, no console line, its run directory in bench/runs/`runs`; `fields` on top."""
    out_dir = str(ROOT / "bench" / "runs" / runs)
    defaults = dict(seed=1, eval_every=0, save_every=0, quiet=True, out_dir=out_dir)
    return replace(args, **{**defaults, **fields})


def rate(step: Callable, seconds: float, warmup=3, chunk=10, sync=None, min_calls=1) -> float:
    """Calls of `step()` a second: `warmup` calls left out, then `chunk` calls at a time, each
    chunk followed by `sync()` (so that a GPU's queued work is in the time), until `seconds` of
    wall time and at least `min_calls` calls have passed."""
    sync = sync or (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    calls, start = 0, time.perf_counter()
    while True:
        for _ in range(chunk):
            step()
        calls += chunk
        sync()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds and calls >= min_calls:
            return calls / elapsed


def synchronizer(device) -> Callable[[], None] | None:
    """What waits for `device`'s queued work: CUDA's `synchronize`, nothing on a CPU."""
    import torch

    return torch.cuda.synchronize if torch.device(device).type == "cuda" else None


def env_rate(env, seconds: float, **kw) -> float:
    """Env-steps/s of our batched `env`, stepping uniform random actions drawn on its device (a
    discrete space's, or in [-1, 1]) after a reset; `kw` goes to `rate`."""
    import torch

    env.reset(seed=0)
    n, space, device = env.num_envs, env.single_action_space, env.device
    g = torch.Generator(device=device).manual_seed(0)

    def action():
        if hasattr(space, "n"):
            return torch.randint(0, space.n, (n,), generator=g, device=device)
        return torch.rand((n, *space.shape), generator=g, device=device) * 2 - 1

    return n * rate(lambda: env.step(action()), seconds, sync=synchronizer(device), **kw)


def gym_rate(env_id: str, n: int, seconds: float, **kw) -> float:
    """Env-steps/s of gymnasium's sync vector env of `env_id` at `n` envs, same-step autoreset,
    stepping uniform random numpy actions (a discrete space's, or in [-1, 1]); `kw` to `rate`."""
    import gymnasium as gym

    same_step = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
    env = gym.make_vec(env_id, n, vectorization_mode="sync", vector_kwargs=same_step)
    env.reset(seed=0)
    rng, space = np.random.default_rng(0), env.action_space
    if isinstance(space, gym.spaces.MultiDiscrete):
        action = lambda: rng.integers(0, space.nvec)  # noqa: E731
    else:
        action = lambda: rng.uniform(-1, 1, space.shape)  # noqa: E731
    steps = n * rate(lambda: env.step(action()), seconds, **kw)
    env.close()
    return steps


def alternating(repeats: int, **sides: Callable[[], object]) -> dict[str, list]:
    """Each side's results over `repeats` rounds, the sides taking turns in each round, so that a
    drift of the machine's speed during the measurement falls on all of them alike."""
    got: dict[str, list] = {name: [] for name in sides}
    for _ in range(repeats):
        for name, measure in sides.items():
            got[name].append(measure())
    return got


def ratio(x: list[float], y: list[float]) -> tuple[float, float, float]:
    """median(x) / median(y) and its 95% bootstrap interval (bench/stats.py)."""
    return stats.ratio({"": x}, {"": y}, statistic=np.median)


def times(r: tuple[float, float, float]) -> str:
    return f"{r[0]:.2f}x [{r[1]:.2f}, {r[2]:.2f}]"  # a `ratio` as a table's cell


def children(*commands: list[str], env: dict | None = None, cwd=ROOT) -> list:
    """Run `commands` at once, a process each in `cwd` with `env` added to this one's environment
    (their stderr passed through); what each printed last, read as JSON. A failure ends the run."""
    env = {**os.environ, **(env or {})}
    outs = [tempfile.TemporaryFile("w+") for _ in commands]
    procs = [subprocess.Popen(c, cwd=cwd, env=env, stdout=o) for c, o in zip(commands, outs)]
    got = []
    for cmd, proc, out in zip(commands, procs, outs):
        proc.wait()
        out.seek(0)
        lines = out.read().splitlines()
        if proc.returncode or not lines:
            raise SystemExit(f"{' '.join(cmd)[:300]} failed (exit {proc.returncode})")
        got.append(json.loads(lines[-1]))
    return got


def machine(device: str = "cpu") -> str:
    """A table's heading: the date, the CPU's model name and the cores this process may use, the
    GPU where `device` is CUDA, and the torch version."""
    import torch

    from common.device import available_cores

    cpu = Path("/proc/cpuinfo")
    names = cpu.read_text().splitlines() if cpu.exists() else []
    name = next((n.split(":", 1)[1].strip() for n in names if n.startswith("model name")), None)
    name = f"{name or platform.processor() or platform.machine()} ({available_cores()} cores)"
    if torch.device(device).type == "cuda":
        name += f", {torch.cuda.get_device_name(torch.device(device))}"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"{when}, {name}, torch {torch.__version__}"


def write(path: str | Path, text: str) -> None:
    """`text` as the file `path` (from the repository), atomically: a measurement stopped
    part-way keeps the last one."""
    from common.checkpoint import atomic_write

    atomic_write(ROOT / path, text.rstrip("\n") + "\n")


def publish(text: str, path: str | Path) -> None:
    """Print the table `text` and `write` it as `path`."""
    print("\n" + text)
    write(path, text)
