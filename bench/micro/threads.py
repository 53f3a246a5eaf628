"""Two runs at once on a CPU: each row's training time alone and beside a second run of the same
row (another seed), with `--threads auto` (the default: one torch thread on a CPU run) and with
torch's own default (a thread per core, what every run took before `--threads`; the CPU MuJoCo
backend then also took every core). One run at a time otherwise: nothing else should be running.

    python bench/micro/threads.py          # every row, both settings -> bench/results/threads.md
    python bench/micro/threads.py --rows cartpole_ppo --modes auto

A pair is two processes started together; the table gives each one's seconds of training (the
run's own clock, evaluations left out: `seconds` of its last metrics line) and the slower one over
the row's run alone. A run of a pair that passes `--cap` times its row's time alone is stopped and
reported as more than that.
"""

from __future__ import annotations

import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# the repository and bench/
sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]
from common.device import available_cores  # noqa: E402
from micro.timing import RESULTS, ROOT, machine, parser, script, write  # noqa: E402

# row: (file, flags); budgets sized for ~20-40 s of training alone on one core of the 2-core host
ROWS = {
    "cartpole_ppo": ("ppo_vec", ["--env", "CartPole-v1"]),  # its row, 300k steps
    "cartpole_dqn": ("dqn", ["--env", "CartPole-v1", "--total-steps", "40000"]),
    "minatar_pqn": ("pqn", ["--env", "MinAtar/Breakout-v1", "--total-steps", "200000"]),
    "hopper_ppo": ("ppo_vec", ["--env", "Hopper", "--num-envs", "64", "--total-steps", "100000"]),
}
QUIET = ["--quiet", "--no-plots", "--no-tensorboard", "--eval-every", "0", "--save-every", "0"]


def command(row: str, mode: str, seed: int) -> list[str]:
    file, flags = ROWS[row]
    threads = "auto" if mode == "auto" else str(available_cores())
    return [sys.executable, f"algos/{file}.py", *flags, "--seed", str(seed), "--threads", threads]


def launch(row: str, mode: str, seed: int, out: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["WANDB_MODE"] = "disabled"
    cmd = command(row, mode, seed) + [*QUIET, "--out-dir", out]
    return subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def trained_seconds(out: str) -> float:
    """The run's own clock at its last log line."""
    (metrics,) = Path(out).rglob("metrics.jsonl")
    return json.loads(metrics.read_text().splitlines()[-1])["seconds"]


def run_together(row: str, mode: str, seeds: list[int], cap: float | None) -> list[float | None]:
    """Start one run per seed at once; each one's seconds of training (None: stopped at `cap`)."""
    with tempfile.TemporaryDirectory() as tmp:
        outs = [f"{tmp}/s{s}" for s in seeds]
        procs = [launch(row, mode, s, o) for s, o in zip(seeds, outs)]
        start, got = time.perf_counter(), []
        for p, o in zip(procs, outs):
            left = None if cap is None else max(1.0, cap - (time.perf_counter() - start))
            try:
                p.wait(timeout=left)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
                got.append(None)
                continue
            if p.returncode != 0:
                raise SystemExit(
                    f"{' '.join(command(row, mode, 1))} failed:\n{Path(o + '.log').read_text()}"
                )
            got.append(trained_seconds(o))
        return got


def fmt(seconds: float | None, cap: float) -> str:
    return f"> {cap:.0f}" if seconds is None else f"{seconds:.1f}"


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    p.add_argument("--modes", nargs="+", choices=["auto", "default"], default=["auto", "default"])
    p.add_argument("--cap", type=float, default=12.0, help="stop a paired run at this x alone")
    p.add_argument("--repeats", type=int, default=3, help="runs alone, the median reported")
    p.add_argument("--out", default=str(RESULTS / "threads.md"))
    a = p.parse_args()
    lines = [
        f"# Two runs at once on a CPU ({available_cores()} cores, {machine()}, "
        f"{datetime.date.today()})",
        "",
        "Seconds of training of each run (its own clock, evaluations off): alone (seed 1, the "
        f"median of {a.repeats} runs) and two at once (seeds 1 and 2 started together). `auto` is "
        "`--threads auto` (the default); `default` is `--threads <cores>`: torch's own thread "
        "count and the MuJoCo backend's, what every run took before `--threads`. "
        "`python bench/micro/threads.py`.",
        "",
        "| row | command | threads | alone s | two at once s | slower / alone |",
        "|---|---|---|---:|---:|---:|",
    ]
    for row in a.rows:
        for mode in a.modes:
            alone = statistics.median(
                run_together(row, mode, [1], None)[0] for _ in range(a.repeats)
            )
            pair = run_together(row, mode, [1, 2], a.cap * alone)
            worst = None if None in pair else max(pair)
            ratio = f"> {a.cap:.0f}x" if worst is None else f"{worst / alone:.2f}x"
            file, flags = ROWS[row]
            line = (
                f"| {row} | `{file} {' '.join(flags)}` | {mode} | {alone:.1f} | "
                f"{', '.join(fmt(s, a.cap * alone) for s in pair)} | {ratio} |"
            )
            print(line, flush=True)
            lines.append(line)
    write(a.out, "\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    script(main)
