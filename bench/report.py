"""A group's report from its metrics files alone (`runs/*.jsonl` in the group's folder of
bench/results), no training: the group's Markdown table and curves (`GROUP.md`, `GROUP_<env>.png`
in that folder), and the table in docs/results.md between the group's markers.

    python bench/report.py quick

Final return: the last evaluation of each seed's run (the final policy, deterministic, 10 episodes
on a fresh env seeded seed + 10000), then the interquartile mean over seeds with its 95%
stratified-bootstrap interval (bench/stats.py, Agarwal et al. 2021). Stable solve: a row with a
threshold reports the env steps and training seconds (the run's clock less its evaluations) of the
first evaluation from which every one to the end is at or above it, IQM over the seeds that got
there. A row compared
`against` another gets P(ours > it): the probability that a seed of the row ends above a seed of
the other. Curves: IQM over seeds with its interval as a band, vs env steps and vs seconds. Where
runs/commands.json records the machine and date a run ran on (bench/run.py does), a column says.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import experiments  # noqa: E402
from experiments import EVAL_EPISODES, REFERENCES, SOURCES  # noqa: E402

RESULTS = ROOT / "bench" / "results"
DOCS = ROOT / "docs" / "results.md"


def load_rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def eval_curve(rows: list[dict]) -> list[tuple[int, float, float]]:
    """(step, training seconds, eval_return) at every evaluation of a run: the run's clock less
    the evaluations so far (`eval_seconds`, which ours and the peers' adapters write; metrics that
    have `clock_seconds` beside `seconds` were written with training seconds already)."""
    out, evals = [], 0.0
    for r in rows:
        if r.get("eval_return") is None:
            continue
        evals += r.get("eval_seconds", 0.0) if "clock_seconds" not in r else 0.0
        if math.isfinite(r["eval_return"]):
            out.append((r["step"], r["seconds"] - evals, r["eval_return"]))
    return out


def stable_at(curve, threshold: float):
    """(steps, seconds) of the first evaluation from which every one, the last included, is at or
    above `threshold`; None if the final one is below."""
    at = None
    for step, secs, v in curve:
        if v < threshold:
            at = None
        elif at is None:
            at = (step, secs)
    return at


def iqm_ci(xs) -> tuple[float, float, float]:
    """IQM over seeds and its 95% bootstrap interval (one task: the seeds are the stratum)."""
    from stats import interval

    return interval({"runs": list(xs)})


def collect(group: str, results: Path = RESULTS, unfinished: list | None = None) -> list[dict]:
    """One entry per row of `group` with the seeds whose metrics exist: {row, curves: {seed:
    curve}}. A run stopped part-way (capped and not resumed yet: short of its budget, and not in
    runs/commands.json) has no final policy: left out, named in `unfinished`."""
    out = []
    meta_path = results / group / "runs" / "commands.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    for row in experiments.group(group):
        curves, gym, extra, walls = {}, {}, {}, {}
        for s in row.seeds:
            p = results / group / "runs" / f"{row.key(s)}.jsonl"
            if p.exists() and (c := eval_curve(rows := load_rows(p))):
                if c[-1][0] < row.steps and row.key(s) not in meta:
                    if unfinished is not None:
                        unfinished.append(f"{row.key(s)} ({c[-1][0]:,} of {row.steps:,} steps)")
                    continue
                curves[s] = c
                # (its evaluations' seconds since the process started, where the runner added them)
                walls[s] = {
                    r["step"]: r["wall"] for r in rows if "wall" in r and "eval_return" in r
                }
                finals = [r["gym_return"] for r in rows if "gym_return" in r]
                gym.update({s: finals[-1]} if finals else {})
                for k in experiments.COLUMNS.get(group, {}):
                    if got := [r[k] for r in rows if k in r]:
                        extra.setdefault(k, []).append(sum(got) / len(got))
        if curves:
            out.append({"row": row, "curves": curves, "gym": gym, "extra": extra, "walls": walls})
    return out


def plot_env(env_id: str, entries: list[dict], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:  # a bare machine (a lent GPU's): the tables without their figures
        return

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    mixed = len({e["row"].threads == 0 for e in entries}) > 1  # rows alone beside rows of a thread
    for i, ent in enumerate(entries):
        # the seeds of a row evaluate at the same steps (a run cut short: its common part)
        n = min(len(c) for c in ent["curves"].values())
        arr = np.array([c[:n] for c in ent["curves"].values()], dtype=float)  # [seeds, n, 3]
        steps, secs = arr[0, :, 0], arr[:, :, 1].mean(0)
        mid, lo, hi = np.array([iqm_ci(arr[:, j, 2]) for j in range(n)]).T
        threads = ", every core" if mixed and ent["row"].threads == 0 else ""
        label = f"{ent['row'].label} ({arr.shape[0]} seed{'s' * (arr.shape[0] > 1)}{threads})"
        for ax, x in ((axes[0], steps), (axes[1], secs)):
            ax.plot(x, mid, color=f"C{i}", marker="o", ms=3, label=label)
            ax.fill_between(x, lo, hi, color=f"C{i}", alpha=0.2)
    spans = [max(c[-1][0] for c in e["curves"].values()) for e in entries]
    if max(spans) > 8 * min(spans):  # budgets 10x apart (on- and off-policy): a log axis
        axes[0].set_xscale("log")
    axes[0].set_xlabel("environment steps")
    alone = [e["row"].threads == 0 for e in entries]
    cpu = "every core" if all(alone) else "as labelled, else " * any(alone) + "1 torch thread a run"
    axes[1].set_xlabel(f"training seconds ({cpu})")
    for ax in axes:
        ax.set_ylabel(f"eval return ({EVAL_EPISODES} det. episodes)")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.suptitle(f"{env_id}: IQM over seeds, band its 95% bootstrap interval")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def baseline_rows(env_id: str) -> list[tuple[str, dict]]:
    """Scripted or fixed policies printed beside the learners (computed now: cheap)."""
    import torch

    from common.evaluate import evaluate

    rows = []
    if env_id == "Chasing-v0":
        from envs.chasing import pursuit_policy

        r = evaluate(pursuit_policy, env_id, EVAL_EPISODES * 10, seed=10_000)
        rows.append(("scripted pursuit (envs/chasing.py)", r))
    if env_id in ("Chasing-v0", "StockTrading-v0"):
        import envs

        env = envs.make(env_id, num_envs=1)
        shape = env.single_action_space.shape
        env.close()
        r = evaluate(
            lambda obs: torch.zeros(obs.shape[0], *shape), env_id, EVAL_EPISODES * 10, seed=10_000
        )
        what = "stand still" if env_id == "Chasing-v0" else "hold cash, no trade"
        rows.append((f"zero action ({what})", r))
    return rows


def _fmt(v: float, scale: float) -> str:
    return f"{v:.2f}" if scale < 20 else f"{v:.1f}"


# a generated line of the README per group that has one: its numbers are the report's
README = ROOT / "README.md"
README_LINES = {
    "peers": "- **Beside Stable-Baselines3** (RL Zoo settings, held-out seeds, IQM [95% interval]; "
    "[table](bench/results/peers/peers.md)): {summary}",
    "locomotion": "- **Beside rsl_rl on a CPU** (IsaacLab's PPO config, five MuJoCo v5 tasks, the "
    "same env objects and steps, one core each, seeds 1-3; "
    "[table](bench/results/locomotion/locomotion.md)): {ranges}",
    "rllib": "- **Beside RLlib** (its MuJoCo PPO example, 1M steps, seeds 1-3; "
    "[table](bench/results/rllib/rllib.md)): {ranges}",
}


def summary(entries: list[dict]) -> str:
    """Each compared row in a few words: its stable solve and env steps/s against the other's."""
    from stats import ratio

    parts = []
    for ent in entries:
        row, other = ent["row"], _other(ent, entries)
        if not row.against or other is None:
            continue
        x = ratio({"t": _speed(ent["curves"])}, {"t": _speed(other["curves"])})[0]
        solve = (_solve_ratio(row, ent["curves"], other["curves"]) if other["row"].threshold
                 else "") or "no common stable solve"  # fmt: skip
        parts.append(f"{row.label} on {row.env} solves {solve} at {x:.1f}x the env steps/s")
    return "; ".join(parts)


def ranges(entries: list[dict]) -> str:
    """Our rows against a peer's, over the tasks: the range of env-steps/s ratios and on how many
    tasks the final return (on gymnasium's env where measured; IQM over seeds) is higher."""
    from stats import ratio

    def final(e):
        values = list(e["gym"].values()) or [c[-1][2] for c in e["curves"].values()]
        return iqm_ci(values)[0]

    pairs = {}
    for ent in entries:
        other = _other(ent, entries)
        if ent["row"].against and other is not None and other["row"].peer:
            pairs.setdefault((ent["row"].label, other["row"].label), []).append((ent, other))
    parts = []
    for (mine, theirs), found in pairs.items():
        x = [ratio({"t": _speed(a["curves"])}, {"t": _speed(b["curves"])})[0] for a, b in found]
        tasks = ", ".join(
            f"{a['row'].env.split('-')[0]} {final(a):.0f} vs {final(b):.0f}" for a, b in found
        )
        higher = sum(final(a) > final(b) for a, b in found)
        parts.append(
            f"{mine} at {min(x):.2f}x-{max(x):.2f}x {theirs}'s env steps/s and a higher final "
            f"return on {higher}/{len(found)} tasks ({tasks})"
        )
    return "; ".join(parts)


def markers(group: str) -> tuple[str, str]:
    return (
        f"<!-- the {group} table, generated by `bash benchmark.sh report {group}`: not edited -->",
        f"<!-- end of the {group} table -->",
    )


def into_docs(group: str, block: list[str], path: Path | None = None) -> None:
    """`block` into docs/results.md (or `path`) between the group's markers, where it has them."""
    path = path or DOCS
    begin, end = markers(group)
    text = path.read_text()
    if begin in text:
        head, rest = text.split(begin, 1)
        path.write_text(head + begin + "\n" + "\n".join(block) + "\n" + end + rest.split(end, 1)[1])


def _stable(row, curves, walls) -> str:
    """The stable solve's IQM env steps and training seconds over the seeds that reach it; and the
    whole process's seconds to it (start-up and evaluations included) where every one of them ran
    in one process that the runner clocked (`wall`)."""
    if row.threshold is None:
        return ""
    hits = {s: stable_at(c, row.threshold) for s, c in curves.items()}
    got = {s: h for s, h in hits.items() if h is not None}
    if not got:
        return f"never (>= {row.threshold:g})"
    steps, secs = iqm_ci([h[0] for h in got.values()])[0], iqm_ci([h[1] for h in got.values()])[0]
    whole = [walls.get(s, {}).get(h[0]) for s, h in got.items()]
    whole = f", whole process {iqm_ci(whole)[0]:.0f} s" if None not in whole else ""
    return f"{steps:,.0f} steps, {secs:.0f} s{whole} ({len(got)}/{len(hits)} >= {row.threshold:g})"


def _gym_cell(gym: dict, scale: float) -> str:
    """The final policies on gymnasium's env (GYM_SEED's episodes): IQM [interval] over seeds."""
    if not gym:
        return ""
    m, lo, hi = iqm_ci(list(gym.values()))
    return f"{_fmt(m, scale)} [{_fmt(lo, scale)}, {_fmt(hi, scale)}] ({len(gym)} seeds)"


def _speed(curves: dict) -> list[float]:
    """Each seed's env steps per training second."""
    return [c[-1][0] / max(c[-1][1], 1e-9) for c in curves.values()]


def _other(ent: dict, entries: list[dict]) -> dict | None:
    """The entry a row is compared with (`against`: a label on its env, or ENV:LABEL)."""
    row = ent["row"]
    return next(
        (
            e
            for e in entries
            if row.against in (f"{e['row'].env}:{e['row'].label}", e["row"].label)
            and (":" in row.against or e["row"].env == row.env)
        ),
        None,
    )


def _improvement(ent: dict, entries: list[dict]) -> str:
    from stats import probability_of_improvement, ratio

    row, other = ent["row"], _other(ent, entries)
    if not row.against or other is None:
        return ""
    mine = [c[-1][2] for c in ent["curves"].values()]
    theirs = [c[-1][2] for c in other["curves"].values()]
    p, lo, hi = probability_of_improvement({"t": mine}, {"t": theirs})
    x, xlo, xhi = ratio({"t": _speed(ent["curves"])}, {"t": _speed(other["curves"])})
    name = other["row"].label if other["row"].env == row.env else row.against
    cell = f"{p:.2f} [{lo:.2f}, {hi:.2f}]; speed {x:.2f}x [{xlo:.2f}, {xhi:.2f}]"
    t = min(c[-1][1] for e in (ent, other) for c in e["curves"].values())
    if all(len(c) > 1 for e in (ent, other) for c in e["curves"].values()):  # (a curve to read)
        mine_t, theirs_t = (_at_time(e["curves"], t) for e in (ent, other))
        scale = max(abs(mine_t), abs(theirs_t))
        cell += f"; at {t:.0f} s: {_fmt(mine_t, scale)} vs {_fmt(theirs_t, scale)}"
    # (a row without a threshold has no stable solve of its own: a peer that cannot evaluate
    # during its run, such as a loop compiled whole)
    solve = _solve_ratio(row, ent["curves"], other["curves"]) if other["row"].threshold else ""
    return cell + (f"; solve {solve}" if solve else "") + f" vs {name}"


def _at_time(curves: dict, t: float) -> float:
    """IQM over seeds of the eval return read off each curve at `t` training seconds (linear
    between evaluations; before the first one, its value)."""
    import numpy as np

    return iqm_ci([float(np.interp(t, [c[1] for c in cs], [c[2] for c in cs])) for cs in
                   curves.values()])[0]  # fmt: skip


def _solve_ratio(row, mine: dict, theirs: dict) -> str:
    """How many times sooner (seconds) this row solves stably than the other, IQM over the seeds
    that did on each side, with its interval and those seed counts."""
    from stats import ratio

    if row.threshold is None:
        return ""
    a, b = (
        [h[1] for c in cs.values() if (h := stable_at(c, row.threshold))] for cs in (mine, theirs)
    )
    if not a or not b:
        return ""
    x, lo, hi = ratio({"t": b}, {"t": a})
    seeds = f"{len(a)}/{len(mine)} vs {len(b)}/{len(theirs)} seeds"
    return f"{x:.1f}x [{lo:.1f}, {hi:.1f}] sooner ({seeds})"


def threads_caption(entries: list[dict]) -> str:
    """How many threads the seconds were taken on: one a run, every core, or which rows had every
    core (a row with `threads=0` runs alone)."""
    alone = list(dict.fromkeys(f"{e['row'].env} {e['row'].label}" for e in entries
                               if e["row"].threads == 0))  # fmt: skip
    if not alone:
        return "one torch thread per run. "
    if len(alone) == len({(e["row"].env, e["row"].label) for e in entries}):
        return "every core of the machine per run. "
    return f"one torch thread per run; every core, one run at a time: {', '.join(alone)}. "


def report(group: str, results: Path = RESULTS) -> str:
    unfinished: list[str] = []
    entries = collect(group, results, unfinished)
    if not entries:
        raise SystemExit(
            f"error: no metrics for group {group!r} under {results / group / 'runs'}: "
            f"run `python bench/run.py {group}` first"
        )
    compared = any(e["row"].against for e in entries)
    columns = experiments.COLUMNS.get(group, {})
    on_gym = any(e["gym"] for e in entries)
    seeds = sorted({s for e in entries for s in e["curves"]})
    meta_path = results / group / "runs" / "commands.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    # where each row's seeds ran, where runs/commands.json says (the runner records it): each
    # machine with the day (or days) its seeds ran
    where = {}
    for e in entries:
        ran = [m for s in e["curves"] if "machine" in (m := meta.get(e["row"].key(s), {}))]
        days = {m["machine"]: sorted({x["date"][:10] for x in ran if x["machine"] == m["machine"]})
                for m in ran}  # fmt: skip
        where[e["row"].key(0)] = "; ".join(f"{k}, {' to '.join(dict.fromkeys([d[0], d[-1]]))}"
                                           for k, d in days.items())  # fmt: skip
        # the share of the machine its seeds had (the runner measures it): speeds are comparable
        # only between rows whose runs had a similar share
        if shares := [(m["cores"], m["other_cores"]) for m in ran if "other_cores" in m]:
            own, rest = (sum(x) / len(shares) for x in zip(*shares))
            of = f" ({len(shares)} of {len(ran)} seeds)" if len(shares) < len(ran) else ""
            where[e["row"].key(0)] += f"; cores busy{of}: its {own:.1f}, other work {rest:.1f}"
    machines = any(where.values())
    lines = [
        f"## Benchmark group `{group}`",
        "",
        f"Metric: the final policy's deterministic evaluation, mean return over {EVAL_EPISODES} "
        f"episodes on a fresh env (seed + 10000), then the interquartile mean over seeds "
        f"{', '.join(map(str, seeds))} with its 95% stratified-bootstrap interval in brackets "
        f"(bench/stats.py). "
        + "Seconds: training seconds (the run's clock less its evaluations), "
        + threads_caption(entries)
        + (
            "On gymnasium's env: the final policy on `gymnasium.make(env)`, 10 episodes from seed "
            f"{experiments.GYM_SEED}, IQM over seeds. "
            if on_gym
            else ""
        )
        + f"Reproduce: `bash benchmark.sh {group}`; one row by hand: the "
        f"command in `runs/commands.json`.",
        "",
        "| env | algorithm | env steps | eval return | per seed "
        + ("| on gymnasium's env " if on_gym else "")
        + "| train s / run | env steps / s | stable solve "
        + (
            "| vs the other: P(ours > it); env steps/s ratio; stable solve; return at equal "
            "training seconds "
            if compared
            else ""
        )
        + "".join(f"| {name} " for name in columns.values())
        + ("| machine, date " if machines else "")
        + "| reference |",
        "|---|---|---:|---:|---|"
        + ("---:|" if on_gym else "")
        + "---:|---:|---:|"
        + ("---|" if compared else "")
        + "---:|" * len(columns)
        + ("---|" if machines else "")
        + "---|",
    ]
    used = set()
    envs_in_order = list(dict.fromkeys(e["row"].env for e in entries))
    for env_id in envs_in_order:
        for ent in (e for e in entries if e["row"].env == env_id):
            row, curves = ent["row"], ent["curves"]
            finals = [c[-1][2] for c in curves.values()]
            secs = [c[-1][1] for c in curves.values()]
            steps = max(c[-1][0] for c in curves.values())
            m, lo, hi = iqm_ci(finals)
            scale = max(abs(v) for v in finals)
            ref = REFERENCES.get((env_id, row.algo))
            if ref:
                used.add(ref[0])
                used |= {experiments.CLEANRL} if "CleanRL" in ref[1] else set()
            lines.append(
                f"| {env_id} | {row.label} | {steps:,} | {_fmt(m, scale)} "
                f"[{_fmt(lo, scale)}, {_fmt(hi, scale)}] | "
                f"{', '.join(_fmt(v, scale) for v in finals)} | "
                + (f"{_gym_cell(ent['gym'], scale)} | " if on_gym else "")
                + f"{iqm_ci(secs)[0]:.0f} "
                f"| {iqm_ci(_speed(curves))[0]:,.0f} | {_stable(row, curves, ent['walls'])} "
                + (f"| {_improvement(ent, entries)} " if compared else "")
                + "".join(
                    f"| {iqm_ci(ent['extra'][k])[0]:.2f} " if k in ent["extra"] else "| "
                    for k in columns
                )
                + (f"| {where[row.key(0)]} " if machines else "")
                + f"| {f'{ref[0]}: {ref[1]}' if ref else ''} |"
            )
        for name, r in baseline_rows(env_id):
            scale = abs(r["eval_return"]) + r["eval_return_std"]
            lines.append(
                f"| {env_id} | {name} | | {_fmt(r['eval_return'], scale)} +- "
                f"{_fmt(r['eval_return_std'], scale)} (over {len(r['returns'])} episodes) | | | | "
                + ("| " if on_gym else "")
                + ("| " if compared else "")
                + "| " * len(columns)
                + ("| " if machines else "")
                + "| |"
            )
    lines.append("")
    if "StockTrading-v0" in envs_in_order:
        lines += [
            "StockTrading-v0's eval return is in-sample: 100 x log growth of the account over "
            "252-day episodes starting on random days of 2010-2019. The held-out backtest "
            "(2020-2022, against equal-weight buy-and-hold) is in "
            "[stock_trading.md](stock_trading.md).",
            "",
        ]
    lines += [f"- {src}: {SOURCES[src]}." for src in sorted(used)]
    if unfinished:
        lines.append(
            "- Not finished yet, left out (the row's next run resumes each from its checkpoint in "
            "bench/runs, not in git: on another machine, or with the checkpoint gone, it starts "
            f"again): {', '.join(unfinished)}."
        )
    lines += ["", "Curves (IQM over seeds, band its 95% bootstrap interval):", ""]
    for env_id in envs_in_order:
        png = f"{group}_{env_id.replace('/', '-')}.png"
        plot_env(env_id, [e for e in entries if e["row"].env == env_id], results / group / png)
        lines.append(f"![{env_id}]({png})")
    lines += ["", "Commands (one per seed; `--seed` varies):", ""]
    for ent in entries:
        seed = next(iter(ent["curves"]))
        cmd = meta.get(ent["row"].key(seed), {}).get("command")
        lines.append(f"- `{cmd or ' '.join(ent['row'].command(seed, 'runs', 'python'))}`")
    text = "\n".join(lines) + "\n"
    (results / group / f"{group}.md").write_text(text)
    into_docs(group, lines[2 : lines.index("", 4)])  # the metric line and the table
    if group in README_LINES:
        line = README_LINES[group].format(summary=summary(entries), ranges=ranges(entries))
        into_docs(group, [line], README)
    print(text)
    return text


def script(main, table: str | None = None) -> None:
    """The tail of a measurement script run as `python bench/<script>.py`: a user error is one line
    and exit status 2; `main()`'s table, where the script has one (`table`), is written to
    `TABLE.md` in bench/results once it completes (a run that fails keeps the last one)."""
    from common.checkpoint import atomic_write
    from common.cli import install_error_hook

    install_error_hook()
    text = main()
    if table is not None and text is not None:  # (None: a mode that makes no table)
        atomic_write(RESULTS / f"{table}.md", text.rstrip("\n") + "\n")


if __name__ == "__main__":
    from common.cli import ArgumentParser, install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("group", choices=experiments.groups())
    report(p.parse_args().group)
