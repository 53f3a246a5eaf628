"""Learning-curve benchmark: run algorithm files over seeds, keep every run's metrics, and turn them
into curves (PNG) and a markdown table with published reference numbers beside ours.

    python bench/suite.py run quick --jobs 2     # train every (experiment, seed) of the group
    python bench/suite.py report quick           # curves + table from the saved metrics only
    python bench/suite.py list full              # the commands a group runs, without running them

Each run is the algorithm file's own command line (`python algos/<algo>.py --env ... --seed ...`,
one torch thread, `OMP_NUM_THREADS=1`), so any row can be reproduced by hand. Its run directory
(checkpoint included) is kept under `bench/runs/<group>/`; its `metrics.jsonl` is copied to
`bench/results/<group>/runs/<env>__<name>__s<seed>.jsonl`, which is what the report reads (and what
is checked in for the quick group).

Metric (ours): the final policy's deterministic evaluation, mean return over K episodes on a fresh
env seeded `seed + 10000` (the last `eval_return` the run logs), then the interquartile mean over
seeds with its 95% stratified-bootstrap interval (bench/stats.py, Agarwal et al. 2021). The curves
plot the same evaluation at every `--eval-every` steps, IQM over seeds with its interval as a band,
against environment steps and against wall-clock seconds (training and evaluation time).
References are not all measured the same way; each names its source and metric.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EVAL_EPISODES = 10


@dataclass
class Experiment:
    algo: str  # algos/<algo>.py
    env: str
    steps: int
    eval_every: int
    # extra command-line flags (tyro names, underscores ok)
    flags: dict = field(default_factory=dict)
    name: str = ""  # label in tables and file names (default: algo)
    solved: float | None = None  # report the wall time to the first eval >= this

    @property
    def label(self) -> str:
        return self.name or self.algo

    def command(self, seed: int, out_dir: str, python: str = sys.executable) -> list[str]:
        cmd = [
            python,
            f"algos/{self.algo}.py",
            "--env",
            self.env,
            "--seed",
            str(seed),
            "--total-steps",
            str(self.steps),
            "--eval-every",
            str(self.eval_every),
            "--eval-episodes",
            str(EVAL_EPISODES),
            "--save-every",
            "0",
            "--out-dir",
            out_dir,
            "--quiet",
        ]
        for k, v in self.flags.items():
            flag = "--" + k.replace("_", "-")
            if isinstance(v, bool):
                cmd.append(flag if v else "--" + "no-" + k.replace("_", "-"))
            elif isinstance(v, (tuple, list)):
                cmd += [flag, *map(str, v)]
            else:
                cmd += [flag, str(v)]
        return cmd


# ---------------------------------------------------------------------------------------------
# reference numbers (shared/REFERENCES.md). RL Zoo: rl-baselines3-zoo benchmark.md, one trained
# agent, deterministic evaluation over ~150k steps, +- over episodes, training budget in brackets.
# ---------------------------------------------------------------------------------------------
ZOO = "RL Zoo"
CLEANRL = "CleanRL"
REFERENCES = {
    ("CartPole-v1", "ppo_vec"): (ZOO, "500.0 +- 0.0 (100k)"),
    ("CartPole-v1", "dqn"): (ZOO, "500.0 +- 0.0 (50k)"),
    ("CartPole-v1", "a2c"): (ZOO, "500.0 +- 0.0 (500k)"),
    ("Acrobot-v1", "ppo_vec"): (ZOO, "-73.5 +- 18.2 (1M)"),
    ("Acrobot-v1", "dqn"): (ZOO, "-76.6 +- 11.8 (100k)"),
    ("Pendulum-v1", "ppo_vec"): (ZOO, "-172.2 +- 104.2 (100k)"),
    ("Pendulum-v1", "sac"): (ZOO, "-157.0 +- 88.7 (20k)"),
    ("Pendulum-v1", "td3"): (ZOO, "-151.9 +- 90.2 (20k)"),
    ("Pendulum-v1", "ddpg"): (ZOO, "-152.1 +- 94.3 (20k, Pendulum-v0)"),
    ("Pendulum-v1", "a2c"): (ZOO, "-163.0 +- 103.2 (1M, Pendulum-v0)"),
    ("Hopper-v5", "ppo_vec"): (ZOO, "2410.4 +- 10.0 (1M, v3); CleanRL v4: 2382.9 +- 271.7"),
    ("Hopper-v5", "sac"): (ZOO, "2325.5 +- 1129.7 (1M, v3); CleanRL v4: 2310.5 +- 342.8"),
    ("Hopper-v5", "td3"): (ZOO, "3606.4 +- 4.0 (1M, v3); CleanRL v4: 3134.6 +- 360.2"),
    ("HalfCheetah-v5", "ppo_vec"): (ZOO, "5819.1 +- 663.5 (1M, v3); CleanRL v4: 1442.6 +- 46.0"),
    ("HalfCheetah-v5", "sac"): (ZOO, "9535.5 +- 100.5 (1M, v3); CleanRL v4: 9634.9 +- 1423.7"),
    ("HalfCheetah-v5", "td3"): (ZOO, "9655.7 +- 969.9 (1M, v3); CleanRL v4: 9583.2 +- 126.1"),
    ("Walker2d-v5", "ppo_vec"): (ZOO, "3478.8 +- 821.7 (1M, v3); CleanRL v4: 2288.0 +- 571.8"),
    ("Walker2d-v5", "sac"): (ZOO, "3863.2 +- 254.3 (1M, v3); CleanRL v4: 3591.5 +- 911.3"),
    ("Walker2d-v5", "td3"): (ZOO, "4717.8 +- 46.3 (1M, v3); CleanRL v4: 4057.6 +- 658.8"),
    ("Ant-v5", "ppo_vec"): (
        ZOO,
        "1327.2 +- 451.6 (1M, v3); CleanRL Isaac Gym PPO: 3953 +- 667 (4096 envs, 240 s, GPU)",
    ),
    ("Ant-v5", "sac"): (ZOO, "4615.8 +- 1354.1 (1M, v3)"),
    ("Ant-v5", "td3"): (ZOO, "5813.3 +- 589.8 (1M, v3)"),
}
SOURCES = {
    ZOO: "RL Baselines3 Zoo `benchmark.md`: one trained agent, deterministic evaluation over ~150k "
    "steps, +- over episodes (not seeds), training budget in brackets; older gym "
    "versions where marked",
    CLEANRL: "CleanRL `docs/benchmark`: 3 seeds, 1M steps, training-episode returns",
}

# ---------------------------------------------------------------------------------------------
# groups
# ---------------------------------------------------------------------------------------------
PENDULUM_OFF = dict(num_envs=4, hidden=(128, 128))
CHASING_PPO = dict(num_envs=256, num_steps=32, num_minibatches=4)  # as tests/test_chasing.py
# as bench/stock_trading.py
STOCK_PPO = dict(num_envs=256, num_steps=64, learning_rate=3e-4, num_minibatches=8, update_epochs=4)

GROUPS: dict[str, dict] = {
    "quick": dict(
        seeds=[1, 2, 3],
        about="minutes on a laptop CPU: classic control and the seed documents' demo envs",
        experiments=[
            Experiment("ppo_vec", "CartPole-v1", 400_000, 40_000, solved=475),
            # the file's defaults (100k)
            Experiment("dqn", "CartPole-v1", 100_000, 10_000, solved=475),
            Experiment(
                "ppo_vec",
                "Pendulum-v1",
                150_000,
                15_000,
                dict(
                    num_envs=64,
                    num_steps=64,
                    num_minibatches=32,
                    update_epochs=10,
                    learning_rate=1e-3,
                    gamma=0.9,
                    norm_reward=True,
                ),
            ),
            Experiment("sac", "Pendulum-v1", 12_000, 2_000, PENDULUM_OFF),
            Experiment("td3", "Pendulum-v1", 14_000, 2_000, PENDULUM_OFF),
            Experiment("ddpg", "Pendulum-v1", 12_000, 2_000, PENDULUM_OFF),
            Experiment("ppo_vec", "Chasing-v0", 300_000, 20_000, CHASING_PPO),
            Experiment("ppo_vec", "StockTrading-v0", 2_000_000, 200_000, STOCK_PPO),
        ],
    ),
    "full": dict(
        seeds=[1, 2, 3],
        about="hours on a CPU, or a GPU: the quick group's tasks at longer budgets, Acrobot, and "
        "MuJoCo v5 at 1M steps",
        experiments=[
            Experiment("ppo_vec", "CartPole-v1", 1_000_000, 50_000, solved=475),
            Experiment("dqn", "CartPole-v1", 100_000, 10_000, solved=475),
            Experiment("a2c", "CartPole-v1", 500_000, 25_000, solved=475),
            Experiment("ppo_vec", "Acrobot-v1", 1_000_000, 50_000),
            Experiment("dqn", "Acrobot-v1", 300_000, 25_000),
            Experiment("sac", "Pendulum-v1", 20_000, 2_000, PENDULUM_OFF),
            Experiment("td3", "Pendulum-v1", 20_000, 2_000, PENDULUM_OFF),
            Experiment("ddpg", "Pendulum-v1", 20_000, 2_000, PENDULUM_OFF),
            Experiment("ppo_vec", "Chasing-v0", 1_000_000, 50_000, CHASING_PPO),
            Experiment("ppo_vec", "StockTrading-v0", 10_000_000, 500_000, STOCK_PPO),
            *[
                Experiment(
                    a,
                    e,
                    1_000_000,
                    50_000,
                    dict(num_envs=1, learning_starts=10_000, hidden=(256, 256)),
                )
                for e in ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5")
                for a in ("sac", "td3")
            ],
            *[
                Experiment(
                    "ppo_vec",
                    e,
                    2_000_000,
                    100_000,
                    dict(num_envs=64, num_steps=64, num_minibatches=16, update_epochs=10),
                )
                for e in ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5")
            ],
        ],
    ),
}


def results_dir(group: str) -> Path:
    return ROOT / "bench" / "results" / group


def run_file(group: str, exp: Experiment, seed: int) -> Path:
    return results_dir(group) / "runs" / f"{exp.env}__{exp.label}__s{seed}.jsonl"


# ---------------------------------------------------------------------------------------------
# run
# ---------------------------------------------------------------------------------------------
def run_one(exp: Experiment, seed: int, group: str, python: str) -> dict:
    out = ROOT / "bench" / "runs" / group / f"{exp.env}__{exp.label}__s{seed}"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cmd = exp.command(seed, str(out.relative_to(ROOT)), python)
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="disabled")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    run_dir = next(p for p in out.iterdir() if p.is_dir())
    dest = run_file(group, exp, seed)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / "metrics.jsonl", dest)
    rows = load_rows(dest)
    final = [r for r in rows if r.get("eval_return") is not None]
    print(
        f"  {exp.env} {exp.label} seed {seed}: eval {final[-1]['eval_return']:.1f}, {wall:.0f} s",
        flush=True,
    )
    return {"cmd": cmd, "wall": wall, "run_dir": str(run_dir)}


def do_run(group: str, jobs: int, only: list[str] | None, python: str) -> None:
    spec = GROUPS[group]
    todo = [
        (e, s)
        for e in spec["experiments"]
        for s in spec["seeds"]
        if not only or e.env in only or e.label in only or f"{e.env}:{e.label}" in only
    ]
    print(f"group {group}: {len(todo)} runs, {jobs} at a time, one torch thread each", flush=True)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(jobs) as pool:  # each run is its own process
        results = list(pool.map(lambda es: run_one(*es, group, python), todo))
    meta_path = results_dir(group) / "runs" / "commands.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    for (e, s), r in zip(todo, results):
        meta[f"{e.env}__{e.label}__s{s}"] = {
            "command": " ".join(Path(c).name if c == python else c for c in r["cmd"]),
            "wall_seconds": round(r["wall"], 1),
        }
    meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    print(f"group {group}: {len(todo)} runs in {time.perf_counter() - t0:.0f} s", flush=True)


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def load_rows(path: Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def eval_curve(rows: list[dict]) -> list[tuple[int, float, float]]:
    """(step, seconds, eval_return) at every evaluation of a run."""
    return [
        (r["step"], r["seconds"], r["eval_return"])
        for r in rows
        if r.get("eval_return") is not None and math.isfinite(r["eval_return"])
    ]


def _iqm_ci(xs) -> tuple[float, float, float]:
    """IQM over seeds and its 95% bootstrap interval (one task: the seeds are the stratum)."""
    from stats import interval

    return interval({"runs": xs})


def collect(group: str) -> list[dict]:
    """One entry per experiment of `group` with every seed whose metrics file exists."""
    spec = GROUPS[group]
    out = []
    for exp in spec["experiments"]:
        curves = {}
        for s in spec["seeds"]:
            p = run_file(group, exp, s)
            if p.exists():
                c = eval_curve(load_rows(p))
                if c:
                    curves[s] = c
        if curves:
            out.append({"exp": exp, "curves": curves})
    return out


def plot_env(env_id: str, entries: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for i, ent in enumerate(entries):
        color = f"C{i}"
        # seeds of one experiment evaluate at the same steps
        n = min(len(c) for c in ent["curves"].values())
        arr = np.array([c[:n] for c in ent["curves"].values()], dtype=float)  # [seeds, n, 3]
        steps, secs = arr[0, :, 0], arr[:, :, 1].mean(0)
        mid, lo, hi = np.array([_iqm_ci(arr[:, j, 2]) for j in range(n)]).T
        label = f"{ent['exp'].label} ({arr.shape[0]} seeds)"
        for ax, x in ((axes[0], steps), (axes[1], secs)):
            ax.plot(x, mid, color=color, marker="o", ms=3, label=label)
            ax.fill_between(x, lo, hi, color=color, alpha=0.2)
    spans = [max(c[-1][0] for c in e["curves"].values()) for e in entries]
    if max(spans) > 8 * min(spans):  # on-policy and off-policy budgets differ by 10x: log axis
        axes[0].set_xscale("log")
    axes[0].set_xlabel("environment steps")
    axes[1].set_xlabel("wall-clock seconds (1 torch thread, 2 runs at a time)")
    for ax in axes:
        ax.set_ylabel(f"eval return ({EVAL_EPISODES} det. episodes)")
        ax.grid(alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    fig.suptitle(f"{env_id}: IQM over seeds, band its 95% bootstrap interval")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def baseline_rows(env_id: str) -> list[str]:
    """Scripted or fixed policies printed beside the learners (computed live: cheap)."""
    import torch

    from common.evaluate import evaluate

    rows = []
    if env_id == "Chasing-v0":
        try:
            from envs.chasing import pursuit_policy
        except ImportError:
            return rows
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
        rows.append(
            (
                "zero action ("
                + ("stand still" if env_id == "Chasing-v0" else "hold cash, no trade")
                + ")",
                r,
            )
        )
    return rows


def _fmt(v: float, scale: float) -> str:
    return f"{v:.2f}" if scale < 20 else f"{v:.1f}"


DOCS = ROOT / "docs" / "results.md"


def markers(group: str) -> tuple[str, str]:
    return (
        f"<!-- the {group} table, generated by `bash benchmark.sh report {group}`: not edited -->",
        f"<!-- end of the {group} table -->",
    )


def into_docs(group: str, block: list[str]) -> None:
    """`block` into docs/results.md between the group's markers (where it has them): the numbers a
    reader sees there are the report's, never copied by hand."""
    begin, end = markers(group)
    text = DOCS.read_text()
    if begin not in text:
        return
    head, rest = text.split(begin, 1)
    DOCS.write_text(head + begin + "\n" + "\n".join(block) + "\n" + end + rest.split(end, 1)[1])


def report(group: str) -> str:
    spec = GROUPS[group]
    entries = collect(group)
    if not entries:
        raise SystemExit(
            f"no metrics for group {group!r} under {results_dir(group) / 'runs'}: "
            f"run `python bench/suite.py run {group}` first"
        )
    meta_path = results_dir(group) / "runs" / "commands.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    envs_in_order = list(dict.fromkeys(e["exp"].env for e in entries))
    lines = [
        f"## Benchmark group `{group}`",
        "",
        f"Metric: the final policy's deterministic evaluation, mean return over {EVAL_EPISODES} "
        f"episodes on a fresh env (seed + 10000), then the interquartile mean over seeds "
        f"{', '.join(map(str, spec['seeds']))} with its 95% stratified-bootstrap interval in "
        f"brackets (bench/stats.py). "
        f"Wall time: the run's own clock (training + evaluations), one torch thread per run, two "
        f"runs at a time on a 2-core CPU. Reproduce: `bash benchmark.sh {group}`; one row by hand: "
        f"the command in `runs/commands.json`.",
        "",
        "| env | algorithm | env steps | eval return | per seed | wall s / run "
        "| time to solve | reference |",
        "|---|---|---:|---:|---|---:|---:|---|",
    ]
    used_sources = set()
    for env_id in envs_in_order:
        for ent in (e for e in entries if e["exp"].env == env_id):
            exp, curves = ent["exp"], ent["curves"]
            finals = [c[-1][2] for c in curves.values()]
            secs = [c[-1][1] for c in curves.values()]
            steps = max(c[-1][0] for c in curves.values())
            m, lo, hi = _iqm_ci(finals)
            scale = max(abs(v) for v in finals)
            solve = ""
            if exp.solved is not None:
                hits = [
                    next((t for st, t, v in c if v >= exp.solved), None) for c in curves.values()
                ]
                got = [h for h in hits if h is not None]
                solve = (
                    f"{_iqm_ci(got)[0]:.0f} s ({len(got)}/{len(hits)} >= {exp.solved:g})"
                    if got
                    else f"not reached (>= {exp.solved:g})"
                )
            ref = REFERENCES.get((env_id, exp.algo))
            if ref:
                used_sources.add(ref[0])
                if "CleanRL" in ref[1]:
                    used_sources.add(CLEANRL)
            ref_txt = f"{ref[0]}: {ref[1]}" if ref else ""
            per_seed = ", ".join(_fmt(v, scale) for v in finals)
            lines.append(
                f"| {env_id} | {exp.label} | {steps:,} | {_fmt(m, scale)} "
                f"[{_fmt(lo, scale)}, {_fmt(hi, scale)}] | {per_seed} | {_iqm_ci(secs)[0]:.0f} "
                f"| {solve} | {ref_txt} |"
            )
        for name, r in baseline_rows(env_id):
            scale = abs(r["eval_return"]) + r["eval_return_std"]
            lines.append(
                f"| {env_id} | {name} | | {_fmt(r['eval_return'], scale)} +- "
                f"{_fmt(r['eval_return_std'], scale)} (over {len(r['returns'])} episodes) | | | | |"
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
    for src in sorted(used_sources):
        lines.append(f"- {src}: {SOURCES[src]}.")
    lines += [
        "",
        "Curves (eval return vs environment steps and vs wall time, IQM over "
        "seeds, band its 95% bootstrap interval):",
        "",
    ]
    for env_id in envs_in_order:
        png = f"{group}_{env_id}.png"
        plot_env(env_id, [e for e in entries if e["exp"].env == env_id], results_dir(group) / png)
        lines.append(f"![{env_id}]({png})")
    lines += ["", "Commands (one per seed; `--seed` varies):", ""]
    for ent in entries:
        key = f"{ent['exp'].env}__{ent['exp'].label}__s{next(iter(ent['curves']))}"
        cmd = meta.get(key, {}).get("command") or " ".join(
            ent["exp"].command(next(iter(ent["curves"])), "runs", "python")
        )
        lines.append(f"- `{cmd}`")
    text = "\n".join(lines) + "\n"
    (results_dir(group) / f"{group}.md").write_text(text)
    into_docs(group, lines[2 : lines.index("", 4)])  # the metric line and the table
    print(text)
    return text


def main(argv=None) -> None:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("action", choices=["run", "report", "list"])
    p.add_argument("group", choices=sorted(GROUPS))
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (each one torch thread)")
    p.add_argument(
        "--only", nargs="*", help="run only these envs / algorithm labels / ENV:LABEL pairs"
    )
    p.add_argument("--python", default=sys.executable, help="interpreter for the algorithm files")
    a = p.parse_args(argv)
    if a.action == "list":
        for e in GROUPS[a.group]["experiments"]:
            print(" ".join(e.command(GROUPS[a.group]["seeds"][0], "runs", "python")))
        return
    if a.action == "run":
        do_run(a.group, a.jobs, a.only, a.python)
    report(a.group)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
