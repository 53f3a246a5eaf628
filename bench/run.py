"""The benchmark runner: every row of a group (bench/experiments.py) over its seeds, `--jobs` at a
time, each its own process with one torch thread, then the group's report (bench/report.py).

    python bench/run.py quick --jobs 2          # train what is missing, then the report
    python bench/run.py box2d --only sac        # rows by label, env, or ENV:LABEL
    python bench/run.py full --list             # the commands, nothing run

A run whose metrics are complete (`bench/results/GROUP/runs/ENV__LABEL__sSEED.jsonl` reaches the
row's budget) is skipped; one stopped part-way (Ctrl-C, a session's end) resumes from the last
checkpoint in its run directory, `bench/runs/GROUP/ENV__LABEL__sSEED/` (not checked in). Every run
is the algorithm file's own command line, kept in `runs/commands.json` beside its metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import experiments  # noqa: E402
from experiments import Row  # noqa: E402

RESULTS = ROOT / "bench" / "results"  # what is checked in: metrics and reports
RUNS = ROOT / "bench" / "runs"  # run directories, checkpoints included (not checked in)


def metrics_file(row: Row, seed: int) -> Path:
    return RESULTS / row.group / "runs" / f"{row.key(seed)}.jsonl"


def load_rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def complete(row: Row, seed: int) -> bool:
    """Its metrics reach the row's budget with a final evaluation."""
    path = metrics_file(row, seed)
    if not path.exists():
        return False
    last = load_rows(path)[-1:]
    return bool(last) and last[0]["step"] >= row.steps and last[0].get("eval_return") is not None


def run_one(row: Row, seed: int, python: str) -> tuple[float, bool]:
    """Train (or resume) one seed of `row`; copy its metrics into bench/results. (wall seconds,
    resumed)."""
    out = RUNS / row.group / row.key(seed)
    ckpts = sorted(out.glob("*/checkpoint.pt"), key=lambda p: p.stat().st_mtime)
    cmd = row.command(seed, str(out), python)
    if ckpts:  # stopped part-way: on from its checkpoint, in its own run directory
        cmd += ["--resume", str(ckpts[-1])]
    elif out.exists():
        shutil.rmtree(out)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="disabled")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    run_dir = max((p for p in out.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime)
    dest = metrics_file(row, seed)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / "metrics.jsonl", dest)
    final = load_rows(dest)[-1]
    print(f"  {row.key(seed)}: eval {final['eval_return']:.1f}, {wall:.0f} s", flush=True)
    return wall, bool(ckpts)


def record(group: str, done: list[tuple[Row, int, tuple[float, bool]]]) -> None:
    """Each run's command (as a user types it) and wall seconds, in runs/commands.json."""
    path = RESULTS / group / "runs" / "commands.json"
    meta = json.loads(path.read_text()) if path.exists() else {}
    for row, seed, (wall, resumed) in done:
        before = meta.get(row.key(seed), {}).get("wall_seconds", 0.0) if resumed else 0.0
        cmd = " ".join(row.command(seed, "runs", "python"))
        meta[row.key(seed)] = {"command": cmd, "wall_seconds": round(before + wall, 1)}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


def selected(rows: list[Row], only: list[str] | None) -> list[Row]:
    if not only:
        return rows
    return [r for r in rows if r.env in only or r.label in only or f"{r.env}:{r.label}" in only]


def main(argv=None) -> None:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("group", choices=experiments.groups())
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (each one torch thread)")
    p.add_argument("--only", nargs="*", help="only these labels, envs or ENV:LABEL pairs")
    p.add_argument("--seeds", type=int, nargs="*", help="only these seeds")
    p.add_argument("--list", action="store_true", help="print the commands, run nothing")
    p.add_argument("--force", action="store_true", help="train complete runs again")
    p.add_argument("--python", default=sys.executable, help="interpreter of the algorithm files")
    a = p.parse_args(argv)
    rows = selected(experiments.group(a.group), a.only)
    if any(r.peer for r in rows):
        raise SystemExit(
            f"error: group {a.group} has a peer's side, run by its own script in the peer's venv: "
            f"bash benchmark.sh {a.group} (python bench/report.py {a.group} rebuilds its report)"
        )
    todo = [(r, s) for r in rows for s in r.seeds if not a.seeds or s in a.seeds]
    if a.list:
        for r, s in todo:
            print(" ".join(r.command(s, "runs", "python")))
        return
    if a.force:
        for r, s in todo:
            shutil.rmtree(RUNS / r.group / r.key(s), ignore_errors=True)
    todo = [(r, s) for r, s in todo if a.force or not complete(r, s)]
    print(f"group {a.group}: {len(todo)} runs to train, {a.jobs} at a time", flush=True)
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:  # each run is its own process
        walls = list(pool.map(lambda rs: run_one(*rs, a.python), todo))
    record(a.group, [(r, s, w) for (r, s), w in zip(todo, walls)])
    import report

    report.report(a.group, RESULTS)


if __name__ == "__main__":
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
