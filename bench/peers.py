"""Side by side with Stable-Baselines3 on this machine, in one invocation, with **each algorithm
file's own defaults** (`python algos/<file>.py --env <id>`, nothing else) against SB3 with RL Zoo's
tuned settings, on CartPole-v1 (PPO, DQN, PQN; threshold 475) and Pendulum-v1 (SAC, TD3; -200).

    python bench/peers.py  # every comparison, held-out seeds 11-15 (~60-80 min on 2 cores)
    python bench/peers.py --only ppo dqn --seeds 1 2 3
    python bench/peers.py --first-hit   # the old, cheaper measure: each run stops at its first hit
    python bench/peers.py --from-log bench/results/peers.jsonl   # rebuild the table, no runs

Every full run also lands in the benchmark's metrics layout, `bench/results/peers/runs/` (the
`peers` rows of bench/experiments.py; `seconds` there: training seconds, evaluations left out), and
`python bench/report.py peers` reports the group as the others (IQM over seeds with intervals).

**The headline is the time to a stable solve**: the training seconds until the first evaluation
after which every evaluation to the end of the run, the final policy's included, stays at or above
the threshold (a run whose final policy is below it never solved stably). Beside it: the final
policy's evaluation, the share of the evaluations after the first hit that are at or above the
threshold, and the time to the first hit (a spike counts there: labeled as such). Each side trains
its whole step budget (ours: the file's default `--total-steps`; SB3: the zoo's `n_timesteps`) and
is evaluated on one schedule: every `eval_every` env steps, and once more on the final policy.

SB3 is never a project dependency: the first run creates `bench/.venv-peers` (python -m venv, then
pip install of torch==2.13.0, stable-baselines3==2.9.2 and gymnasium[classic-control]==1.4.0 (PINS):
a download, a few minutes; where plain pip would pull a CUDA torch, create that venv beforehand with
the CPU wheel) and runs the SB3 side there (`bench/peers_sb3.py`, RL Baselines3 Zoo
hyper-parameters); our side runs with this interpreter. Every run is its own process, one at a time,
with OMP_NUM_THREADS=1 and torch.set_num_threads(1) on both sides. DQN and PQN are both compared
with SB3's DQN: one SB3 run per seed, in this invocation, serves both rows.

The only flag the benchmark gives our files is the evaluation cadence (`--eval-every`, the same
number of env steps as SB3's): a measurement setting, not a training one. Each side evaluates after
the update that completes every `eval_every` env steps (ours: the file's own evaluation point, which
also evaluates the final policy; SB3: a callback at the start of the next rollout, and once after
`learn`), on one `gymnasium.make(env_id)`, episode k reset with seed `seed + 10000 + k`
(common/evaluate.py's `gym_rollouts`; the SB3 script carries a copy of its loop). For ours, the
algorithm file's `evaluate` (our torch env) is replaced by it in the worker process; nothing else in
the algorithm changes.

Clocks: both start when training starts (SB3: the callback's `_on_training_start`, after the model
and its envs are built; ours: when the algorithm file's Logger is ready, after envs, networks,
buffers and the logger's own writers are built). Training seconds to an evaluation are the clock at
its end minus the time of every evaluation up to it; the clock with the evaluations is in the
per-seed tables. Medians over seeds; a seed that never solved counts as infinitely slow (the median
is "n/a" when half of them did not). The seeds are held out: the defaults were chosen on seeds 1-5.
Ours runs with `--no-plots` (no curves.png at the end; SB3 draws nothing).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / "bench" / ".venv-peers"
PINS = {"torch": "2.13.0", "stable-baselines3": "2.9.2", "gymnasium": "1.4.0"}

# comparison -> (our file, env, threshold, eval cadence in env steps (both sides), SB3 algorithm,
# target ratio of the times to a stable solve, SB3's over ours)
COMPARISONS = {
    "ppo": dict(
        file="ppo_vec", env="CartPole-v1", threshold=475.0, eval_every=2048, sb3="ppo", target=5.0
    ),
    "dqn": dict(
        file="dqn", env="CartPole-v1", threshold=475.0, eval_every=2048, sb3="dqn", target=2.0
    ),
    "pqn": dict(
        file="pqn", env="CartPole-v1", threshold=475.0, eval_every=2048, sb3="dqn", target=5.0
    ),
    "sac": dict(
        file="sac", env="Pendulum-v1", threshold=-200.0, eval_every=1000, sb3="sac", target=5.0
    ),
    "td3": dict(
        file="td3", env="Pendulum-v1", threshold=-200.0, eval_every=1000, sb3="td3", target=5.0
    ),
}
ZOO_TEXT = {
    "ppo": "RL Zoo ppo.yml CartPole-v1: n_envs 8, n_timesteps 1e5, n_steps 32, batch_size 256, "
    "gae_lambda 0.8, gamma 0.98, n_epochs 20, ent_coef 0.0, learning_rate lin_0.001, clip_range "
    "lin_0.2 (MlpPolicy 64x64)",
    "dqn": "RL Zoo dqn.yml CartPole-v1: n_timesteps 5e4, learning_rate 2.3e-3, batch_size "
    "64, buffer_size 1e5, learning_starts 1000, gamma 0.99, target_update_interval 10, "
    "train_freq 256, gradient_steps 128, exploration_fraction 0.16, exploration_final_eps 0.04, "
    "net_arch 256x256 (1 env)",
    "sac": "RL Zoo sac.yml Pendulum-v1: n_timesteps 20000, learning_rate 1e-3, SB3 defaults "
    "otherwise (1 env, buffer 1e6, learning_starts 100, batch 256, tau 0.005, gamma 0.99, "
    "train_freq 1, gradient_steps 1, ent_coef auto, net_arch 256x256)",
    "td3": "RL Zoo td3.yml Pendulum-v1: n_timesteps 20000, gamma 0.98, buffer_size 200000, "
    "learning_starts 10000, noise normal 0.1, gradient_steps -1, train_freq [1, episode], "
    "learning_rate 1e-3, net_arch [400, 300]",
}


def thread_env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="disabled")


# ---------------------------------------------------------------------------------------------
# the benchmark-only SB3 environment
# ---------------------------------------------------------------------------------------------
def ensure_venv() -> Path:
    py = VENV / "bin" / "python"
    probe = (
        "import torch, stable_baselines3, gymnasium; print(torch.__version__.split('+')[0], "
        "stable_baselines3.__version__, gymnasium.__version__)"
    )
    want = f"{PINS['torch']} {PINS['stable-baselines3']} {PINS['gymnasium']}"
    if py.exists():
        got = subprocess.run([str(py), "-c", probe], capture_output=True, text=True).stdout.strip()
        if got == want:
            return py
    print(
        f"creating {VENV.relative_to(ROOT)} (torch=={PINS['torch']}, stable-baselines3=="
        f"{PINS['stable-baselines3']}, gymnasium[classic-control]=={PINS['gymnasium']})",
        flush=True,
    )
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "-q",
            f"torch=={PINS['torch']}",
            f"stable-baselines3=={PINS['stable-baselines3']}",
            f"gymnasium[classic-control]=={PINS['gymnasium']}",
        ],
        check=True,
    )
    got = subprocess.run(
        [str(py), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    if got != want:
        raise RuntimeError(f"{VENV} has {got}, wanted {want}")
    return py


# ---------------------------------------------------------------------------------------------
# our side (worker process: python bench/peers.py --worker ALGO --seed S -- FLAGS...)
# ---------------------------------------------------------------------------------------------
class Reached(Exception):
    pass


def worker(
    algo: str, seed: int, flags: list[str], threshold: float, profile: bool, stop_at_hit: bool
) -> dict:
    sys.path.insert(0, str(ROOT))
    import importlib

    import gymnasium as gym
    import torch

    from common.cli import cli
    from common.policy import PolicyFn
    from tools.evaluate import gym_rollouts

    torch.set_num_threads(1)
    mod = importlib.import_module(
        f"algos.{COMPARISONS[algo]['file'] if algo in COMPARISONS else algo}"
    )
    # no curves.png (`--no-plots`): SB3 draws nothing either
    args = cli(
        mod.Args,
        argv=[
            *flags,
            "--seed",
            str(seed),
            "--save-every",
            "0",
            "--quiet",
            "--no-plots",
            "--out-dir",
            str(ROOT / "bench" / "runs" / "peers"),
        ],
        defaults_for=getattr(mod, "default_args", None),
    )
    probe = gym.make(args.env)
    obs_shape = tuple(probe.observation_space.shape)
    probe.close()
    state = {"logger": None, "evals": [], "eval_start": None}

    def on_log(run, row):  # an evaluation's row: its step; a first-hit run stops there
        if "eval_return" in row:
            state["evals"][-1]["step"] = int(row["step"])
            if stop_at_hit and row["eval_return"] >= threshold:
                raise Reached

    def gym_evaluate(policy, env_id, episodes=10, seed=0, device="cpu", **_):
        t = time.perf_counter()
        state["eval_start"] = t - state["logger"].t0
        r = gym_rollouts(
            PolicyFn(policy, device, env_id=env_id, obs_shape=obs_shape), env_id, episodes, seed
        )
        now = time.perf_counter()
        state["evals"].append(
            dict(
                step=None,
                seconds=now - state["logger"].t0,
                eval_seconds=now - t,
                eval_return=r["eval_return"],
            )
        )
        state["final"] = {k: v for k, v in r.items() if k != "returns"}
        return r

    def on_open(run):
        state["logger"] = run.logger

    from common.run import hooks

    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    try:
        with hooks(on_open=on_open, on_log=on_log, evaluate=gym_evaluate):
            mod.main(args)
    except Reached:
        pass
    if prof is not None:
        prof.disable()
    if state["logger"] is not None:  # metrics and checkpoint are not needed: the result is printed
        import shutil

        shutil.rmtree(state["logger"].run_dir, ignore_errors=True)
    out = dict(
        side="ours",
        algo=algo,
        env=args.env,
        seed=seed,
        evals=state["evals"],
        budget=args.total_steps,
        threshold=threshold,
        mode="first-hit" if stop_at_hit else "full",
    )
    hit = next((e for e in state["evals"] if e["eval_return"] >= threshold), None)
    out.update(
        reached=hit is not None,
        seconds=hit["seconds"] if hit else None,
        step=hit["step"] if hit else None,
    )
    out["versions"] = dict(
        torch=torch.__version__, gymnasium=gym.__version__, threads=torch.get_num_threads()
    )
    if prof is not None:
        import io
        import pstats

        s = io.StringIO()
        st = pstats.Stats(prof, stream=s)
        total = st.total_tt
        rows = []
        for (file, line, fn), (cc, nc, tt, ct, _) in st.stats.items():
            rows.append(
                dict(fn=f"{Path(file).name}:{line}({fn})", calls=nc, tottime=tt, cumtime=ct)
            )
        out["profile"] = dict(
            total=total,
            by_tottime=sorted(rows, key=lambda r: -r["tottime"])[:15],
            by_cumtime=sorted(rows, key=lambda r: -r["cumtime"])[:25],
        )
    return out


# ---------------------------------------------------------------------------------------------
# orchestration
# ---------------------------------------------------------------------------------------------
def run(cmd: list[str], log) -> dict:
    load = os.getloadavg()[0]  # other work on the machine skews both sides: recorded per run
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=thread_env(), capture_output=True, text=True)
    wall = time.perf_counter() - t
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    # stop here: a row with a failed run would be a wrong number
    if proc.returncode != 0 or line is None:
        print(f"FAILED ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}", flush=True)
        raise SystemExit(
            f"error: a run failed (above); the runs before it are in {log.name} "
            f"(`python bench/peers.py --from-log {log.name}` rebuilds their table)"
        )
    res = json.loads(line[len("RESULT ") :])
    res["process_wall"] = wall
    res["load_before"] = load
    log.write(json.dumps(res) + "\n")
    log.flush()
    return res


def sb3_cmd(py: Path, algo: str, seed: int, stop_at_hit: bool = False) -> list[str]:
    c = COMPARISONS[algo]
    cmd = [
        str(py),
        "bench/peers_sb3.py",
        c["sb3"],
        "--seed",
        str(seed),
        "--eval-every",
        str(c["eval_every"]),
        "--threshold",
        f"{c['threshold']:g}",
    ]
    return cmd + (["--stop-at-hit"] if stop_at_hit else [])


def our_flags(algo: str) -> list[str]:
    """The flags our side gets: the env, and the evaluation cadence (a measurement setting); nothing
    else."""
    c = COMPARISONS[algo]
    return ["--env", c["env"], "--eval-every", str(c["eval_every"])]


def ours_cmd(algo: str, seed: int, profile: bool = False, stop_at_hit: bool = False) -> list[str]:
    c = COMPARISONS[algo]
    cmd = [
        sys.executable,
        "bench/peers.py",
        "--worker",
        algo,
        "--seed",
        str(seed),
        "--threshold",
        f"{c['threshold']:g}",
    ]
    if profile:
        cmd += ["--profile", "always"]
    if stop_at_hit:
        cmd += ["--first-hit"]
    return cmd + ["--", *our_flags(algo)]


def fmt(x, spec=".1f"):
    return "n/a" if x is None or x != x or x == float("inf") else format(x, spec)


# ---------------------------------------------------------------------------------------------
# the measures, from one run's evaluations (a failed run: None)
# ---------------------------------------------------------------------------------------------
def _ok(r: dict) -> bool:
    return bool(r) and "error" not in r and "evals" in r


def _solved(r: dict) -> list[bool]:
    thr = r["threshold"] if "threshold" in r else COMPARISONS[r["algo"]]["threshold"]
    return [e["eval_return"] >= thr for e in r["evals"]]


def full_run(r: dict) -> bool:
    """a run trained to its budget (the stable measure needs one; --first-hit runs stop early)"""
    return _ok(r) and r.get("mode", "first-hit") == "full"


def train_at(r: dict, i: int) -> float:
    """training seconds at the end of evaluation i: the clock minus every evaluation up to it"""
    e = r["evals"]
    return e[i]["seconds"] - sum(x["eval_seconds"] for x in e[: i + 1])


def first_index(r: dict) -> int | None:
    return next((i for i, ok in enumerate(_solved(r)) if ok), None)


def stable_index(r: dict) -> int | None:
    """the first evaluation after which every one to the end (the final policy's included) is at
    or above the threshold; None if the final one is below it"""
    ok = _solved(r)
    if not ok or not ok[-1]:
        return None
    i = len(ok) - 1
    while i > 0 and ok[i - 1]:
        i -= 1
    return i


def first_secs(r: dict) -> float | None:
    """training seconds to the first evaluation at or above the threshold (inf: never)"""
    if not _ok(r):
        return None
    i = first_index(r)
    return float("inf") if i is None else train_at(r, i)


def stable_secs(r: dict) -> float | None:
    """training seconds to the stable solve (inf: the final policy is below the threshold)"""
    if not full_run(r):
        return None
    i = stable_index(r)
    return float("inf") if i is None else train_at(r, i)


def clock_secs(r: dict, index=first_index) -> float | None:
    if not _ok(r) or (index is stable_index and not full_run(r)):
        return None
    i = index(r)
    return float("inf") if i is None else r["evals"][i]["seconds"]


def step_at(r: dict, index) -> int | None:
    i = index(r) if _ok(r) and (index is first_index or full_run(r)) else None
    return None if i is None else r["evals"][i]["step"]


def final_return(r: dict) -> float | None:
    return r["evals"][-1]["eval_return"] if full_run(r) and r["evals"] else None


def after_first(r: dict) -> tuple[int, int] | None:
    """(at or above the threshold, all) of the evaluations after the first hit"""
    if not full_run(r) or first_index(r) is None:
        return None
    rest = _solved(r)[first_index(r) + 1 :]
    return sum(rest), len(rest)


def median(xs):
    xs = [x for x in xs if x is not None and x == x]
    return statistics.median(xs) if xs else None


def main() -> str | None:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--only",
        nargs="+",
        choices=list(COMPARISONS),
        default=list(COMPARISONS),
        help="the comparisons to run (default: all five)",
    )
    p.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=[11, 12, 13, 14, 15],
        help="seeds of both sides (default: 11-15, held out: the defaults were chosen on 1-5)",
    )
    p.add_argument(
        "--first-hit",
        action="store_true",
        help="stop each run at its first evaluation at or above the threshold (the first-hit "
        "measure alone; no stable solve, no final policy)",
    )
    p.add_argument(
        "--profile",
        choices=["auto", "never", "always"],
        default="auto",
        help="cProfile one run of ours (the first seed) for comparisons that "
        "miss their target (auto)",
    )
    p.add_argument(
        "--log",
        default="bench/results/peers.jsonl",
        help="every run's JSON result, one line each (default: the committed "
        "bench/results/peers.jsonl; "
        "replaced when the invocation completes, kept as it was when it fails)",
    )
    p.add_argument(
        "--from-log", metavar="JSONL", help="no runs: rebuild the table from a --log file"
    )
    # worker mode (our side, one run)
    # (a comparison, or any algorithm file: bench/stable.py)
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--threshold", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("flags", nargs="*", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        threshold = COMPARISONS[a.worker]["threshold"] if a.threshold is None else a.threshold
        out = worker(a.worker, a.seed, a.flags, threshold, a.profile == "always", a.first_hit)
        print("RESULT " + json.dumps(out), flush=True)
        return

    if a.from_log:
        results, profiles = from_log(ROOT / a.from_log)
        to_metrics(results)
        print(report(results, profiles, versions_of(results), None))
        return None  # (a log's table, printed: the committed peers.md stays the last run's)
    if importlib.util.find_spec("torch") is None:  # our side runs with this interpreter
        sys.exit(
            f"bench/peers.py: {sys.executable} has no torch; run it with the project's venv "
            "(.venv/bin/python bench/peers.py, or bash benchmark.sh peers)"
        )
    t_group = time.perf_counter()
    py = ensure_venv()
    log_path = ROOT / a.log
    log_path.parent.mkdir(parents=True, exist_ok=True)
    partial = log_path.with_name(log_path.name + ".tmp")  # becomes --log when every run is in
    results: dict[str, list[tuple[int, dict, dict]]] = {}
    sb3_runs = {}  # (SB3 algorithm, seed) -> result: DQN serves the dqn and pqn rows
    with open(partial, "w") as log:
        for algo in a.only:
            results[algo] = []
            c = COMPARISONS[algo]
            for seed in a.seeds:
                key = (c["sb3"], seed)
                if key not in sb3_runs:
                    sb3_runs[key] = run(sb3_cmd(py, algo, seed, a.first_hit), log)
                sb3 = dict(sb3_runs[key], algo=algo)
                ours = run(ours_cmd(algo, seed, stop_at_hit=a.first_hit), log)
                results[algo].append((seed, sb3, ours))
                print(
                    f"{algo} seed {seed}: SB3 stable {fmt(stable_secs(sb3), '.2f')} s, final "
                    f"{fmt(final_return(sb3))}, first hit {fmt(first_secs(sb3), '.2f')} s; ours "
                    f"stable {fmt(stable_secs(ours), '.2f')} s, final {fmt(final_return(ours))}, "
                    f"first hit {fmt(first_secs(ours), '.2f')} s",
                    flush=True,
                )
        profiles = {}
        for algo, rows in results.items():
            ratio = ratio_of(rows, first_secs if a.first_hit else stable_secs)
            if a.profile == "always" or (
                a.profile == "auto" and (ratio is None or ratio < COMPARISONS[algo]["target"])
            ):
                print(f"{algo}: profiling ours (seed {rows[0][0]}) under cProfile", flush=True)
                profiles[algo] = run(
                    ours_cmd(algo, rows[0][0], profile=True, stop_at_hit=True), log
                )
    partial.replace(log_path)
    to_metrics(results)
    text = report(results, profiles, versions_of(results), time.perf_counter() - t_group)
    print(text)
    return text


def to_metrics(results, out: Path = ROOT / "bench" / "results" / "peers" / "runs") -> None:
    """Each full run's evaluations as a metrics file of the `peers` rows (bench/experiments.py):
    `seconds` its training seconds at each evaluation (as the measures here count them),
    `clock_seconds` the clock with the evaluations."""
    from common.checkpoint import atomic_write

    for algo, rows in results.items():
        c = COMPARISONS[algo]
        for seed, sb3, ours in rows:
            for label, r in ((c["file"], ours), (f"sb3_{c['sb3']}", sb3)):
                if not full_run(r):
                    continue
                lines = [
                    json.dumps(
                        {
                            "step": e["step"],
                            "seconds": round(train_at(r, i), 3),
                            "clock_seconds": round(e["seconds"], 3),
                            "eval_return": e["eval_return"],
                        }
                    )
                    + "\n"
                    for i, e in enumerate(r["evals"])
                ]
                atomic_write(out / f"{c['env']}__{label}__s{seed}.jsonl", "".join(lines))


def versions_of(results) -> dict:
    return next(
        (r[1]["versions"] for rows in results.values() for r in rows if "versions" in r[1]), {}
    )


def from_log(path: Path):
    """(results, profiles) as main() builds them, from the JSON lines of a --log file."""
    sb3, ours, profiles = {}, {}, {}
    for line in open(path):
        r = json.loads(line)
        if "profile" in r:
            profiles[r["algo"]] = r
        elif r.get("side") == "sb3":
            sb3[(r["algo"], r["seed"])] = r
        elif r.get("side") == "ours":
            ours.setdefault(r["algo"], {})[r["seed"]] = r
    results = {
        algo: [
            (seed, dict(sb3.get((COMPARISONS[algo]["sb3"], seed), {}), algo=algo), o)
            for seed, o in sorted(by_seed.items())
        ]
        for algo, by_seed in sorted(ours.items(), key=lambda kv: list(COMPARISONS).index(kv[0]))
    }
    return results, profiles


def ratio_of(rows, measure=stable_secs) -> float | None:
    s, o = median([measure(r[1]) for r in rows]), median([measure(r[2]) for r in rows])
    if s is None or o is None or o == float("inf") or o <= 0:
        return None
    return s / o  # inf: SB3 did not reach on half of the seeds, ours did


def finals(rows, i) -> str:
    """the final policies at or above the threshold, and their returns' median"""
    f = [final_return(r[i]) for r in rows]
    if all(x is None for x in f):
        return "n/a"
    thr = COMPARISONS[rows[0][i]["algo"]]["threshold"]
    return f"{sum(x >= thr for x in f if x is not None)}/{len(f)} (median {fmt(median(f))})"


def afters(rows, i) -> str:
    """the evaluations after each seed's first hit at or above the threshold, all seeds pooled"""
    a = [after_first(r[i]) for r in rows]
    a = [x for x in a if x is not None]
    n = sum(x[1] for x in a)
    return f"{100 * sum(x[0] for x in a) / n:.0f}% of {n}" if n else "n/a"


def report(results, profiles, versions, total_seconds) -> str:
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    import gymnasium
    import torch

    out = [
        "Stable-Baselines3 (RL Zoo settings) vs ours (each file's defaults), side by side on this "
        f"machine ({os.cpu_count()} CPU cores, {cpu_name()}), one torch thread each "
        "(OMP_NUM_THREADS=1, torch.set_num_threads(1)), one run at a time, one invocation, "
        f"{date}. Deterministic 10-episode gymnasium evaluations on one schedule on both sides, "
        "each side training its whole step budget. **Stable s**: training seconds (evaluations "
        "excluded) to the first evaluation after which every one to the end, the final policy's "
        "included, is at or above the threshold; medians over seeds, a seed whose final policy is "
        "below it counting as never. **Final**: the final policy's evaluation. **After the first "
        "hit**: the share of the evaluations after each seed's first one at or above the "
        "threshold that are at or above it. **First hit**: training seconds to the first "
        "evaluation at or above the threshold (a spike counts: not a solve).",
        "",
    ]
    out += [
        "| comparison | seeds | SB3 stable s | ours stable s | ratio | target | SB3 final "
        "| ours final | SB3 after the first hit | ours after the first hit | first hit: SB3 s "
        "| ours s | ratio |",
        "|---|---|---:|---:|---:|---:|---|---|---|---|---:|---:|---:|",
    ]
    inf = float("inf")
    rs = lambda x: (
        "inf (SB3: never)" if x == inf else fmt(x, ".1f") + ("x" if x is not None else "")
    )
    # a median over seeds that did not solve on half of them or more
    ms = lambda xs: "never" if median(xs) == inf else fmt(median(xs))
    detail = []
    for algo, rows in results.items():
        c = COMPARISONS[algo]
        seeds = ", ".join(str(r[0]) for r in rows)
        ratio, ratio_first = ratio_of(rows), ratio_of(rows, first_secs)
        met = "met" if ratio is not None and ratio >= c["target"] else "missed"
        name = (
            f"{algo.upper()} {c['env']} >= {c['threshold']:g} (SB3 {c['sb3'].upper()})"
            if c["sb3"] != algo
            else f"{algo.upper()} {c['env']} >= {c['threshold']:g}"
        )
        out.append(
            f"| {name} | {seeds} | {ms([stable_secs(r[1]) for r in rows])} "
            f"| {ms([stable_secs(r[2]) for r in rows])} | {rs(ratio)} "
            f"| >= {c['target']:g}x ({met}) | {finals(rows, 1)} | {finals(rows, 2)} "
            f"| {afters(rows, 1)} | {afters(rows, 2)} "
            f"| {ms([first_secs(r[1]) for r in rows])} "
            f"| {ms([first_secs(r[2]) for r in rows])} | {rs(ratio_first)} |"
        )
        detail += [
            "",
            f"{name}, per seed (evaluations every {c['eval_every']:,} env steps on both sides, and "
            "the final policy's; stable/first at: env steps, training s (clock s with the "
            "evaluations))",
            "",
            "| seed | SB3 steps | SB3 stable at | SB3 first hit at | SB3 final | ours steps "
            "| ours stable at | ours first hit at | ours final | ratio stable | ratio first hit |",
            "|---:|---:|---|---|---:|---:|---|---|---:|---:|---:|",
        ]
        for seed, sb, o in rows:

            def at(r, index, secs):
                step = step_at(r, index)
                if step is None:
                    return "never" if _ok(r) and (index is first_index or full_run(r)) else "n/a"
                return f"{step:,}: {fmt(secs(r), '.2f')} ({fmt(clock_secs(r, index), '.2f')})"

            def steps(r):
                return fmt(r["evals"][-1]["step"], ",") if full_run(r) and r["evals"] else "n/a"

            def ratio(f):
                a, b = f(sb), f(o)
                return fmt(a / b if a and b and b != float("inf") else None, ".1f")

            detail.append(
                f"| {seed} | {steps(sb)} | {at(sb, stable_index, stable_secs)} "
                f"| {at(sb, first_index, first_secs)} | {fmt(final_return(sb))} | {steps(o)} "
                f"| {at(o, stable_index, stable_secs)} | {at(o, first_index, first_secs)} "
                f"| {fmt(final_return(o))} | {ratio(stable_secs)} | {ratio(first_secs)} |"
            )
    out += detail
    out += [
        "",
        "Commands and settings (both sides: OMP_NUM_THREADS=1 MKL_NUM_THREADS=1, "
        "torch.set_num_threads(1)):",
    ]
    for algo in results:
        c = COMPARISONS[algo]
        flags = " ".join(our_flags(algo))
        out.append(
            f"- {algo.upper()} SB3: `bench/.venv-peers/bin/python "
            f"{' '.join(sb3_cmd(Path('x'), algo, 1)[1:])}` (seed varied); {ZOO_TEXT[c['sb3']]}"
        )
        budget = next((r[2].get("budget") for r in results[algo] if r[2].get("budget")), None)
        out.append(
            f"- {algo.upper()} ours: `python algos/{c['file']}.py {flags} --seed 1` (the file's "
            f"defaults for {c['env']}: `python algos/{c['file']}.py --env {c['env']} --help` lists "
            f"them; step budget {fmt(budget, ',')}), run as `python bench/peers.py --worker {algo} "
            f"--seed 1 -- {flags}`, which replaces its `evaluate` by gymnasium rollouts"
        )
    out.append(
        "- evaluation: 10 deterministic episodes on gymnasium.make(env), episode k seeded "
        "seed+10000+k, both sides; each side evaluates after the update that completes each "
        "`eval_every` env steps, and the final policy"
    )
    if any(COMPARISONS[a]["sb3"] != a for a in results):
        out.append("- DQN and PQN rows share one SB3 DQN run per seed (this invocation)")
    loads = [
        r[i]["load_before"]
        for rows in results.values()
        for r in rows
        for i in (1, 2)
        if "load_before" in r[i]
    ]
    if loads:
        out.append(
            f"- machine load: 1-minute load average before each run {min(loads):.1f} to "
            f"{max(loads):.1f} (1.0 = one busy core of {os.cpu_count()}; above that, other "
            f"work shared the cores)"
        )
    out.append(
        f"- versions: SB3 side torch {versions.get('torch', '?')}, stable-baselines3 "
        f"{versions.get('sb3', '?')}, gymnasium {versions.get('gymnasium', '?')}; our "
        f"side torch {torch.__version__}, gymnasium {gymnasium.__version__}; Python "
        f"{platform.python_version()}"
    )
    if total_seconds is not None:
        out.append(f"- group run time: {total_seconds / 60:.1f} min (`bash benchmark.sh peers`)")
    for algo, prof in profiles.items():
        if "profile" not in prof:
            continue
        pr = prof["profile"]
        out += [
            "",
            f"Profile of ours to its first hit, {algo.upper()} seed {prof['seed']} (cProfile, "
            f"{pr['total']:.2f} s profiled incl. setup; profiled clock "
            f"{fmt(clock_secs(prof), '.2f')} s): top functions by own time",
            "",
            "| function | calls | own s | cumulative s |",
            "|---|---:|---:|---:|",
        ]
        out += [
            f"| `{r['fn']}` | {r['calls']:,} | {r['tottime']:.3f} | {r['cumtime']:.3f} |"
            for r in pr["by_tottime"]
        ]
        out += [
            "",
            "by cumulative time:",
            "",
            "| function | calls | own s | cumulative s |",
            "|---|---:|---:|---:|",
        ]
        out += [
            f"| `{r['fn']}` | {r['calls']:,} | {r['tottime']:.3f} | {r['cumtime']:.3f} |"
            for r in pr["by_cumtime"]
        ]
    return "\n".join(out)


def cpu_name() -> str:
    try:
        return next(
            l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")
        )
    except (OSError, StopIteration):
        return platform.machine()


if __name__ == "__main__":
    from report import script  # bench/report.py (this script's folder is on sys.path)

    script(main, "peers")
