"""Learning from pixels: each image-capable file on MinAtar's five games (envs/minatar.py) with
its MinAtar row (its paper's settings), or with `--atari` on Pong and Breakout (envs/atari.py) with
the settings of CleanRL's ppo_atari and the PQN paper's pqn_atari (`ATARI` below: no Atari rows in
the files until such runs back them); a step budget, seeds; one run at a time, one torch thread.
Writes every run's evaluations to a JSON-lines log, a table of the final and best-so-far
evaluations, and curves against env steps and against seconds of training (evaluations left out).

    python bench/minatar_learn.py                           # pqn, ppo_vec: 1M steps, seed 1
    python bench/minatar_learn.py --files dqn --steps 250000 --seeds 1 2 3
    python bench/minatar_learn.py --atari --steps 2500000   # 10M frames: hours a run on a CPU
    python bench/minatar_learn.py --from-log bench/results/minatar_learn.jsonl   # table and plots
    python bench/minatar_learn.py --atari --add-run runs/ALE/Pong-v5__ppo_vec__s1__<t> --note TEXT

`--add-run` takes a run made with an algorithm file (`--save-every`, `--resume` across sessions: a
10M-frame Atari run on a CPU outlives a session) into the log, its note printed above the table.

The rows' own budgets (10M env steps for PQN and PPO, 5M for DQN, as their papers) are hours a run
on a CPU; `--steps` cuts them, and the epsilon schedules (a fraction of the budget) shrink with it.
CleanRL's published Atari returns at 10M steps (40M frames): PPO Pong 20.4, Breakout ~400; the PQN
paper's: Pong 20.5, Breakout 385 (`../shared/REFERENCES.md`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GAMES = ("Asterix", "Breakout", "Freeway", "Seaquest", "SpaceInvaders")
ATARI_GAMES = ("Pong", "Breakout")
# Atari settings as flags (the file's dataclass defaults under them): CleanRL's ppo_atari, the PQN
# paper's pqn_atari, CleanRL's dqn_atari (one update per 4 env steps, target every 1,000)
ATARI = {
    "ppo_vec": "--num-envs 8 --num-steps 128 --num-minibatches 4 --update-epochs 4 "
    "--learning-rate 2.5e-4 --clip-coef 0.1 --clip-vloss --ent-coef 0.01 --hidden 512",
    "pqn": "--num-envs 128 --num-steps 32 --num-minibatches 32 --update-epochs 2 --learning-rate "
    "2.5e-4 --no-anneal-lr --q-lambda 0.65 --end-e 0.001 --exploration-fraction 0.1 --hidden 512",
    "dqn": "--num-envs 4 --gradient-steps 1 --batch-size 32 --learning-rate 1e-4 --buffer-size "
    "1000000 --target-every 250 --end-e 0.01 --exploration-fraction 0.1 --learning-starts 80000 "
    "--hidden 512",
}


# Published figures to print beside ours, by (Atari?, game). MinAtar: the PPO checkpoints of
# gymnax-blines (gymnax's README, 10M env steps, an MLP on the flattened grid, gymnax's JAX port of
# MinAtar: no sticky actions, so a near game, not the same one). Atari: CleanRL's reports at 10M env
# steps (40M frames), as in shared/REFERENCES.md.
PUBLISHED = {
    (False, "Asterix"): "PPO 15 at 10M (gymnax-blines)",
    (False, "Breakout"): "PPO 28 at 10M (gymnax-blines)",
    (False, "Freeway"): "PPO 58 at 10M (gymnax-blines)",
    (False, "SpaceInvaders"): "PPO 131 at 10M (gymnax-blines)",
    (True, "Pong"): "ppo_atari 20.4, pqn_atari 20.5 at 40M frames (CleanRL)",
    (True, "Breakout"): "ppo_atari ~415, pqn_atari ~385 at 40M frames (CleanRL)",
}


def run_one(file: str, game: str, seed: int, steps: int, every: int, atari: bool) -> dict:
    with tempfile.TemporaryDirectory() as out:
        env_id = f"ALE/{game}-v5" if atari else f"MinAtar/{game}-v1"
        cmd = [sys.executable, f"algos/{file}.py", "--env", env_id, "--seed", str(seed),
               "--total-steps", str(steps), "--eval-every", str(every), "--out-dir", out,
               "--quiet", *(ATARI[file].split() if atari else [])]  # fmt: skip
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="disabled")
        t = time.perf_counter()
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"run failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
        (metrics,) = Path(out).rglob("metrics.jsonl")
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    evals = [(r["step"], r["seconds"], r["eval_return"]) for r in rows if "eval_return" in r]
    return dict(file=file, game=game, seed=seed, steps=steps, evals=evals, env=env_id,
                wall=time.perf_counter() - t, load=os.getloadavg()[0])  # fmt: skip


def from_run(run_dir: Path, note: str) -> dict:
    """A run made directly with an algorithm file (a long Atari run that checkpoints and resumes
    across sessions) as one line of the log: its `args.json` and `metrics.jsonl`."""
    try:
        args = json.loads((run_dir / "args.json").read_text())
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        file = run_dir.name.split("__")[1]  # <env>__<algo>__s<seed>__<time>
    except (OSError, IndexError, json.JSONDecodeError) as e:
        raise SystemExit(f"--add-run {run_dir}: not a run directory of an algorithm file ({e})")
    evals = [(r["step"], r["seconds"], r["eval_return"]) for r in rows if "eval_return" in r]
    if not evals:
        raise SystemExit(f"--add-run {run_dir}: no evaluation in its metrics.jsonl yet")
    game = args["env"].split("/")[-1].split("-")[0]  # ALE/Pong-v5, MinAtar/Pong-v1, Pong-MinAtar
    # one name for the run however it was typed (./bench/runs/..., an absolute path, from bench/):
    # a later --add-run of it replaces its line
    root, run_dir = Path(__file__).resolve().parents[1], run_dir.resolve()
    run_dir = run_dir.relative_to(root) if run_dir.is_relative_to(root) else run_dir
    return dict(file=file, game=game, seed=args["seed"], steps=args["total_steps"], evals=evals,
                env=args["env"], wall=None, load=None, run_dir=str(run_dir), note=note)  # fmt: skip


def table(runs: list[dict]) -> str:
    files = sorted({r["file"] for r in runs})
    games = [g for g in (*GAMES, *ATARI_GAMES) if any(r["game"] == g for r in runs)]
    atari = any(r.get("env", "").startswith("ALE/") for r in runs)
    lines = [
        "| game | " + " | ".join(f"{f}: final (best), seconds" for f in files) + " | published |",
        "|---|" + "---|" * (len(files) + 1),
    ]
    for game in dict.fromkeys(games):
        cells = []
        for f in files:
            mine = [r for r in runs if r["file"] == f and r["game"] == game]
            if not mine:
                cells.append("")
                continue
            finals = [r["evals"][-1][2] for r in mine]
            bests = [max(e[2] for e in r["evals"]) for r in mine]
            secs = [r["evals"][-1][1] for r in mine]
            cells.append(
                ", ".join(f"{a:.1f} ({b:.1f})" for a, b in zip(finals, bests))
                + f"; {sum(secs) / len(secs):.0f} s"
            )
        cells.append(PUBLISHED.get((atari, game), ""))
        lines.append(f"| {game} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = list(dict.fromkeys(r["game"] for r in runs))
    # Atari results are published against frames (4 a step under the frame skip)
    frames = 4 if any(r.get("env", "").startswith("ALE/") for r in runs) else 1
    fig, axes = plt.subplots(2, len(games), figsize=(4 * len(games), 6.5), squeeze=False)
    colors = {"pqn": "tab:blue", "ppo_vec": "tab:orange", "dqn": "tab:green"}
    for j, game in enumerate(games):
        for r in (r for r in runs if r["game"] == game):
            steps, secs, ret = zip(*r["evals"])
            kw = dict(color=colors.get(r["file"]), alpha=0.8, label=f"{r['file']} s{r['seed']}")
            axes[0, j].plot([frames * s for s in steps], ret, **kw)
            axes[1, j].plot(secs, ret, **kw)
        axes[0, j].set_title(game)
        axes[0, j].set_xlabel("frames (4 per env step)" if frames == 4 else "env steps")
        axes[1, j].set_xlabel("seconds of training (one core)")
    axes[0, 0].set_ylabel("evaluation return")
    axes[1, 0].set_ylabel("evaluation return")
    axes[0, -1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--files", nargs="+", default=["pqn", "ppo_vec"], choices=["pqn", "ppo_vec", "dqn"]
    )
    p.add_argument("--games", nargs="+", choices=[*GAMES, "Pong"])
    p.add_argument("--atari", action="store_true", help="Pong and Breakout (ALE) instead")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--steps", type=int, default=1_000_000, help="env steps a run")
    p.add_argument("--eval-every", type=int, default=100_000)
    p.add_argument("--log", default="bench/results/minatar_learn.jsonl")
    p.add_argument("--from-log", metavar="JSONL", help="no runs: the table and plots of a log")
    p.add_argument(
        "--add-run",
        metavar="RUN_DIR",
        type=Path,
        help="no runs: put a run made "
        "with an algorithm file into --log (replacing its earlier line), then as --from-log",
    )
    p.add_argument("--note", default="", help="with --add-run: a paragraph on the run for the .md")
    a = p.parse_args()
    a.games = a.games or list(ATARI_GAMES if a.atari else GAMES)
    if a.atari and a.log == p.get_default("log"):
        a.log = "bench/results/atari_learn.jsonl"
    if a.add_run:
        new = from_run(a.add_run, a.note)
        log = Path(a.log)
        old = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        kept = [r for r in old if r.get("run_dir") != new["run_dir"]]
        log.write_text("".join(json.dumps(r) + "\n" for r in [*kept, new]))
        a.from_log = a.log
    if a.from_log:
        runs = [json.loads(line) for line in Path(a.from_log).read_text().splitlines()]
    else:
        runs = []
        with open(a.log, "a") as log:
            for file in a.files:
                for game in a.games:
                    for seed in a.seeds:
                        r = run_one(file, game, seed, a.steps, a.eval_every, a.atari)
                        log.write(json.dumps(r) + "\n")
                        log.flush()
                        print(file, game, seed, [round(e[2], 1) for e in r["evals"]], flush=True)
                        runs.append(r)
    out = Path(a.from_log or a.log).with_suffix("")
    plot(runs, out.with_suffix(".png"))
    when = datetime.datetime.now(datetime.UTC)
    command = f"--from-log {a.log}" + " --atari" * a.atari if a.add_run else " ".join(sys.argv[1:])
    text = (
        f"# {'Atari' if a.atari else 'MinAtar'} from pixels: "
        f"{', '.join(sorted({r['file'] for r in runs}))}\n\n"
        + "".join(r["note"] + "\n\n" for r in runs if r.get("note"))
        + f"`python bench/minatar_learn.py {command}`, {when:%Y-%m-%d %H:%M} UTC. "
        + ("The settings in `ATARI`" if a.atari else "Each file's MinAtar row")
        + ", the budget cut to the runs' steps; final evaluation (10 deterministic episodes; "
        "MinAtar with sticky actions, Atari whole games, unclipped) and the best one on the way, "
        "per seed; "
        "seconds: training time to the end (evaluations left out). Curves: "
        f"[{out.name}.png]({out.name}.png).\n\n" + table(runs) + "\n"
    )
    out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
