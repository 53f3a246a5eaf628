"""Choose an algorithm file's defaults by a sweep that is robust across seeds: tune on some seeds,
report on others.

    python bench/sweep.py dqn CartPole-v1 --steps 50000 --threshold 475 \\
        --grid learning_rate=2.5e-4,1e-3 exploration_fraction=0.1,0.2 gradient_steps=1,4 \\
        --fixed learning_starts=1000 --tune-seeds 101 102 103 --report-seeds 1 2 3 4 5

Every grid point runs `algos/<algo>.py` (in process, one torch thread) on each tuning seed for
`--steps` env steps with a deterministic evaluation (10 episodes) every tenth of the run. A point's
score, in order: seeds whose final evaluation reaches the threshold, then the mean final evaluation,
then how early the threshold was first reached. The best point and the file's current defaults then
run on the report seeds (never tuned on), and `bench/results/sweeps/<algo>_<env>.md` gets both
tables: per seed, the final evaluation, the best evaluation (a final far below the best is a
collapse), the env steps and training seconds at which the threshold was first reached, and how many
of the evaluations from then on stayed >= it (with the lowest of them).

`--stability` ranks by that last part instead, for "solves and does not collapse": seeds that
reached the threshold (by `--by`), then the mean fraction of later evaluations >= it, then the mean
lowest later evaluation.

`--clock EVERY` ranks by time instead: each run evaluates every EVERY env steps and stops at the
first evaluation >= the threshold, and a point's score is the seeds that reached the threshold,
then minus the median training seconds to it (evaluation time excluded; a seed that did not reach
counts as infinitely slow). `--steps` is the budget.

    python bench/sweep.py ppo_vec CartPole-v1 --clock 2048 --steps 300000 --threshold 475 \\
        --grid num_envs=32,64 num_steps=8,16 num_minibatches=1,2
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import functools
import importlib
import itertools
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "results" / "sweeps"


def _value(text: str):
    parts = text[:-1].split("x") if text.endswith("x") else text.split("x")
    if "x" in text and all(p.isdigit() for p in parts):
        return tuple(int(p) for p in parts)  # hidden=256x256 -> (256, 256); hidden=64x -> (64,)
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def run_one(
    algo: str, env: str, seed: int, steps: int, settings: dict, evals: int = 10, every: int = 0
) -> dict:
    import importlib

    import torch

    torch.set_num_threads(1)
    mod = importlib.import_module(f"algos.{algo}")
    # the task's defaults
    base = mod.default_args(env) if hasattr(mod, "default_args") else mod.Args(env=env)
    args = dataclasses.replace(
        base,
        seed=seed,
        total_steps=steps,
        eval_every=every or max(steps // evals, 1),
        save_every=0,
        eval_episodes=10,
        quiet=True,
        tensorboard=False,
        out_dir=str(ROOT / "bench" / "runs" / "sweeps"),
        **settings,
    )
    t0 = time.perf_counter()
    res = mod.main(args)
    rows = [
        json.loads(line)
        for line in (Path(res["run_dir"]) / "metrics.jsonl").read_text().splitlines()
    ]
    evals = [(r["step"], r["seconds"], r["eval_return"]) for r in rows if "eval_return" in r]
    return {
        "seed": seed,
        "final": res["eval_return"],
        "best": max(e[2] for e in evals),
        "evals": evals,
        "wall": time.perf_counter() - t0,
    }


class _Hit(Exception):
    pass


def run_clocked(
    algo: str, env: str, seed: int, steps: int, settings: dict, every: int, threshold: float
) -> dict:
    """One run as the peers group measures it, stopped at its first evaluation >= `threshold`:
    the training seconds to it (the run's clock less its evaluations)."""
    from common.run import hooks

    evals, spent = [], 0.0

    def on_log(run, row):
        nonlocal spent
        if "eval_return" in row:
            spent += row.get("eval_seconds", 0.0)
            evals.append((row["step"], row["seconds"] - spent, row["eval_return"]))
            if row["eval_return"] >= threshold:
                raise _Hit

    t0 = time.perf_counter()
    try:
        with hooks(on_log=on_log):
            run_one(algo, env, seed, steps, settings, every=every)
    except _Hit:
        pass
    hit = evals[-1] if evals and evals[-1][2] >= threshold else None
    return {
        "seed": seed,
        "final": evals[-1][2] if evals else float("nan"),
        "best": max((e[2] for e in evals), default=float("nan")),
        "evals": evals,
        "train_seconds": hit[1] if hit else None,
        "steps_to": hit[0] if hit else None,
        "wall": time.perf_counter() - t0,
    }


def clock_score(runs: list[dict]) -> tuple:
    import statistics

    times = [r["train_seconds"] if r["train_seconds"] is not None else float("inf") for r in runs]
    med = statistics.median(times)
    return sum(t != float("inf") for t in times), -med if med != float("inf") else -1e9, 0.0


def clock_table(runs: list[dict]) -> list[str]:
    import statistics

    out = ["| seed | env steps to threshold | training s to threshold |", "|---:|---:|---:|"]
    for r in runs:
        steps = f"{r['steps_to']:,}" if r["steps_to"] else "not reached"
        secs = f"{r['train_seconds']:.2f}" if r["train_seconds"] is not None else "-"
        out.append(f"| {r['seed']} | {steps} | {secs} |")
    times = [r["train_seconds"] if r["train_seconds"] is not None else float("inf") for r in runs]
    out.append(
        f"\nreached on {sum(t != float('inf') for t in times)}/{len(runs)} seeds; median training "
        f"seconds {statistics.median(times):.2f}"
    )
    return out


def reached(run: dict, threshold: float):
    return next(((s, t) for s, t, v in run["evals"] if v >= threshold), None)


def solved_by(run: dict, threshold: float, by: int | None) -> bool:
    """The final evaluation reaches the threshold, and (with `by`) an evaluation at or before env
    step `by` did too: solved early and not collapsed afterwards."""
    f = reached(run, threshold)
    return run["final"] >= threshold and (by is None or (f is not None and f[0] <= by))


def score(runs: list[dict], threshold: float, by: int | None = None) -> tuple:
    import numpy as np

    solved = sum(solved_by(r, threshold, by) for r in runs)
    first = [reached(r, threshold) for r in runs]
    early = -np.mean(
        [f[0] if f else 10 * max(e[0] for e in r["evals"]) for f, r in zip(first, runs)]
    )
    return solved, float(np.mean([r["final"] for r in runs])), float(early)


def after_reaching(run: dict, threshold: float) -> list[float]:
    """The evaluations from the first one >= threshold on (empty if never reached)."""
    ev = [v for _, _, v in run["evals"]]
    first = next((i for i, v in enumerate(ev) if v >= threshold), None)
    return [] if first is None else ev[first:]


def held(run: dict, threshold: float) -> tuple[float, float]:
    """(fraction of the evaluations after first reaching the threshold that are >= it, the lowest of
    them): how well a solved policy stays solved. (0, -inf) if never reached."""
    after = after_reaching(run, threshold)
    return (
        (sum(v >= threshold for v in after) / len(after), min(after))
        if after
        else (0.0, float("-inf"))
    )


def stability_score(runs: list[dict], threshold: float, by: int | None = None) -> tuple:
    """--stability: seeds that reached the threshold (by `by`), then the mean fraction of the
    evaluations after reaching it that stay >= it (0 for a seed that never reached it), then the
    mean lowest evaluation after reaching it over the seeds that did (-1e9 if none did)."""
    import numpy as np

    f = [reached(r, threshold) for r in runs]
    n = sum(x is not None and (by is None or x[0] <= by) for x in f)
    h = [held(r, threshold) for r in runs]
    lows = [x[1] for x in h if x[1] != float("-inf")]
    return n, float(np.mean([x[0] for x in h])), float(np.mean(lows)) if lows else -1e9


def table(runs: list[dict], threshold: float, by: int | None = None) -> list[str]:
    out = [
        "| seed | final eval | best eval | threshold first reached (env steps, train s) "
        "| evaluations after it >= threshold | lowest after it |",
        "|---:|---:|---:|---|---:|---:|",
    ]
    for r in runs:
        f = reached(r, threshold)
        frac, low = held(r, threshold)
        n = len(after_reaching(r, threshold))
        out.append(
            f"| {r['seed']} | {r['final']:.1f} | {r['best']:.1f} | "
            f"{f'{f[0]:,} steps, {f[1]:.0f} s' if f else 'not reached'} | "
            + (f"{round(frac * n)}/{n} | {low:.1f} |" if n else "- | - |")
        )
    solved = sum(solved_by(r, threshold, by) for r in runs)
    out.append(
        f"\nfinal >= {threshold:g}{f' and reached by {by:,} steps' if by else ''} on "
        f"{solved}/{len(runs)} seeds"
    )
    return out


def _done(runs: list) -> list[dict]:
    """The runs' results: waiting on those submitted to the --jobs pool, running the deferred ones
    (one job)."""
    return [r.result() if hasattr(r, "result") else r() for r in runs]


def main() -> None:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("algo", help="an algorithm file's name, e.g. ppo_vec (algos/ppo_vec.py)")
    p.add_argument("env", help="the env id every run trains on, e.g. CartPole-v1")
    p.add_argument(
        "--steps", type=int, required=True, help="env steps of every run (with --clock: its budget)"
    )
    p.add_argument(
        "--threshold", type=float, required=True, help="the evaluation return that counts as solved"
    )
    p.add_argument("--grid", nargs="*", default=[], help="name=v1,v2,... (Args fields)")
    p.add_argument("--fixed", nargs="*", default=[], help="name=value, the same for every point")
    p.add_argument(
        "--tune-seeds",
        type=int,
        nargs="+",
        default=[101, 102, 103],
        help="seeds the points are ranked on (default: 101 102 103)",
    )
    p.add_argument(
        "--report-seeds",
        type=int,
        nargs="+",
        default=[1, 2, 3, 4, 5],
        help="held-out seeds the best point and the defaults are reported on (default: 1-5)",
    )
    p.add_argument(
        "--by",
        type=int,
        default=None,
        help="a seed counts as solved only if it reached the threshold by this env step (and its "
        "final did); default: any step",
    )
    p.add_argument(
        "--evals",
        type=int,
        default=10,
        help="evaluations per run (every steps/evals env steps; default 10)",
    )
    p.add_argument(
        "--clock",
        type=int,
        default=None,
        metavar="EVERY",
        help="rank by training seconds to the threshold (an evaluation every EVERY steps)",
    )
    p.add_argument(
        "--stability",
        action="store_true",
        help="rank by how well a solved policy stays solved: seeds that reached the threshold "
        "(by --by), then the mean fraction of later evaluations >= it, then the mean "
        "lowest later evaluation",
    )
    p.add_argument(
        "--tag", default="", help="suffix of the result files (a second round of the same sweep)"
    )
    p.add_argument(
        "--no-defaults",
        action="store_true",
        help="do not run the file's defaults on the report seeds",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="runs at once, one process and one torch thread each (not with --clock: timings would "
        "share cores)",
    )
    a = p.parse_args()
    if a.jobs < 1:
        p.error(f"--jobs {a.jobs}: give 1 or more")
    if a.stability and a.clock:
        p.error(
            "--stability ranks evaluations over a whole run; --clock stops at the "
            "threshold: give one of them"
        )
    if a.jobs > 1 and a.clock:
        p.error(
            "--jobs > 1 with --clock would time runs that share cores; drop --jobs to rank by time"
        )
    files = sorted(f.stem for f in (ROOT / "algos").glob("*.py") if f.stem != "__init__")
    if a.algo not in files:
        p.error(f"no algorithm file algos/{a.algo}.py; one of {', '.join(files)}")
    for x in a.fixed + a.grid:
        if "=" not in x:
            p.error(f"{x!r}: write name=value (--fixed) or name=v1,v2 (--grid)")
    fields = {f.name for f in dataclasses.fields(importlib.import_module(f"algos.{a.algo}").Args)}
    for x in a.fixed + a.grid:
        if x.split("=", 1)[0] not in fields:
            close = difflib.get_close_matches(x.split("=", 1)[0], fields, n=1)
            p.error(
                f"algos/{a.algo}.py has no setting {x.split('=', 1)[0]!r}"
                + (f"; did you mean {close[0]!r}?" if close else "")
            )
    fixed = {k: _value(v) for k, v in (x.split("=", 1) for x in a.fixed)}
    names, values = (
        zip(
            *[
                (k, [_value(v) for v in vs.split(",")])
                for k, vs in (x.split("=", 1) for x in a.grid)
            ]
        )
        if a.grid
        else ((), ())
    )
    if a.clock:
        # deferred: run when its point is reported, so that points print as they finish
        def one(seed, cfg):
            return functools.partial(
                run_clocked, a.algo, a.env, seed, a.steps, cfg, a.clock, a.threshold
            )

        rank, tab = clock_score, clock_table
        header = "score (reached, -median training s to threshold, -)"
    else:
        pool = None
        if a.jobs > 1:
            import concurrent.futures
            import multiprocessing

            pool = concurrent.futures.ProcessPoolExecutor(
                a.jobs, mp_context=multiprocessing.get_context("spawn")
            )

        def one(seed, cfg):
            if pool is None:  # deferred, as above
                return functools.partial(run_one, a.algo, a.env, seed, a.steps, cfg, a.evals)
            return pool.submit(run_one, a.algo, a.env, seed, a.steps, cfg, a.evals)

        rank = lambda runs: (stability_score if a.stability else score)(runs, a.threshold, a.by)
        tab = lambda runs: table(runs, a.threshold, a.by)  # noqa: E731
        header = (
            "score (reached, mean fraction held after reaching, mean lowest after reaching)"
            if a.stability
            else "score (solved, mean final, -mean steps to threshold)"
        )
    results = []
    points = [{**fixed, **dict(zip(names, point))} for point in itertools.product(*values)]
    # all queued at once with --jobs
    pending = [[one(s, settings) for s in a.tune_seeds] for settings in points]
    for settings, runs in zip(points, pending):
        runs = _done(runs)
        results.append((rank(runs), settings, runs))
        print(
            f"{settings}: finals {[round(r['final']) for r in runs]}, score {results[-1][0]}",
            flush=True,
        )
        # kept as it goes: a sweep cut short still has its points
        OUT.mkdir(parents=True, exist_ok=True)
        (OUT / f"{a.algo}_{a.env}{a.tag}.partial.json").write_text(
            json.dumps([(sc, c, r) for sc, c, r in results], indent=1)
        )
    best = max(results, key=lambda x: x[0])[1] if results else fixed
    mod = importlib.import_module(f"algos.{a.algo}")
    base = mod.default_args(a.env) if hasattr(mod, "default_args") else mod.Args(env=a.env)
    # the same runs twice: once is enough
    is_default = all(getattr(base, k) == v for k, v in best.items())
    cases = (
        ("the sweep's best",)
        if a.no_defaults
        else ("the file's defaults, also the sweep's best",)
        if is_default
        else ("the file's defaults", "the sweep's best")
    )
    report = {
        name: [one(s, {} if "defaults" in name else best) for s in a.report_seeds] for name in cases
    }
    report = {name: _done(runs) for name, runs in report.items()}
    lines = [
        f"# Sweep: {a.algo} on {a.env}, {a.steps:,} env steps, threshold {a.threshold:g}",
        "",
        f"`python bench/sweep.py {' '.join(sys.argv[1:])}` ({time.strftime('%Y-%m-%d')}, "
        f"one torch thread).",
        "",
        f"Tuning seeds {a.tune_seeds}: {len(results)} points; best {best}.",
        "",
        f"| point | finals on the tuning seeds | {header} |",
        "|---|---|---|",
    ]
    for sc, settings, runs in sorted(results, key=lambda x: x[0], reverse=True):
        finals = ", ".join(format(r["final"], ".0f") for r in runs)
        last = "-" if sc[2] <= -1e9 else f"{sc[2]:,.0f}"
        lines.append(
            f"| {settings} | {finals} | {sc[0]}, {sc[1]:.{2 if a.stability else 1}f}, {last} |"
        )
    for name, runs in report.items():
        lines += ["", f"## Held-out seeds {a.report_seeds}: {name}", "", *tab(runs)]
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{a.algo}_{a.env}{a.tag}.md"
    path.write_text("\n".join(lines) + "\n")
    (OUT / f"{a.algo}_{a.env}{a.tag}.json").write_text(
        json.dumps(
            {"best": best, "report": report, "points": [(s, c) for s, c, _ in results]}, indent=1
        )
    )
    print("\n".join(lines))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
