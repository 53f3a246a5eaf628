"""ppo_vec on an external simulator: Unitree Go2 walking in Genesis (`envs/genesis_go2.py`, through
the rsl_rl-interface adapter `envs/from_rsl_rl.py`), on Genesis's CPU backend here.

    python bench/genesis_go2.py run                  # seed 1, privileged critic, the budget below
    python bench/genesis_go2.py run --no-privileged  # the same without the critic group
    python bench/genesis_go2.py report               # bench/results/genesis/go2.md and go2.png

A run checkpoints every 262,144 steps; `run` again with the same seed continues the newest
checkpoint of that tag (networks, optimizer and normalizer exactly; Genesis has no state_dict, so
the episodes in flight restart). A run cut before its end is recorded from its metrics with `record`
(no final evaluation then).

Genesis runs in its own venv, `bench/.venv-genesis` (made on first use: the project's requirements,
then genesis-world), never in the project's: genesis-world's pygel3d pins plotly < 6 and skfolio
(the stock data) needs plotly >= 6, so the two cannot share one resolver run. Scene build compiles
Genesis's kernels, minutes on a CPU the first time (cached under ~/.cache/quadrants after).

Curves: the training episodes' return (mean over the episodes that ended in each logging interval)
against env steps and against wall-clock seconds, and the forward speed reached. Final: a
deterministic evaluation on 16 fresh envs (20 s episodes).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / "bench" / ".venv-genesis"
RESULTS = ROOT / "bench" / "results" / "genesis"
RUNS = ROOT / "bench" / "runs" / "genesis"
GENESIS = "genesis-world==1.4.5"
# PPO on Go2 sized for 2 CPU cores: 64 envs x 24 steps (rsl_rl's usual locomotion horizon), 4
# minibatches, 5 epochs, lr 1e-3, (256, 128, 64) networks, normalized observations, initial action
# std 0.5 (0.125 rad)
FLAGS = [
    "--num-envs",
    "64",
    "--num-steps",
    "24",
    "--num-minibatches",
    "4",
    "--update-epochs",
    "5",
    "--learning-rate",
    "1e-3",
    "--ent-coef",
    "0.005",
    "--hidden",
    "256",
    "128",
    "64",
    "--norm-obs",
    "--init-log-std",
    "-0.7",
    "--eval-episodes",
    "16",
    "--save-every",
    "262144",
]
STEPS = 3_000_000


def ensure_venv() -> Path:
    py = VENV / "bin" / "python"
    probe = [str(py), "-c", "import genesis, tyro, gymnasium, torch; print('ok')"]
    if py.exists() and subprocess.run(probe, capture_output=True, text=True).stdout.strip() == "ok":
        return py
    print(f"creating {VENV.relative_to(ROOT)} (requirements.txt, then {GENESIS})", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(ROOT / "requirements.txt")], check=True)
    subprocess.run([*pip, GENESIS], check=True)
    subprocess.run(probe, check=True)
    return py


def run(seed: int, steps: int, privileged: bool) -> None:
    py = ensure_venv()
    tag = f"{'privileged' if privileged else 'plain'}_seed{seed}"
    out_dir = RUNS / tag
    env = {**os.environ, "OMP_NUM_THREADS": str(os.cpu_count()), "PYTHONUNBUFFERED": "1"}
    env_id = "GenesisGo2-v0" if privileged else "GenesisGo2-NoCritic-v0"
    cmd = [
        str(py),
        str(ROOT / "algos" / "ppo_vec.py"),
        "--env",
        env_id,
        "--seed",
        str(seed),
        "--total-steps",
        str(steps),
        "--eval-every",
        str(steps),
        "--out-dir",
        str(out_dir),
        "--quiet",
        *FLAGS,
    ]
    ckpts = sorted(out_dir.glob("*/checkpoint.pt"), key=lambda p: p.stat().st_mtime)
    if ckpts:  # continue the cut run: its saved flags, the new total
        cmd = [
            str(py),
            str(ROOT / "algos" / "ppo_vec.py"),
            "--resume",
            str(ckpts[-1]),
            "--total-steps",
            str(steps),
            "--eval-every",
            str(steps),
            "--quiet",
        ]
    print(" ".join(cmd[1:]), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True)
    record(tag, env_id, seed, steps, privileged, wall=time.perf_counter() - t0)


def record(
    tag: str, env_id: str, seed: int, steps: int, privileged: bool, wall: float | None = None
) -> None:
    """bench/results/genesis/<tag>.json from the newest run of the tag: its curve, and its final
    evaluation where it reached one (a run cut short is recorded as such, with the steps it did)."""
    runs = sorted((RUNS / tag).glob("*/metrics.jsonl"), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise SystemExit(f"no run under {RUNS / tag}: python bench/genesis_go2.py run")
    rows = [json.loads(line) for line in runs[-1].read_text().splitlines() if line.strip()]
    evals = [r for r in rows if "eval_return" in r]
    final = evals[-1] if evals else {}
    done = rows[-1]["step"]
    curve = [
        {k: r[k] for k in ("step", "seconds", "return", "ep_length") if k in r}
        for r in rows
        if "return" in r
    ]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{tag}.json").write_text(
        json.dumps(
            {
                "env": env_id,
                "seed": seed,
                "steps": done,
                "planned_steps": steps,
                "cut": done < steps * 0.999,
                "flags": FLAGS,
                "privileged_critic": privileged,
                "eval_return": final.get("eval_return"),
                "eval_return_std": final.get("eval_return_std"),
                "eval_length": final.get("eval_length"),
                "train_seconds": rows[-1]["seconds"],
                "wall_seconds": wall,
                "sps": done / rows[-1]["seconds"],
                "curve": curve,
                "machine": f"{os.cpu_count()} cores",
                "date": time.strftime("%Y-%m-%d"),
            },
            indent=1,
        )
    )
    last = curve[-1] if curve else {}
    print(
        f"{tag}: {done:,} env steps, last training return "
        f"{last.get('return', float('nan')):.2f} (episode length "
        f"{last.get('ep_length', 0):.0f}), eval {final.get('eval_return', float('nan')):.2f}, "
        f"{done / rows[-1]['seconds']:,.0f} env-steps/s",
        flush=True,
    )


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*_seed*.json"))]
    if not runs:
        raise SystemExit(f"no runs in {RESULTS}: python bench/genesis_go2.py run")
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    lines = [
        "| critic | seed | env steps | last training return (episode length) "
        "| final eval return (16 episodes, max 20 s) | env-steps/s | train time |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        label = (
            f"{'privileged critic' if r['privileged_critic'] else 'policy obs critic'}, "
            f"seed {r['seed']}"
        )
        for ax, x in zip(axes, ("step", "seconds")):
            ax.plot([c[x] for c in r["curve"]], [c["return"] for c in r["curve"]], label=label)
        last = r["curve"][-1]
        ev = (
            f"{r['eval_return']:.2f} ± {r['eval_return_std'] or 0:.2f} (length "
            f"{r['eval_length']:.0f})"
            if r["eval_return"] is not None
            else f"none: cut at {r['steps']:,} of {r['planned_steps']:,} steps"
        )
        lines.append(
            f"| {'critic group' if r['privileged_critic'] else 'policy group'} | {r['seed']} "
            f"| {r['steps']:,} | {last['return']:.2f} ({last.get('ep_length', 0):.0f}) | {ev} "
            f"| {r['sps']:,.0f} | {r['train_seconds'] / 60:.0f} min |"
        )
    for ax, x in zip(axes, ("env steps", "wall-clock seconds")):
        ax.set_xlabel(x)
        ax.set_ylabel("training episode return")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("ppo_vec on Genesis Go2 walking (CPU backend, 2 cores)")
    fig.tight_layout()
    fig.savefig(RESULTS / "go2.png", dpi=110)
    text = (
        "# ppo_vec on Genesis Go2 walking\n\n`python bench/genesis_go2.py run` (settings in the "
        f"script: `{' '.join(FLAGS)}`), Genesis {GENESIS.split('==')[1]} on its CPU backend, "
        f"{runs[0]['machine']}, {runs[0]['date']}. Curve: go2.png.\n\n" + "\n".join(lines) + "\n"
    )
    (RESULTS / "go2.md").write_text(text)
    print(text)


def main() -> None:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="one training run (and its venv on first use)")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--steps", type=int, default=STEPS)
    r.add_argument(
        "--no-privileged", action="store_true", help="the critic reads the policy group only"
    )
    c = sub.add_parser("record", help="write the result file of a run that was cut short")
    c.add_argument("--seed", type=int, default=1)
    c.add_argument("--steps", type=int, default=STEPS)
    c.add_argument("--no-privileged", action="store_true")
    sub.add_parser("report", help="table and curves from the runs so far")
    sub.add_parser("setup", help="make bench/.venv-genesis only")
    a = p.parse_args()
    if a.cmd == "run":
        run(a.seed, a.steps, not a.no_privileged)
    elif a.cmd == "record":
        priv = not a.no_privileged
        record(
            f"{'privileged' if priv else 'plain'}_seed{a.seed}",
            "GenesisGo2-v0" if priv else "GenesisGo2-NoCritic-v0",
            a.seed,
            a.steps,
            priv,
        )
    elif a.cmd == "setup":
        print(ensure_venv())
    else:
        report()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
