"""The locomotion benchmark: `algos/ppo_vec.py` with its MuJoCo defaults beside rsl_rl's PPO on the
same env objects (Ant, Humanoid, HalfCheetah, Hopper, Walker2d v5, batched CPU backend), eval return
against env steps and against wall-clock seconds, final deterministic evaluation on gymnasium's own
env.

    python bench/locomotion.py run Hopper  # seeds 1-3, the task's budget (TASKS below)
    python bench/locomotion.py run Ant --seeds 1 --steps 2000000 --sides ours
    python bench/locomotion.py run Hopper --sides fast_td3 sac  # off-policy at scale, same env
    python bench/locomotion.py run Ant --sides rllib ours_budget  # RLlib beside us (issue 60)
    python bench/locomotion.py flagship    # --env Ant --num-envs 4096, every core, 10M steps
    python bench/locomotion.py report      # table + one PNG per task from what has run

How a task runs: for each seed, our run and rsl_rl's run at the same time, each pinned to its own
core (`taskset`, one torch thread, one MuJoCo thread: the batch backend uses the cores it may run
on), the cores swapped from one seed to the next. Same `--num-envs`, same env steps, same env class
and seed.

* ours: `algos/ppo_vec.py --env TASK --num-envs N --total-steps S --seed K` and nothing else, i.e.
  the file's MuJoCo defaults for that many envs (`ppo_vec.default_args`), in a worker process of
  this script that runs the file's `main` with `curves.png` drawing switched off (rsl_rl draws
  nothing either).
* rsl_rl: `bench/locomotion_rslrl.py` in rsl_rl's own venv `bench/.venv-rslrl` (made on first use:
  rsl-rl-lib, torch and what our envs need; never a project dependency), IsaacLab's classic
  Ant/Humanoid PPO config (see that file).
* clocks start after envs and networks are built; evaluations (deterministic, `eval_episodes`
  episodes on a fresh copy of our env, every `eval_every` steps on both sides) are timed and left
  out.
* final: 10 episodes on `gymnasium.make(TASK)` with the same episode seeds for both sides.
* off-policy sides (`fast_td3`, `sac`; Hopper, HalfCheetah, Ant): the same worker running that file
  with the flags in OFFPOLICY_FLAGS, budgets in OFFPOLICY, drawn on the same plots.
* RLlib (`--sides rllib ours_budget`; Hopper, Ant, Humanoid): `bench/locomotion_rllib.py` in RLlib's
  own venv `bench/.venv-rllib` on gymnasium's env, and ours at the same budget (RLLIB), run from a
  queue (each core takes the next run when free); the report's RLlib section and
  `locomotion_<task>_rllib.png` put them beside our and rsl_rl's longer runs.

Results: `bench/results/locomotion/<task>/<side>_seed<K>.json`; `report` writes
`bench/results/locomotion/locomotion.md` and `locomotion_<task>.png`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "locomotion"
VENV = ROOT / "bench" / ".venv-rslrl"
PINS = {"torch": "2.13.0", "rsl-rl-lib": "5.5.1", "gymnasium": "1.4.0"}
# per task: env steps per run (sized so that a task's group, 3 seeds x both sides, fits in about 2
# hours on 2 cores), envs, evaluation interval
TASKS = {
    "Hopper": dict(steps=3_000_000, num_envs=64, eval_every=262_144),
    "HalfCheetah": dict(steps=4_000_000, num_envs=64, eval_every=262_144),
    "Walker2d": dict(steps=4_000_000, num_envs=64, eval_every=262_144),
    "Ant": dict(steps=3_000_000, num_envs=64, eval_every=262_144),
    "Humanoid": dict(steps=3_000_000, num_envs=64, eval_every=262_144),
}
# off-policy at scale (FastTD3-style: many sub-envs, large batches, several updates per vectorized
# step), run with `--sides fast_td3 sac` on these tasks. On one core the updates are the cost (a
# TD3/SAC update of 256 samples through 256x256 nets takes ~6 ms on one thread here, the env step
# ~0.1 ms per env), so the budget is set by updates, not env steps: 16 envs x 8 updates of 256 per
# vectorized step (0.5 updates per env step), 150k env steps (~75k updates, 8-15 min per run on one
# core: about 2x a PPO run of the task, the group about 40 min), the first 10k steps random. sac: lr
# 3e-4 for both nets (the file's 1e-3 defaults are for its small classic-control budgets); fast_td3:
# the file's defaults otherwise (n-step 3, noise range, raw-observation replay normalized at
# sampling). Probe (Hopper, seed 1, 150k steps): fast_td3 2416 (gym 2234) in 462 s; sac 339 at 100k
# steps.
OFFPOLICY = {
    "Hopper": dict(steps=150_000, num_envs=16, eval_every=25_000),
    "HalfCheetah": dict(steps=150_000, num_envs=16, eval_every=25_000),
    "Ant": dict(steps=150_000, num_envs=16, eval_every=25_000),
}
OFFPOLICY_FLAGS = {
    "fast_td3": ["--batch-size", "256", "--gradient-steps", "8", "--learning-starts", "10000"],
    "sac": [
        "--batch-size",
        "256",
        "--gradient-steps",
        "8",
        "--learning-starts",
        "10000",
        "--actor-lr",
        "3e-4",
        "--critic-lr",
        "3e-4",
    ],
}
# `adaptive`: ppo_vec with rsl_rl's adaptive-KL learning-rate schedule in place of linear annealing,
# everything else the MuJoCo defaults (the comparison that decides the default schedule;
# `--sides adaptive`)
SIDE_FLAGS = {**OFFPOLICY_FLAGS, "adaptive": ["--lr-schedule", "adaptive", "--desired-kl", "0.01"]}
SIDES = {
    "ours": "ppo_vec (ours)",
    "rsl_rl": "rsl_rl (IsaacLab cfg)",
    "fast_td3": "fast_td3 (ours)",
    "sac": "sac (ours)",
    "adaptive": "ppo_vec, adaptive lr",
    "rllib": "RLlib PPO (mujoco_ppo.py)",
    "ours_budget": "ppo_vec (ours), RLlib's budget",
}
ALGO_OF = {
    "ours": "ppo_vec",
    "fast_td3": "fast_td3",
    "sac": "sac",
    "adaptive": "ppo_vec",
    "ours_budget": "ppo_vec",
}
SIDE_OF = {"ppo_vec": "ours", "fast_td3": "fast_td3", "sac": "sac"}
# RLlib beside us (issue 60; `--sides rllib ours_budget`): RLlib's PPO with the ray repository's
# MuJoCo settings in its own venv (bench/locomotion_rllib.py), and ppo_vec with its file defaults at
# the same budget. RLlib runs 1.0k-1.6k env-steps/s on one core here, so its budgets are smaller
# than TASKS' (a task's group, 3 seeds of both sides, in 21-41 min on 2 cores);
# our longer runs stay and are read off their curves at the same steps and seconds.
RLLIB = {
    "Hopper": dict(steps=1_000_000, num_envs=64, eval_every=131_072),
    "Ant": dict(steps=1_000_000, num_envs=64, eval_every=131_072),
    "Humanoid": dict(steps=1_000_000, num_envs=64, eval_every=131_072),
}
VENV_RLLIB = ROOT / "bench" / ".venv-rllib"
PINS_RLLIB = {"torch": "2.13.0", "ray": "2.60.0", "gymnasium": "1.2.2", "mujoco": "4.0.0"}
# the flagship command on this CPU: 4096 envs, the GPU-sized defaults, all cores
FLAGSHIP = dict(steps=10_000_000, eval_every=1_048_576)
# CleanRL's published PPO scores at 1M steps (MuJoCo v4, 3 seeds, training-episode returns;
# REFERENCES.md)
CLEANRL_1M = {"Hopper": 2382.9, "HalfCheetah": 1442.6, "Walker2d": 2288.0, "Humanoid": 716.1}
TARGET = {"Hopper": 3000, "HalfCheetah": 5000, "Walker2d": 3500, "Ant": 3000}
GYM_SEED = 20_000


def thread_env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="disabled")


def peer_venv(venv: Path, packages: list[str], probe: str, want: str) -> Path:
    """A peer's own venv: made (or completed) with `packages` unless `probe`, run in it, already
    prints `want`; the peer is never a project dependency."""
    py = venv / "bin" / "python"
    if py.exists():
        got = subprocess.run([str(py), "-c", probe], capture_output=True, text=True).stdout
        if got.strip() == want:
            return py
    print(f"creating {venv.relative_to(ROOT)} ({', '.join(packages)})", flush=True)
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run(pip + packages, check=True)
    got = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, check=True)
    if got.stdout.strip() != want:
        raise RuntimeError(f"{venv} has {got.stdout.strip()}, wanted {want}")
    return py


def ensure_venv() -> Path:
    """rsl_rl's own venv."""
    return peer_venv(
        VENV,
        [
            f"torch=={PINS['torch']}",
            f"rsl-rl-lib=={PINS['rsl-rl-lib']}",
            f"gymnasium[mujoco]=={PINS['gymnasium']}",
            "mujoco>=4.0",
            "numpy>=1.26",
            "tyro>=0.9",
        ],
        "import torch, rsl_rl, gymnasium, mujoco, tyro; from importlib.metadata import version; "
        "print(torch.__version__.split('+')[0], version('rsl-rl-lib'), gymnasium.__version__)",
        f"{PINS['torch']} {PINS['rsl-rl-lib']} {PINS['gymnasium']}",
    )


def ensure_venv_rllib() -> Path:
    """RLlib's own venv (every ray[rllib] release from 2.54 pins a gymnasium older than ours)."""
    pins = PINS_RLLIB
    return peer_venv(
        VENV_RLLIB,
        [
            f"torch=={pins['torch']}",
            f"ray[rllib]=={pins['ray']}",
            f"gymnasium[mujoco]=={pins['gymnasium']}",
            f"mujoco=={pins['mujoco']}",
        ],
        "import torch, ray, gymnasium, mujoco; "
        "print(torch.__version__.split('+')[0], ray.__version__, gymnasium.__version__, "
        "mujoco.__version__)",
        " ".join(pins.values()),
    )


# ---------------------------------------------------------------------------------------------
# our side: a worker process running algos/ppo_vec.py's main on the command-line flags given
# ---------------------------------------------------------------------------------------------
def eval_curve(metrics: Path) -> tuple[list[dict], float]:
    """A run's evaluations from its metrics.jsonl, each with the training seconds so far (evaluation
    time left out), and the training seconds at its last row."""
    rows = [json.loads(line) for line in Path(metrics).read_text().splitlines()]
    curve, eval_total = [], 0.0
    for r in rows:
        if "eval_return" in r:
            eval_total += r["eval_seconds"]
            curve.append(
                {
                    "step": r["step"],
                    "seconds": r["seconds"],
                    "train_seconds": r["seconds"] - eval_total,
                    "eval_return": r["eval_return"],
                    "eval_return_std": r["eval_return_std"],
                }
            )
    return curve, rows[-1]["seconds"] - eval_total


def worker_ours(
    out: str, algo: str, flags: list[str], threads: int = 1, side: str | None = None
) -> None:
    sys.path.insert(0, str(ROOT))
    import importlib

    import torch

    from common.cli import RunArgs, cli
    from tools.evaluate import gym_rollouts

    torch.set_num_threads(threads)
    mod = importlib.import_module(f"algos.{algo}")
    args = cli(mod.Args, argv=flags, defaults_for=getattr(mod, "default_args", None))
    res = mod.main(args)
    curve, _ = eval_curve(Path(res["run_dir"]) / "metrics.jsonl")
    ref = gym_rollouts(mod.load_policy(res["checkpoint"]), args.env, 10, seed=GYM_SEED)
    header = set(vars(RunArgs())) - {"num_envs"}
    settings = {k: v for k, v in vars(args).items() if k not in header}
    result = {
        "side": side or SIDE_OF[algo],
        "algo": algo,
        "task": args.env,
        "seed": args.seed,
        "num_envs": args.num_envs,
        "steps": curve[-1]["step"],
        "threads": threads,
        "command": f"python algos/{algo}.py " + " ".join(flags),
        "config": settings,
        "curve": curve,
        "train_seconds": curve[-1]["train_seconds"],
        "sps": curve[-1]["step"] / curve[-1]["train_seconds"],
        "eval_return": curve[-1]["eval_return"],
        "gym_return": ref["eval_return"],
        "gym_return_std": ref["eval_return_std"],
        "gym_returns": ref["returns"],
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=1))


# ---------------------------------------------------------------------------------------------
# running a task
# ---------------------------------------------------------------------------------------------
def task_id(task: str) -> str:
    return task if task.endswith("-v5") else f"{task}-v5"


def short(task: str) -> str:
    return task.split("-")[0]


def run(
    task: str,
    seeds: list[int],
    steps: int | None,
    num_envs: int | None,
    eval_every: int | None,
    sides: list[str],
    rllib_runners: int = 0,
) -> None:
    """Runs go two at a time, one core each (a seed's two sides; with one side, two seeds), cores
    swapped from one pair to the next; with RLlib, from a queue (RLlib's runs first)."""
    py_rsl = ensure_venv() if "rsl_rl" in sides else None
    py_rllib = ensure_venv_rllib() if "rllib" in sides else None
    tid, name = task_id(task), short(task)
    logs = RESULTS / name / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    def start(seed: int, side: str, core: str) -> subprocess.Popen:
        cfg = (
            OFFPOLICY[name]
            if side in OFFPOLICY_FLAGS
            else RLLIB[name]
            if side in ("rllib", "ours_budget")
            else TASKS[name]
        )
        n, s, e = (
            num_envs or cfg["num_envs"],
            steps or cfg["steps"],
            eval_every or cfg["eval_every"],
        )
        out = RESULTS / name / f"{side}_seed{seed}.json"
        if side in ("rllib", "rsl_rl"):  # a peer's script in its own venv, the same flags
            script, py, extra = (
                ("locomotion_rllib.py", py_rllib, ["--env-runners", str(rllib_runners)])
                if side == "rllib"
                else ("locomotion_rslrl.py", py_rsl, [])
            )
            cmd = [
                str(py),
                str(ROOT / "bench" / script),
                "--task",
                tid,
                "--seed",
                str(seed),
                "--steps",
                str(s),
                "--num-envs",
                str(n),
                "--eval-every",
                str(e),
                *extra,
                "--gym-seed",
                str(GYM_SEED),
                "--out",
                str(out),
            ]
        else:
            flags = [
                "--env",
                name,
                "--num-envs",
                str(n),
                "--total-steps",
                str(s),
                "--seed",
                str(seed),
                "--eval-every",
                str(e),
                "--save-every",
                "0",
                "--quiet",
                "--out-dir",
                str(ROOT / "bench" / "runs" / "locomotion"),
                *SIDE_FLAGS.get(side, []),
            ]
            cmd = [
                sys.executable,
                __file__,
                "worker-ours",
                "--algo",
                ALGO_OF[side],
                "--side",
                side,
                "--out",
                str(out),
                "--",
                *flags,
            ]
        log = open(logs / f"{side}_seed{seed}.log", "w")
        print(f"[{name} seed {seed}] {side} on core {core}: {' '.join(cmd[1:])}", flush=True)
        return subprocess.Popen(
            ["taskset", "-c", core, *cmd],
            cwd=ROOT,
            env=thread_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def finish(seed: int, side: str, p: subprocess.Popen) -> None:
        if p.wait() != 0:
            raise SystemExit(
                f"{name} seed {seed} {side} failed (exit {p.returncode}); see "
                f"{logs}/{side}_seed{seed}.log"
            )
        r = json.loads((RESULTS / name / f"{side}_seed{seed}.json").read_text())
        print(
            f"[{name} seed {seed}] {side}: gym {r['gym_return']:.0f}, ours-env "
            f"{r['eval_return']:.0f}, {r['sps']:,.0f} env-steps/s, {r['train_seconds']:.0f} s",
            flush=True,
        )

    jobs = [(seed, side) for seed in seeds for side in sides]
    if "rllib" not in sides:  # two at a time: a seed's two sides, or two seeds
        for i, pair in enumerate(jobs[k : k + 2] for k in range(0, len(jobs), 2)):
            procs = [
                (sd, sde, start(sd, sde, str((i + j) % 2))) for j, (sd, sde) in enumerate(pair)
            ]
            for sd, sde, p in procs:
                finish(sd, sde, p)
    else:  # RLlib's runs are several times longer: a queue, each core taking the next job when free
        queue, running = sorted(jobs, key=lambda j: j[1] != "rllib"), {}
        while queue or running:
            for core in ("0", "1"):
                if core not in running and queue:
                    sd, sde = queue.pop(0)
                    running[core] = (sd, sde, start(sd, sde, core))
            done = [c for c, (_, _, p) in running.items() if p.poll() is not None]
            for c in done:
                finish(*running.pop(c))
            if not done:
                time.sleep(2)
    meta = {
        "task": tid,
        "seeds": seeds,
        "sides": sides,
        "group_wall_seconds": time.perf_counter() - t0,
        "machine": f"{os.cpu_count()} cores, {platform.processor() or platform.machine()}",
        "date": time.strftime("%Y-%m-%d"),
    }
    group = (
        RESULTS
        / name
        / ("group.json" if sides == ["ours", "rsl_rl"] else f"group_{'_'.join(sides)}.json")
    )
    if group.exists():  # seeds added to a group run earlier: one record, the wall times summed
        old = json.loads(group.read_text())
        if set(old["seeds"]).isdisjoint(seeds):
            meta["seeds"] = sorted(old["seeds"] + seeds)
            meta["group_wall_seconds"] += old["group_wall_seconds"]
    group.write_text(json.dumps(meta, indent=1))
    print(f"[{name}] group wall time {meta['group_wall_seconds'] / 60:.1f} min", flush=True)


def flagship(steps: int, seed: int) -> None:
    """The design card's command, `python algos/ppo_vec.py --env Ant --num-envs 4096` (its GPU-sized
    defaults), on this machine's cores (every core, no pinning), `steps` env steps; final eval on
    gymnasium's Ant."""
    out = RESULTS / "Ant" / f"flagship_seed{seed}.json"
    flags = [
        "--env",
        "Ant",
        "--num-envs",
        "4096",
        "--total-steps",
        str(steps),
        "--seed",
        str(seed),
        "--eval-every",
        str(FLAGSHIP["eval_every"]),
        "--save-every",
        "0",
        "--quiet",
        "--out-dir",
        str(ROOT / "bench" / "runs" / "locomotion"),
    ]
    threads = os.cpu_count() or 1
    env = dict(thread_env(), OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    (RESULTS / "Ant" / "logs").mkdir(parents=True, exist_ok=True)
    print(
        f"[Ant flagship] python algos/ppo_vec.py {' '.join(flags)} ({threads} threads)", flush=True
    )
    with open(RESULTS / "Ant" / "logs" / f"flagship_seed{seed}.log", "w") as log:
        rc = subprocess.run(
            [
                sys.executable,
                __file__,
                "worker-ours",
                "--threads",
                str(threads),
                "--out",
                str(out),
                "--",
                *flags,
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        ).returncode
    if rc != 0:
        raise SystemExit(
            f"flagship run failed (exit {rc}); see {RESULTS}/Ant/logs/flagship_seed{seed}.log"
        )
    r = json.loads(out.read_text())
    print(
        f"[Ant flagship] gym {r['gym_return']:.0f}, ours-env {r['eval_return']:.0f}, "
        f"{r['sps']:,.0f} env-steps/s, {r['train_seconds']:.0f} s",
        flush=True,
    )


# ---------------------------------------------------------------------------------------------
# report
# ---------------------------------------------------------------------------------------------
def interp(curve: list[dict], key: str, x: float) -> float:
    """eval return at `x` (env steps or train seconds) on a piecewise-linear curve; nan before its
    first point."""
    import numpy as np

    xs = [c[key] for c in curve]
    return float(np.interp(x, xs, [c["eval_return"] for c in curve], left=float("nan")))


def first_reach(curve: list[dict], level: float) -> dict | None:
    return next((c for c in curve if c["eval_return"] >= level), None)


def load(name: str) -> dict:
    out = {}
    for side in SIDES:
        runs = sorted((RESULTS / name).glob(f"{side}_seed*.json"))
        if runs:
            out[side] = [json.loads(p.read_text()) for p in runs]
    return out


def plot(
    name: str, data: dict, path: Path, sides=None, xmax: tuple | None = None, title: str = ""
) -> None:
    """Mean eval return over seeds (band: min..max) against env steps and training seconds, one line
    a side (`sides`: those, in that order; default every side but RLlib's pair, which has its own
    plot); `xmax` (steps, seconds) crops both panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = (
        "tab:blue",
        "tab:orange",
        "tab:green",
        "tab:red",
        "tab:purple",
        "tab:brown",
        "tab:cyan",
    )
    color_of = dict(zip(SIDES, colors))
    for side in sides or [s for s in SIDES if s not in ("rllib", "ours_budget")]:
        if side not in data:
            continue
        runs, color = data[side], color_of[side]
        for i, (ax, key) in enumerate(zip(axes, ("step", "train_seconds"))):
            end = min(r["curve"][-1][key] for r in runs)
            end = min(end, xmax[i]) if xmax else end
            xs = np.linspace(0, end, 200)
            ys = np.array([[interp(r["curve"], key, x) for x in xs] for r in runs])
            ok = ~np.isnan(ys).any(axis=0)
            label = f"{SIDES[side]}, {len(runs)} seed{'s' if len(runs) != 1 else ''}"
            ax.plot(xs[ok], ys[:, ok].mean(0), color=color, label=label)
            ax.fill_between(xs[ok], ys[:, ok].min(0), ys[:, ok].max(0), color=color, alpha=0.2)
    axes[0].set_xlabel("env steps")
    axes[1].set_xlabel("training wall-clock seconds (1 core each)")
    for ax in axes:
        ax.set_ylabel("eval return (deterministic, 10 episodes)")
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
    fig.suptitle(title or f"{name}-v5: mean over seeds, band = min..max")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def flagship_report() -> list[str]:
    """The flagship runs' rows and their PNG (beside the 64-env CPU-default runs of ppo_vec on
    Ant)."""
    runs = [
        json.loads(p.read_text()) for p in sorted((RESULTS / "Ant").glob("flagship_seed*.json"))
    ]
    if not runs:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, key in zip(axes, ("step", "train_seconds")):
        for r in runs:
            ax.plot(
                [c[key] for c in r["curve"]],
                [c["eval_return"] for c in r["curve"]],
                "o-",
                color="tab:purple",
                label=f"--num-envs 4096 (GPU-sized defaults), {r['threads']} "
                f"threads, seed {r['seed']}",
            )
        for r in load("Ant").get("ours", []):
            ax.plot(
                [c[key] for c in r["curve"]],
                [c["eval_return"] for c in r["curve"]],
                color="tab:blue",
                alpha=0.5,
                label=f"CPU defaults (64 envs), 1 thread, seed {r['seed']}",
            )
        ax.set_xlabel("env steps" if key == "step" else "training wall-clock seconds")
        ax.set_ylabel("eval return (deterministic, 10 episodes)")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="lower right", fontsize=7)
    fig.suptitle("Ant-v5: python algos/ppo_vec.py --env Ant --num-envs 4096 on this CPU")
    fig.tight_layout()
    fig.savefig(RESULTS / "locomotion_ant_4096.png", dpi=80)
    plt.close(fig)
    out = [
        "",
        "## The flagship command on this CPU: `python algos/ppo_vec.py --env Ant --num-envs 4096`",
        "",
        "| seed | threads | env steps | gymnasium return | our env | train time | env-steps/s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        out.append(
            f"| {r['seed']} | {r['threads']} | {r['steps'] / 1e6:.1f}M | {r['gym_return']:.0f} ± "
            f"{r['gym_return_std']:.0f} | {r['eval_return']:.0f} | {r['train_seconds']:.0f} s | "
            f"{r['sps']:,.0f} |"
        )
    out += [
        "",
        "Curve: locomotion_ant_4096.png (beside the 64-env runs above, which use one core each).",
    ]
    return out


def rllib_report() -> list[str]:
    """RLlib beside us (issue 60): per task, RLlib and ppo_vec at RLlib's budget, with our and
    rsl_rl's longer runs read off their curves at the same env steps and seconds."""
    import numpy as np

    out = []
    for name in RLLIB:
        data = load(name)
        if "rllib" not in data:
            continue
        budget = min(r["steps"] for r in data["rllib"])
        t_rllib = float(np.mean([r["train_seconds"] for r in data["rllib"]]))
        png = RESULTS / f"locomotion_{name.lower()}_rllib.png"
        plot(
            name,
            data,
            png,
            sides=["ours_budget", "ours", "rsl_rl", "rllib"],
            xmax=(budget, max(r["train_seconds"] for r in data["rllib"])),
            title=f"{name}-v5 to RLlib's budget: mean over seeds, band = min..max",
        )
        t_ours = (
            float(np.mean([r["train_seconds"] for r in data["ours_budget"]]))
            if "ours_budget" in data
            else None
        )
        if not out:
            out = [
                "",
                "## RLlib beside us (issue 60)",
                "",
                "RLlib's PPO with the ray repository's "
                "`rllib/examples/algorithms/ppo/mujoco_ppo.py` settings on gymnasium's env "
                "(bench/locomotion_rllib.py), ppo_vec with its file defaults at the same budget, "
                "and the longer ppo_vec and rsl_rl runs above read off "
                'their curves. One core and one torch thread each, two runs at a time. "at our '
                'time": each curve at the mean training time of ppo_vec\'s run at the budget; "at '
                "RLlib's time\": at the mean training time of RLlib's (a run that ended earlier: "
                "its last evaluation).",
                "",
                "| task | side | seeds | env steps | final gymnasium return | per seed | at the "
                "budget (curve) | train time | env-steps/s | at our time | at RLlib's time |",
                "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|",
            ]
        sps = {}
        for side in ("rllib", "ours_budget", "ours", "rsl_rl"):
            runs = data.get(side)
            if not runs:
                continue
            longer = runs[0]["steps"] > budget * 1.1

            def at(key, x, runs=runs):
                v = [interp(r["curve"], key, min(x, r["curve"][-1][key])) for r in runs]
                return "—" if np.isnan(v).any() else f"{np.mean(v):.0f}"

            g = np.array([r["gym_return"] for r in runs])
            sps[side] = float(np.mean([r["sps"] for r in runs]))
            final = "(longer run)" if longer else f"{g.mean():.0f} ± {g.std():.0f}"
            per = "" if longer else ", ".join(f"{x:.0f}" for x in g)
            out.append(
                f"| {name} | {SIDES[side]} | {len(runs)} | {runs[0]['steps'] / 1e6:.2f}M | "
                f"{final} | {per} | {at('step', budget)} | "
                f"{np.mean([r['train_seconds'] for r in runs]):.0f} s | {sps[side]:,.0f} | "
                f"{at('train_seconds', t_ours) if t_ours else '—'} | "
                f"{at('train_seconds', t_rllib)} |"
            )
        if "ours_budget" in sps:
            out.append(
                f"| {name} | env-steps/s, ours / RLlib | | | | | | | "
                f"{sps['ours_budget'] / sps['rllib']:.1f}x | | |"
            )
    if out:
        r0 = next(r for n in RLLIB for r in load(n).get("rllib", []))
        v = r0.get("versions", {})
        out += [
            "",
            f"RLlib side: ray {v.get('ray')}, gymnasium {v.get('gymnasium')}, torch "
            f"{v.get('torch')} (own venv bench/.venv-rllib), {r0['num_envs']} envs, "
            f"{r0.get('env_runners')} remote env runners; config source: "
            f"{r0.get('config_source')}.",
        ]
    return out


def report() -> str:
    import numpy as np

    lines = [
        "# Locomotion: ppo_vec (MuJoCo defaults) vs rsl_rl (IsaacLab classic PPO "
        "config), same env objects",
        "",
        "| task | side | seeds | envs | env steps | gymnasium return (mean ± std over seeds) "
        "| per seed | train time | env-steps/s | at equal wall time | CleanRL 1M | reached at |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    notes = []
    for name in TASKS:
        data = load(name)
        if not data:
            continue
        png = RESULTS / f"locomotion_{name.lower()}.png"
        plot(name, data, png)
        # equal wall time: every run's curve read at the shortest final training time among the PPO
        # runs
        t_eq = min(
            r["train_seconds"]
            for side, runs in data.items()
            for r in runs
            if side in ("ours", "rsl_rl") or not {"ours", "rsl_rl"} & set(data)
        )
        for side, runs in data.items():
            g = np.array([r["gym_return"] for r in runs])
            at_t = np.mean([interp(r["curve"], "train_seconds", t_eq) for r in runs])
            # a run that ended earlier: its final value
            ended = max(r["curve"][-1]["train_seconds"] for r in runs)
            at_cell = f"{at_t:.0f} @ {t_eq:.0f} s" + (
                f" (final: ended at {ended:.0f} s)" if ended < t_eq else ""
            )
            ref = CLEANRL_1M.get(name) or TARGET.get(name)
            reach = [first_reach(r["curve"], ref) for r in runs] if ref else []
            got = [c for c in reach if c]
            where = (
                (
                    f"{len(got)}/{len(runs)}: {np.mean([c['step'] for c in got]) / 1e6:.2f}M "
                    f"steps, {np.mean([c['train_seconds'] for c in got]):.0f} s"
                    if got
                    else f"0/{len(runs)}"
                )
                if ref
                else ""
            )
            lines.append(
                f"| {name} | {SIDES[side]} | {len(runs)} | {runs[0]['num_envs']} | "
                f"{runs[0]['steps'] / 1e6:.2f}M | "
                f"{g.mean():.0f} ± {g.std():.0f} | {', '.join(f'{x:.0f}' for x in g)} | "
                f"{np.mean([r['train_seconds'] for r in runs]):.0f} s | "
                f"{np.mean([r['sps'] for r in runs]):,.0f} | "
                f"{at_cell} | {CLEANRL_1M.get(name, '—')} | {where} |"
            )
        if {"ours", "rsl_rl"} <= set(data):
            sps = [np.mean([r["sps"] for r in data[s]]) for s in ("ours", "rsl_rl")]
            gym = [np.mean([r["gym_return"] for r in data[s]]) for s in ("ours", "rsl_rl")]
            notes.append(
                f"- {name}: env-steps/s ratio ours/rsl_rl {sps[0] / sps[1]:.2f}x; gymnasium return "
                f"at equal env steps {gym[0]:.0f} vs {gym[1]:.0f}; curve {png.name}"
            )
        if {"ours", "adaptive"} <= set(data):
            gym = [np.mean([r["gym_return"] for r in data[s]]) for s in ("ours", "adaptive")]
            seeds = ", ".join(f"{r['gym_return']:.0f}" for r in data["adaptive"])
            notes.append(
                f"- {name}: ppo_vec with the adaptive-KL schedule vs linear annealing: gymnasium "
                f"return {gym[1]:.0f} ({seeds}) vs {gym[0]:.0f}"
            )
        meta = RESULTS / name / "group.json"
        if meta.exists():
            m = json.loads(meta.read_text())
            notes.append(
                f"  - group run {m['date']}: {m['group_wall_seconds'] / 60:.0f} min wall time, "
                f"{m['machine']}"
            )
    lines += [
        "",
        "Each run: one core and one torch thread (the two sides of a seed run at the same time, "
        'one core each). "at equal wall time": eval return on our env (gymnasium-exact, '
        "tests/test_mujoco_parity.py) read off each run's curve at the shortest final training "
        'time of the task. "reached at": first evaluation at or above CleanRL\'s 1M-step score '
        "(Ant: the issue's 3000), mean over the seeds that reached it.",
        "",
    ] + notes
    lines += flagship_report()
    lines += rllib_report()
    out = "\n".join(lines) + "\n"
    (RESULTS / "locomotion.md").write_text(out)
    print(out)
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker-ours":
        i = sys.argv.index("--")
        from common.cli import ArgumentParser

        p = ArgumentParser()
        p.add_argument("--out", required=True)
        p.add_argument("--algo", default="ppo_vec")
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--side")
        a = p.parse_args(sys.argv[2:i])
        worker_ours(a.out, a.algo, sys.argv[i + 1 :], a.threads, a.side)
        return
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run one task, both sides, its seeds")
    r.add_argument(
        "task",
        type=lambda t: {k.lower(): k for k in TASKS}.get(t.lower().removesuffix("-v5"), t),
        choices=list(TASKS),
    )
    r.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    r.add_argument(
        "--steps",
        type=int,
        help="env steps per run (default: the task budget in TASKS, or OFFPOLICY "
        "for fast_td3 and sac)",
    )
    r.add_argument("--num-envs", type=int)
    r.add_argument("--eval-every", type=int)
    r.add_argument(
        "--sides",
        nargs="+",
        choices=list(ALGO_OF) + ["rsl_rl", "rllib"],
        default=["ours", "rsl_rl"],
        help="what runs, two at a time: ours (ppo_vec), rsl_rl, fast_td3, sac, adaptive; rllib "
        "and ours_budget (ppo_vec at RLlib's budget, RLLIB)",
    )
    r.add_argument(
        "--rllib-runners",
        type=int,
        default=0,
        choices=(0, 1),
        help="RLlib's env runners: 0 samples in the driver (all-local), 1 in one remote runner",
    )
    f = sub.add_parser(
        "flagship", help="python algos/ppo_vec.py --env Ant --num-envs 4096 on every core"
    )
    f.add_argument("--steps", type=int, default=FLAGSHIP["steps"])
    f.add_argument("--seed", type=int, default=1)
    sub.add_parser("report", help="table and PNGs from the results saved so far")
    a = p.parse_args()
    if a.cmd == "report":
        report()
        return
    if a.cmd == "flagship":
        flagship(a.steps, a.seed)
        report()
        return
    if a.task not in OFFPOLICY and set(a.sides) & set(OFFPOLICY_FLAGS):
        raise SystemExit(
            f"off-policy sides run on {', '.join(OFFPOLICY)} only (OFFPOLICY in "
            f"{Path(__file__).name})"
        )
    if a.task not in RLLIB and set(a.sides) & {"rllib", "ours_budget"}:
        raise SystemExit(
            f"RLlib's sides run on {', '.join(RLLIB)} only (RLLIB in {Path(__file__).name})"
        )
    run(a.task, a.seeds, a.steps, a.num_envs, a.eval_every, a.sides, a.rllib_runners)
    report()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
