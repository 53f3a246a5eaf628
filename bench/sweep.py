"""Choose an algorithm file's defaults by a sweep that is robust across seeds: tune on some seeds,
report on others.

    python bench/sweep.py dqn CartPole-v1 --steps 50000 --threshold 475 \\
        --grid learning_rate=2.5e-4,1e-3 exploration_fraction=0.1,0.2 gradient_steps=1,4 \\
        --fixed learning_starts=1000 --tune-seeds 101 102 103 --report-seeds 1 2 3 4 5 --jobs 2

Every grid point is a row of the benchmark (bench/experiments.py's `Row`) run by its runner
(bench/run.py: each run its own process with one torch thread, `--jobs` at a time; a sweep stopped
part-way goes on where it was, finished runs are not trained again) on each tuning seed, with a
deterministic evaluation (10 episodes) every `--steps / --evals` env steps. A point's score, in
order: the seeds with a stable solve (from some evaluation on, every one, the final included, is at
or above the threshold: bench/README.md's measures, "solves and does not collapse"), then how soon
(the IQM env steps to it; `--clock`: training seconds), then the IQM final evaluation. The best
point and the file's current defaults then run on the report seeds (never tuned on), and
`bench/results/sweeps/<algo>_<env><tag>.md` gets both tables; every run's metrics stay in
`bench/results/sweeps/<algo>_<env><tag>/runs/`.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import itertools
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
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


def label(point: dict) -> str:
    text = lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v)  # noqa: E731
    return "+".join(f"{k}={text(v)}" for k, v in point.items()) or "defaults"


def curves(row) -> list:
    """Each seed's (step, training seconds, eval return) evaluations (bench/report.py's)."""
    import report
    import run

    return [report.eval_curve(run.load_rows(run.metrics_file(row, s))) for s in row.seeds]


def score(cs: list, threshold: float, clock: bool = False) -> tuple:
    """(seeds with a stable solve, minus the IQM env steps (`clock`: seconds) to it, IQM final)."""
    from report import iqm_ci, stable_at

    got = [h[1 if clock else 0] for c in cs if (h := stable_at(c, threshold))]
    return len(got), -iqm_ci(got)[0] if got else -float("inf"), iqm_ci([c[-1][2] for c in cs])[0]


def table(cs: list, seeds, threshold: float) -> list[str]:
    from report import stable_at

    out = ["| seed | final eval | best eval | first >= threshold | stable solve from |",
           "|---:|---:|---:|---|---|"]  # fmt: skip
    for seed, c in zip(seeds, cs):
        first = next(((s, t) for s, t, v in c if v >= threshold), None)
        cells = [f"{x[0]:,} steps, {x[1]:.0f} s" if x else "never"
                 for x in (first, stable_at(c, threshold))]  # fmt: skip
        out.append(f"| {seed} | {c[-1][2]:.1f} | {max(v for *_, v in c):.1f} | " + " | ".join(cells)
                   + " |")  # fmt: skip
    n = sum(stable_at(c, threshold) is not None for c in cs)
    return [*out, "", f"stable at >= {threshold:g} on {n}/{len(cs)} seeds"]


def main() -> None:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("algo", help="an algorithm file's name, e.g. ppo_vec (algos/ppo_vec.py)")
    p.add_argument("env", help="the env id every run trains on, e.g. CartPole-v1")
    p.add_argument("--steps", type=int, required=True, help="env steps of every run")
    p.add_argument("--threshold", type=float, required=True, help="the return that counts solved")
    p.add_argument("--grid", nargs="*", default=[], help="name=v1,v2,... (Args fields)")
    p.add_argument("--fixed", nargs="*", default=[], help="name=value, the same for every point")
    p.add_argument("--tune-seeds", type=int, nargs="+", default=[101, 102, 103])
    p.add_argument("--report-seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    p.add_argument("--evals", type=int, default=10, help="evaluations a run (default 10)")
    p.add_argument("--clock", action="store_true", help="rank by training seconds, not env steps")
    p.add_argument("--tag", default="", help="suffix of the result files (a second round)")
    p.add_argument("--no-defaults", action="store_true", help="not the defaults on report seeds")
    p.add_argument("--jobs", type=int, default=1, help="runs at once, one torch thread each")
    a = p.parse_args()
    if a.jobs < 1:
        p.error(f"--jobs {a.jobs}: give 1 or more")
    if a.jobs > 1 and a.clock:
        p.error("--jobs > 1 with --clock would time runs that share cores; drop --jobs")
    files = sorted(f.stem for f in (ROOT / "algos").glob("*.py") if f.stem != "__init__")
    if a.algo not in files:
        p.error(f"no algorithm file algos/{a.algo}.py; one of {', '.join(files)}")
    fields = {f.name for f in dataclasses.fields(importlib.import_module(f"algos.{a.algo}").Args)}
    for x in a.fixed + a.grid:
        if "=" not in x:
            p.error(f"{x!r}: write name=value (--fixed) or name=v1,v2 (--grid)")
        if (name := x.split("=", 1)[0]) not in fields:
            close = difflib.get_close_matches(name, fields, n=1)
            p.error(f"algos/{a.algo}.py has no setting {name!r}"
                    + (f"; did you mean {close[0]!r}?" if close else ""))  # fmt: skip
    import run
    from experiments import Row

    fixed = {k: _value(v) for k, v in (x.split("=", 1) for x in a.fixed)}
    grid = [(k, [_value(v) for v in vs.split(",")]) for k, vs in (x.split("=", 1) for x in a.grid)]
    points = [{**fixed, **dict(zip([k for k, _ in grid], vs))}
              for vs in itertools.product(*(v for _, v in grid))]  # fmt: skip
    group = f"sweeps/{a.algo}_{a.env.replace('/', '-')}{a.tag}"

    def rows(named: dict, seeds) -> list:
        return [Row(group, a.algo, a.env, a.steps, max(a.steps // a.evals, 1), tuple(seeds), flags,
                    name) for name, flags in named.items()]  # fmt: skip

    def train(rs: list) -> None:  # every run not complete yet, --jobs at a time
        todo = [(r, s) for r in rs for s in r.seeds if not run.complete(r, s)]
        with ThreadPoolExecutor(a.jobs) as pool:
            list(pool.map(lambda rs: run.run_one(*rs, sys.executable), todo))

    # a point's label names its settings (a run is reused only for the same point)
    tune = rows({label(point): point for point in points}, a.tune_seeds)
    train(tune)
    scored = sorted(((score(curves(r), a.threshold, a.clock), r) for r in tune),
                    key=lambda x: x[0], reverse=True)  # fmt: skip
    best = scored[0][1].flags if scored else fixed
    mod = importlib.import_module(f"algos.{a.algo}")
    base = mod.default_args(a.env) if hasattr(mod, "default_args") else mod.Args(env=a.env)
    is_default = all(getattr(base, k) == v for k, v in best.items())
    cases = {"best": best} if a.no_defaults or is_default else {"defaults": {}, "best": best}
    cases = {f"{name}-{label(flags)}" if flags else name: flags for name, flags in cases.items()}
    held_out = rows(cases, a.report_seeds)
    train(held_out)
    unit = "s" if a.clock else "env steps"
    lines = [
        f"# Sweep: {a.algo} on {a.env}, {a.steps:,} env steps, threshold {a.threshold:g}", "",
        f"`python bench/sweep.py {' '.join(sys.argv[1:])}` ({time.strftime('%Y-%m-%d')}, one "
        f"torch thread a run). Tuning seeds {a.tune_seeds}: {len(points)} points; best {best}"
        + (" (the file's defaults)" if is_default else "") + ".", "",
        f"| point | finals on the tuning seeds | stable solves, IQM {unit} to it, IQM final |",
        "|---|---|---|",
    ]  # fmt: skip
    for (n, soon, final), r in scored:
        finals = ", ".join(f"{c[-1][2]:.0f}" for c in curves(r))
        soon = f"{-soon:,.0f}" if n else "-"
        lines.append(f"| {r.flags} | {finals} | {n}, {soon}, {final:.1f} |")
    for r in held_out:
        what = "the sweep's best" + (" = the file's defaults" if is_default else "")
        lines += ["", f"## Held-out seeds {a.report_seeds}: "
                  f"{'the file defaults' if r.label == 'defaults' else what}", "",
                  *table(curves(r), r.seeds, a.threshold)]  # fmt: skip
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{group.split('/')[1]}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
