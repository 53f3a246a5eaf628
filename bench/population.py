"""Population-based training vs one run, at equal total environment steps, on Pendulum-v1 with PPO
(`algos/ppo_vec.py` at the settings of its learning test, `tests/conftest.py: PPO_PENDULUM`).

* population: `python -m population` with P members whose learning rates span good and poor
  values (`--vary learning_rate=3e-4,1e-3,3e-3,1e-2`), R rounds of S environment steps each, in
  `tournament` and `generational` mode; P*R*S environment steps in all.
* single run: one `ppo_vec` run at a typical member's settings (lr 1e-3, the seed of the
  population's lr-1e-3 member) for the same P*R*S steps, checkpointed every S steps, i.e. at the
  population's round boundaries; each checkpoint is kept and scored by the evaluation that scores
  the population's rounds (--eval-episodes episodes from the population's --eval-seed), so that the
  single run can be read as "a population of one": its best checkpoint by those scores (the same
  selection the leaderboard makes), its final checkpoint, and its checkpoint after R*S steps (one
  member's share of the budget).

Every run uses constant learning rates (`--no-anneal-lr`): a population round extends --total-steps,
so annealing would restart every round; the single run does the same so that the two differ only
in the population's selection. Metric: the chosen checkpoint (population: leaderboard.json's best
entry) re-evaluated with `common.evaluate.evaluate(load_policy(ckpt), env, episodes=50, seed=...)`
on an evaluation seed that no selection used (a pick is the maximum of noisy scores, so its own
score is optimistic), then mean +- std over seeds.
Curves: best-so-far training-time score vs total environment steps and vs wall time,
`bench/results/population_pendulum.png`.

    python bench/population.py                  # 2 seeds, P=4, R=8, S=8192 (262k steps per row)
    python bench/population.py --quick          # 1 seed, R=4 (131k steps per row), a few minutes
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np

# RL Baselines3 Zoo benchmark.md: one agent, deterministic evaluation, +- over episodes, training
# budget
RL_ZOO = {"Pendulum-v1": "-172.2 ± 104.2 (100k)"}
RL_ZOO_SOURCE = (
    "RL Baselines3 Zoo benchmark.md (PPO; one agent, deterministic eval, ± over episodes)"
)
# tests/conftest.py PPO_PENDULUM, minus the learning rate (varied) and with constant learning rates
PPO_FLAGS = [
    "--num-envs",
    "64",
    "--num-steps",
    "64",
    "--num-minibatches",
    "32",
    "--update-epochs",
    "10",
    "--gamma",
    "0.9",
    "--norm-reward",
    "--no-anneal-lr",
]
EVAL_SEED = 424_242  # the final re-evaluation; no selection uses it
# population's default --eval-seed: scores every round (and the single run's snapshots)
SELECT_SEED = 10_000
ALGO = "algos/ppo_vec.py"


def algo_flags(a) -> list[str]:
    return ["--env", a.env, *PPO_FLAGS, "--save-every", "0"]


# ---------------------------------------------------------------------------------------------
# the population
# ---------------------------------------------------------------------------------------------
def run_population(mode: str, seed: int, a, workdir: Path) -> dict:
    pop_dir = workdir / f"{mode}-seed{seed}"
    if pop_dir.exists():  # the same --dir would continue an old population
        shutil.rmtree(pop_dir)
    cmd = [
        sys.executable,
        "-m",
        "population",
        "--algo",
        ALGO,
        "--mode",
        mode,
        "--population",
        str(a.population),
        "--rounds",
        str(a.rounds),
        "--steps-per-round",
        str(a.steps_per_round),
        "--seed",
        str(seed),
        "--dir",
        str(pop_dir),
        "--vary",
        "learning_rate=" + ",".join(a.lrs),
        "--eval-episodes",
        str(a.eval_episodes),
        "--eval-seed",
        str(SELECT_SEED),
        "--",
        *algo_flags(a),
        "--seed",
        str(100 * seed),
    ]
    t0 = time.time()
    with open(workdir / f"{mode}-seed{seed}.out", "w") as out:
        code = subprocess.run(cmd, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.time() - t0
    if code != 0:
        raise RuntimeError(
            f"population {mode} seed {seed} failed (exit {code}); see "
            f"{workdir / f'{mode}-seed{seed}.out'}"
        )
    events = [
        json.loads(line)
        for line in (pop_dir / "population.jsonl").read_text().splitlines()
        if line.strip()
    ]
    rounds = sorted((e for e in events if e["event"] == "round"), key=lambda e: e["time"])
    curve, total, best = [], 0, -math.inf
    for e in rounds:
        total += e["trained"]
        best = max(best, e["score"])
        curve.append((total, e["time"] - t0, best))
    board = json.loads((pop_dir / "leaderboard.json").read_text())
    adoptions = sum(e["event"] == "adopt" for e in events)
    return {
        "mode": mode,
        "seed": seed,
        "wall": wall,
        "steps": total,
        "curve": curve,
        "best": board[0],
        "checkpoint": board[0]["checkpoint"],
        "adoptions": adoptions,
        "dir": str(pop_dir),
        "cmd": " ".join(
            shlex.quote(rel(c) if c.startswith("/") else c) for c in ["python", *cmd[1:]]
        ),
    }


# ---------------------------------------------------------------------------------------------
# the single run
# ---------------------------------------------------------------------------------------------
def single_flags(a, seed: int) -> list[str]:
    return [
        *algo_flags(a)[:-2],
        "--learning-rate",
        a.single_lr,
        "--seed",
        str(seed),
        "--total-steps",
        str(a.population * a.rounds * a.steps_per_round),
        "--eval-every",
        "0",
        "--save-every",
        str(a.steps_per_round),
        "--quiet",
    ]


def run_single(job) -> dict:
    """One uninterrupted ppo_vec run; every checkpoint it writes (every S steps) is also copied
    aside."""
    a, seed, out_dir = job
    import torch

    torch.set_num_threads(1)
    from algos import ppo_vec
    from common.cli import cli
    from common.run import hooks

    out_dir = Path(out_dir)
    if out_dir.exists():
        shutil.rmtree(out_dir)
    snaps = out_dir / "snapshots"
    snaps.mkdir(parents=True)
    wall_at: dict[int, float] = {}
    t0 = time.perf_counter()

    def keep(run, path):  # a copy of each checkpoint the run writes, named by its step
        shutil.copy(path, snaps / f"step{run.step:09d}.pt")
        wall_at[run.step] = time.perf_counter() - t0

    args = cli(
        ppo_vec.Args,
        defaults_for=getattr(ppo_vec, "default_args", None),
        argv=[*single_flags(a, seed), "--out-dir", str(out_dir)],
    )
    with hooks(on_save=keep):
        r = ppo_vec.main(args)
    wall = time.perf_counter() - t0
    # every snapshot scored as the population scores a round (same episodes, same number)
    evals = [
        (step, reevaluate(str(snaps / f"step{step:09d}.pt"), a.env, a.eval_episodes, SELECT_SEED))
        for step in sorted(wall_at)
    ]
    curve, best = [], -math.inf
    for step, score in evals:
        best = max(best, score)
        curve.append((step, wall_at.get(step, float("nan")), best))
    # as the leaderboard: best score, earliest on ties
    best_step = max(evals, key=lambda e: (e[1], -e[0]))[0]
    return {
        "seed": seed,
        "wall": wall,
        "steps": r["steps"],
        "curve": curve,
        "evals": evals,
        "final": r["checkpoint"],
        "best_step": best_step,
        "best": str(snaps / f"step{best_step:09d}.pt"),
        "share": str(snaps / f"step{a.rounds * a.steps_per_round:09d}.pt"),
        "run_dir": r["run_dir"],
    }


# ---------------------------------------------------------------------------------------------
# evaluation, plot, table
# ---------------------------------------------------------------------------------------------
def reevaluate(path: str, env: str, episodes: int, seed: int = EVAL_SEED) -> float:
    import torch

    from algos import ppo_vec
    from common.evaluate import evaluate

    with torch.no_grad():
        return evaluate(ppo_vec.load_policy(path), env, episodes=episodes, seed=seed)["eval_return"]


def plot(
    series: dict,
    finals: dict,
    path: Path,
    title: str,
    eval_episodes: int,
    episodes: int,
    members: int,
) -> None:
    """Left: best-so-far training-time score vs total environment steps, with the re-evaluated score
    of the chosen checkpoint as a marker at the end; right: the same curves vs wall time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4), sharey=True)
    colors = {"tournament": "C0", "generational": "C2", "single": "C3"}
    lo, hi, low = -400.0, -80.0, 0.0
    xmax = max(x for curves in series.values() for c in curves for x, _, _ in c)
    for k, (name, curves) in enumerate(series.items()):
        color = colors.get(name.split()[0], "C7")
        for i, curve in enumerate(curves):
            steps, wall, best = zip(*curve)
            style = dict(color=color, where="post", alpha=0.85, linestyle="-" if i == 0 else "--")
            axes[0].step(steps, best, label=name if i == 0 else None, **style)
            axes[1].step(wall, best, **style)
            hi, low = max(hi, max(best) + 20), min(low, min(best))
        for i, (x, y) in enumerate(finals.get(name, [])):  # side by side at the end of the curves
            axes[0].plot(
                [x * (1.02 + 0.025 * k)],
                [y],
                marker="o" if i == 0 else "s",
                color=color,
                markersize=7,
                markeredgecolor="k",
                linestyle="none",
                label=f"{name}: chosen checkpoint, {episodes}-ep re-eval" if i == 0 else None,
            )
            lo = min(lo, y - 20)
    axes[0].set_xlabel("total environment steps (population: summed over its members)")
    axes[1].set_xlabel(
        f"wall time, s (population: {members} processes on 2 cores; single run: 1 core)"
    )
    axes[0].set_ylabel(f"best-so-far deterministic eval return ({eval_episodes} ep)")
    axes[0].set_ylim(lo, hi)
    axes[0].set_xlim(0, xmax * (1.04 + 0.025 * len(series)))
    for ax in axes:
        ax.grid(alpha=0.3)
    clipped = f" (axis clipped at {lo:.0f})" if low < lo else ""
    axes[0].legend(
        fontsize=7,
        loc="lower right",
        title=f"solid / circle: first seed; dashed / square: others{clipped}",
        title_fontsize=7,
    )
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def rel(path: Path) -> str:
    path = Path(path).resolve()
    return str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)


def fmt(values: list[float]) -> tuple[str, str]:
    v = np.array(values)
    return f"{v.mean():.1f} ± {v.std():.1f}", ", ".join(f"{x:.1f}" for x in v)


def main() -> str:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="Pendulum-v1")
    p.add_argument("--seeds", type=int, nargs="+", default=None, help="default: 1 2 (--quick: 1)")
    p.add_argument("--population", type=int, default=4, help="members P")
    p.add_argument(
        "--rounds", type=int, default=None, help="rounds R per member (default 8, --quick 4)"
    )
    p.add_argument(
        "--steps-per-round", type=int, default=8192, help="steps S per round, a multiple of 64*64"
    )
    p.add_argument(
        "--eval-episodes",
        type=int,
        default=50,
        help="episodes of the evaluation that scores every round and snapshot "
        "(what the selection ranks)",
    )
    p.add_argument(
        "--lrs", default="3e-4,1e-3,3e-3,1e-2", help="the members' learning rates (--vary)"
    )
    p.add_argument(
        "--single-lr", default="1e-3", help="learning rate of the single run (a typical member's)"
    )
    p.add_argument(
        "--modes",
        nargs="+",
        default=["tournament", "generational"],
        choices=["tournament", "generational"],
    )
    p.add_argument("--episodes", type=int, default=50, help="episodes of the final re-evaluation")
    p.add_argument(
        "--jobs", type=int, default=2, help="single runs in parallel (one torch thread each)"
    )
    p.add_argument("--quick", action="store_true", help="1 seed, R=4 (131k steps per row)")
    p.add_argument(
        "--workdir",
        default=str(ROOT / "runs" / "bench_population"),
        help="where the populations and runs are kept (cleared per configuration)",
    )
    p.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = p.parse_args()
    a.seeds = a.seeds or ([1] if a.quick else [1, 2])
    a.rounds = a.rounds or (4 if a.quick else 8)
    a.lrs = [x.strip() for x in a.lrs.split(",")]
    batch = 64 * 64
    if a.steps_per_round % batch:
        p.error(
            f"--steps-per-round must be a multiple of the PPO batch {batch} (64 envs x 64 steps)"
        )
    single_seed = {
        s: 100 * s + (a.lrs.index(a.single_lr) if a.single_lr in a.lrs else 0) for s in a.seeds
    }
    total = a.population * a.rounds * a.steps_per_round
    share = a.rounds * a.steps_per_round
    k = a.eval_episodes
    workdir = Path(a.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    t_start = time.time()
    print(
        f"{a.env}: population {a.population} x {a.rounds} rounds x {a.steps_per_round:,} "
        f"steps = {total:,} steps per population; single run {total:,} steps; seeds "
        f"{a.seeds}; work dir {workdir}",
        flush=True,
    )

    pops = []
    for seed in a.seeds:
        for mode in a.modes:
            r = run_population(mode, seed, a, workdir)
            pops.append(r)
            print(
                f"{mode} seed {seed}: {r['wall']:.0f} s, {r['steps']:,} steps, {r['adoptions']} "
                f"adoptions, best entry {r['best']['id']} ({k}-ep {r['best']['score']:.1f}, "
                f"{r['best']['hparams']}, lineage {r['best'].get('lineage', [])})",
                flush=True,
            )
    jobs = [(a, single_seed[s], str(workdir / f"single-seed{s}")) for s in a.seeds]
    with ProcessPoolExecutor(min(a.jobs, len(jobs))) as pool:
        singles = list(pool.map(run_single, jobs))
    for s in singles:
        print(
            f"single seed {s['seed']}: {s['wall']:.0f} s, {s['steps']:,} steps, best {k}-ep eval "
            f"{s['curve'][-1][2]:.1f} at step {s['best_step']:,}, final {k}-ep "
            f"{s['evals'][-1][1]:.1f}",
            flush=True,
        )

    # the chosen checkpoints, re-evaluated on an evaluation seed no training-time evaluation used
    rows, finals = [], {}
    zoo = RL_ZOO.get(a.env, "")
    lr_text = "{" + ", ".join(a.lrs) + "}"
    for mode in a.modes:
        rs = [r for r in pops if r["mode"] == mode]
        scores = [reevaluate(r["checkpoint"], a.env, a.episodes) for r in rs]
        finals[f"{mode} population"] = [(r["steps"], v) for r, v in zip(rs, scores)]
        rows.append(
            (
                f"population, {mode} ({a.population} members, lr {lr_text}): leaderboard's best",
                rs[0]["steps"],
                scores,
                [r["curve"][-1][2] for r in rs],
                [r["wall"] for r in rs],
                f"2 ({a.population} procs)",
            )
        )
    for label, key, steps in [
        (f"best checkpoint by its {k}-ep evals", "best", total),
        ("final checkpoint", "final", total),
        (f"checkpoint after 1/{a.population} of the steps", "share", share),
    ]:
        scores = [reevaluate(s[key], a.env, a.episodes) for s in singles]
        if key == "best":
            finals[f"single run (lr {a.single_lr})"] = [(total, v) for v in scores]
        best_k = [max(v for st, v in s["evals"] if st <= steps) for s in singles]
        walls = [
            next(w for st, w, _ in s["curve"] if st == steps) if key == "share" else s["wall"]
            for s in singles
        ]
        rows.append((f"single run (lr {a.single_lr}): {label}", steps, scores, best_k, walls, "1"))

    raw = {
        "args": {k: v for k, v in vars(a).items()},
        "populations": pops,
        "singles": singles,
        "rows": [
            dict(zip(("label", "steps", "scores", "best_train", "walls", "cores"), r)) for r in rows
        ],
    }
    # everything, for re-plotting
    (workdir / "results.json").write_text(json.dumps(raw, indent=1, default=str))
    series = {}
    for r in pops:
        series.setdefault(f"{r['mode']} population", []).append(r["curve"])
    series[f"single run (lr {a.single_lr})"] = [s["curve"] for s in singles]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    png = out / f"population_{a.env.split('-')[0].lower()}.png"
    plot(
        series,
        finals,
        png,
        f"{a.env}, ppo_vec: population ({a.population} members x {a.rounds} rounds x "
        f"{a.steps_per_round:,} steps) vs one run (lr {a.single_lr}) at equal total "
        f"steps, seeds {a.seeds}",
        k,
        a.episodes,
        a.population,
    )

    lines = [
        f"{a.env}, algos/ppo_vec.py (tests/conftest.py PPO_PENDULUM settings, constant lr): "
        f"population vs one run at equal total environment steps ({total:,}); score = the chosen "
        f"checkpoint re-evaluated over {a.episodes} deterministic episodes (eval seed "
        f"{EVAL_SEED}), mean ± std over seeds {a.seeds}",
        "",
        f"| run | total env steps | final score, {a.episodes}-ep re-eval | per seed "
        f"| best {k}-ep eval during training | wall s | cores | RL Zoo PPO (budget) |",
        "|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for label, steps, scores, best_k, walls, cores in rows:
        mean, per = fmt(scores)
        lines.append(
            f"| {label} | {steps:,} | {mean} | {per} | {fmt(best_k)[0]} | {np.mean(walls):.0f} | "
            f"{cores} | {zoo} |"
        )
    shown = rel(png)
    lines += [
        "",
        f"RL Zoo: {RL_ZOO_SOURCE}, its own hyper-parameters (gSDE). Ours: one checkpoint per seed, "
        f"re-evaluated; ± across seeds. 'best {k}-ep eval during training': the best-so-far score "
        "the curves end at, the maximum of many noisy scores (optimistic). Wall s: population = "
        "the whole torchrun job with its start-up; single run = in-process, "
        f"{min(a.jobs, len(a.seeds))} at a time, one torch thread each; the row at "
        f"1/{a.population} of the steps: the same run's time to that checkpoint. The machine may "
        f"be shared: wall times are indicative. Curves: {shown}.",
        "",
        f"Commands (seed s = {a.seeds[0]} shown; the members get algorithm seed 100*s + member):",
        "",
    ]
    lines += [f"    {r['cmd']}" for r in pops if r["seed"] == a.seeds[0]]
    lines.append(
        f"    python algos/ppo_vec.py {' '.join(single_flags(a, single_seed[a.seeds[0]]))} "
        f"--out-dir {rel(workdir / f'single-seed{a.seeds[0]}')}  # bench/population.py also copies "
        f"every checkpoint"
    )
    lines.append(
        f"    python bench/population.py {' '.join(shlex.quote(x) for x in sys.argv[1:])}".rstrip()
    )
    lines.append(f"\nbenchmark wall time: {time.time() - t_start:.0f} s")
    table = "\n".join(lines)
    print("\n" + table, flush=True)
    return table


if __name__ == "__main__":
    from report import script  # bench/report.py (this script's folder is on sys.path)

    script(main, "population")
