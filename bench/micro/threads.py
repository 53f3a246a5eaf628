"""Two runs at once on a CPU: each row's training time alone and beside a second run of the same
row (another seed), with `--threads auto` (the default: one torch thread on a CPU run) and with
torch's own default (a thread per core, what every run took before `--threads`; the CPU MuJoCo
backend then also took every core). Nothing else should be running.

    python bench/micro/threads.py          # every row, both settings -> bench/results/threads.md
    python bench/micro/threads.py --rows cartpole_ppo --modes auto

The table gives each run's seconds of training (its own clock, evaluations left out) alone and in
a pair started together, and the slower of the pair over the run alone; a run of a pair that passes
`--cap` times its row's time alone is stopped and reported as more than that.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
from common.device import available_cores  # noqa: E402
from micro.timing import ROOT, machine, parser, publish, script  # noqa: E402

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


def run_together(row: str, mode: str, seeds: list[int], cap: float | None) -> list[float | None]:
    """Start a run per seed at once; each one's seconds of training (its own clock at its last log
    line), None where it was stopped at `cap` seconds."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    env["WANDB_MODE"] = "disabled"
    with tempfile.TemporaryDirectory() as tmp:
        outs = [f"{tmp}/s{s}" for s in seeds]
        cmds = [[*command(row, mode, s), *QUIET, "--out-dir", o] for s, o in zip(seeds, outs)]
        procs = [subprocess.Popen(c, cwd=ROOT, env=env, stdout=subprocess.DEVNULL) for c in cmds]
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
                raise SystemExit(f"{' '.join(command(row, mode, 1))} failed (exit {p.returncode})")
            (metrics,) = Path(o).rglob("metrics.jsonl")
            got.append(json.loads(metrics.read_text().splitlines()[-1])["seconds"])
        return got


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--out", default="bench/results/threads.md", help="the table's path")
    p.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    p.add_argument("--modes", nargs="+", choices=["auto", "default"], default=["auto", "default"])
    p.add_argument("--cap", type=float, default=12.0, help="stop a paired run at this x alone")
    p.add_argument("--repeats", type=int, default=3, help="runs alone, the median reported")
    a = p.parse_args()
    lines = [
        f"# Two runs at once on a CPU ({machine()})",
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
            cap = a.cap * alone
            pair = run_together(row, mode, [1, 2], cap)
            seconds = ", ".join(f"> {cap:.0f}" if s is None else f"{s:.1f}" for s in pair)
            ratio = f"> {a.cap:.0f}x" if None in pair else f"{max(pair) / alone:.2f}x"
            file, flags = ROWS[row]
            cells = f"`{file} {' '.join(flags)}` | {mode} | {alone:.1f} | {seconds} | {ratio}"
            lines.append(f"| {row} | {cells} |")
            print(lines[-1], flush=True)
    publish("\n".join(lines), a.out)


if __name__ == "__main__":
    script(main)
