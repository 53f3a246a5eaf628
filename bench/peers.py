"""Side by side with Stable-Baselines3 on this machine, in one invocation: PPO on CartPole-v1 (wall
time to a deterministic 10-episode evaluation >= 475), SAC and TD3 on Pendulum-v1 (wall time for
20k env steps and the final deterministic 10-episode evaluation).

    python bench/peers.py                                  # PPO seeds 1-3, SAC/TD3 seeds 1-2 (~30 min)
    python bench/peers.py --only ppo --ppo-seeds 1 2 3 4 5
    python bench/peers.py --offpolicy-seeds 1              # quicker

SB3 is never a project dependency: the first run creates `bench/.venv-peers` (python -m venv, then
pip install of the pinned torch, stable-baselines3 and gymnasium below) and runs the SB3 side there
(`bench/peers_sb3.py`, RL Baselines3 Zoo hyper-parameters); our side runs with this interpreter
(`algos/ppo_vec.py`, `algos/sac.py`, `algos/td3.py`). Every run is its own process, one at a time,
with OMP_NUM_THREADS=1 and torch.set_num_threads(1) on both sides.

Evaluation is the same for both: a deterministic policy on one `gymnasium.make(env_id)`, episode k
reset with seed `seed + 10000 + k` (common/evaluate.py's `gym_rollouts`; the SB3 script carries a
copy of its loop). For ours the algorithm file's `evaluate` (our torch env) is replaced by it in the
worker process; nothing else in the algorithm changes.

Clocks: both start when training starts (SB3: the callback's `_on_training_start`, after the model
and its envs are built; ours: when the algorithm file creates its Logger, after envs, networks and
buffers are built). PPO: the clock stops at the end of the first evaluation >= 475, and every
evaluation before it is inside the clock (SB3: after the update that completes each
`--sb3-eval-every` env steps, from the `_on_rollout_start` callback; ours: `--eval-every` of
ppo_vec, after an update); the "excl. eval" columns subtract the evaluation time. SAC/TD3: the clock
stops when training ends (ours: when the final evaluation starts); the final evaluation is outside.
Ours writes curves.png at each evaluation; the worker makes that plot a no-op (SB3 draws nothing).
"""

from __future__ import annotations

import argparse
import datetime
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
THRESHOLD = 475.0

# our settings (flags of the algorithm files; see the module docstring of each)
OURS = {
    "ppo": ["--env", "CartPole-v1", "--num-envs", "64", "--num-steps", "16", "--num-minibatches", "2",
            "--update-epochs", "4", "--learning-rate", "2.5e-3", "--total-steps", "200000", "--eval-every", "8192"],
    # half an update per env step (--gradient-steps 2 with 4 envs): the same final returns as 4 in 20k steps
    "sac": ["--env", "Pendulum-v1", "--num-envs", "4", "--hidden", "128", "128", "--gradient-steps", "2",
            "--total-steps", "20000", "--eval-every", "0"],
    # the zoo's schedule: 10k random steps, then one update per env step
    "td3": ["--env", "Pendulum-v1", "--num-envs", "4", "--hidden", "128", "128", "--learning-starts", "10000",
            "--total-steps", "20000", "--eval-every", "0"],
}
SB3_PPO_EVAL_EVERY = 2048
TARGETS = {"ppo": 10.0, "sac": 3.0, "td3": 3.0}
ZOO_TEXT = {
    "ppo": "RL Zoo ppo.yml CartPole-v1: n_envs 8, n_timesteps 1e5, n_steps 32, batch_size 256, gae_lambda 0.8, "
           "gamma 0.98, n_epochs 20, ent_coef 0.0, learning_rate lin_0.001, clip_range lin_0.2 (MlpPolicy 64x64)",
    "sac": "RL Zoo sac.yml Pendulum-v1: n_timesteps 20000, learning_rate 1e-3, SB3 defaults otherwise (1 env, "
           "buffer 1e6, learning_starts 100, batch 256, tau 0.005, gamma 0.99, train_freq 1, gradient_steps 1, "
           "ent_coef auto, net_arch 256x256)",
    "td3": "RL Zoo td3.yml Pendulum-v1: n_timesteps 20000, gamma 0.98, buffer_size 200000, learning_starts 10000, "
           "noise normal 0.1, gradient_steps -1, train_freq [1, episode], learning_rate 1e-3, net_arch [400, 300]",
}
ENV_OF = {"ppo": "CartPole-v1", "sac": "Pendulum-v1", "td3": "Pendulum-v1"}


def thread_env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", WANDB_MODE="disabled")


# ---------------------------------------------------------------------------------------------
# the benchmark-only SB3 environment
# ---------------------------------------------------------------------------------------------
def ensure_venv() -> Path:
    py = VENV / "bin" / "python"
    probe = ("import torch, stable_baselines3, gymnasium; print(torch.__version__.split('+')[0], "
             "stable_baselines3.__version__, gymnasium.__version__)")
    want = f"{PINS['torch']} {PINS['stable-baselines3']} {PINS['gymnasium']}"
    if py.exists():
        got = subprocess.run([str(py), "-c", probe], capture_output=True, text=True).stdout.strip()
        if got == want:
            return py
    print(f"creating {VENV.relative_to(ROOT)} (torch=={PINS['torch']}, stable-baselines3=="
          f"{PINS['stable-baselines3']}, gymnasium[classic-control]=={PINS['gymnasium']})", flush=True)
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", f"torch=={PINS['torch']}",
                    f"stable-baselines3=={PINS['stable-baselines3']}",
                    f"gymnasium[classic-control]=={PINS['gymnasium']}"], check=True)
    got = subprocess.run([str(py), "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    if got != want:
        raise RuntimeError(f"{VENV} has {got}, wanted {want}")
    return py


# ---------------------------------------------------------------------------------------------
# our side (worker process: python bench/peers.py --worker ALGO --seed S -- FLAGS...)
# ---------------------------------------------------------------------------------------------
class Reached(Exception):
    pass


def worker(algo: str, seed: int, flags: list[str], threshold: float | None, profile: bool) -> dict:
    sys.path.insert(0, str(ROOT))
    import importlib

    import gymnasium as gym
    import torch

    import common.logger
    from common.cli import cli
    from common.evaluate import PolicyFn, gym_rollouts
    from common.logger import Logger

    torch.set_num_threads(1)
    mod = importlib.import_module({"ppo": "algos.ppo_vec", "sac": "algos.sac", "td3": "algos.td3"}[algo])
    args = cli(mod.Args, argv=[*flags, "--seed", str(seed), "--save-every", "0", "--quiet", "--out-dir",
                               str(ROOT / "bench" / "runs" / "peers")],
               defaults_for=getattr(mod, "default_args", None))
    probe = gym.make(args.env)
    obs_shape = tuple(probe.observation_space.shape)
    probe.close()
    state = {"logger": None, "evals": [], "eval_start": None}

    class ClockedLogger(Logger):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            state["logger"] = self

        def log(self, step, **metrics):
            row = super().log(step, **metrics)
            if "eval_return" in metrics:
                state["evals"][-1]["step"] = int(step)
                if threshold is not None and metrics["eval_return"] >= threshold:
                    raise Reached
            return row

    def gym_evaluate(policy, env_id, episodes=10, seed=0, device="cpu", **_):
        t = time.perf_counter()
        state["eval_start"] = t - state["logger"].t0
        r = gym_rollouts(PolicyFn(policy, device, env_id=env_id, obs_shape=obs_shape), env_id, episodes, seed)
        now = time.perf_counter()
        state["evals"].append(dict(step=None, seconds=now - state["logger"].t0, eval_seconds=now - t,
                                   eval_return=r["eval_return"]))
        state["final"] = {k: v for k, v in r.items() if k != "returns"}
        return r

    mod.Logger = ClockedLogger
    mod.evaluate = gym_evaluate
    common.logger.plot_curves = lambda *a, **k: None  # curves.png at each eval: SB3 draws nothing either
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    try:
        mod.main(args)
    except Reached:
        pass
    if prof is not None:
        prof.disable()
    if state["logger"] is not None:  # metrics and checkpoint are not needed: the result is printed
        import shutil

        shutil.rmtree(state["logger"].run_dir, ignore_errors=True)
    out = dict(side="ours", algo=algo, env=args.env, seed=seed, evals=state["evals"])
    if threshold is not None:
        hit = next((e for e in state["evals"] if e["eval_return"] >= threshold), None)
        out.update(reached=hit is not None, seconds=hit["seconds"] if hit else None, step=hit["step"] if hit else None)
    else:
        out.update(seconds=state["eval_start"], final=state["final"], steps=args.total_steps)
    out["versions"] = dict(torch=torch.__version__, gymnasium=gym.__version__, threads=torch.get_num_threads())
    if prof is not None:
        import io
        import pstats

        s = io.StringIO()
        st = pstats.Stats(prof, stream=s)
        total = st.total_tt
        rows = []
        for (file, line, fn), (cc, nc, tt, ct, _) in st.stats.items():
            rows.append(dict(fn=f"{Path(file).name}:{line}({fn})", calls=nc, tottime=tt, cumtime=ct))
        out["profile"] = dict(total=total, by_tottime=sorted(rows, key=lambda r: -r["tottime"])[:15],
                              by_cumtime=sorted(rows, key=lambda r: -r["cumtime"])[:25])
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
    if proc.returncode != 0 or line is None:
        msg = f"FAILED ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}"
        print(msg, flush=True)
        return {"error": msg, "process_wall": wall}
    res = json.loads(line[len("RESULT "):])
    res["process_wall"] = wall
    res["load_before"] = load
    log.write(json.dumps(res) + "\n")
    log.flush()
    return res


def sb3_cmd(py: Path, algo: str, seed: int) -> list[str]:
    cmd = [str(py), "bench/peers_sb3.py", algo, "--seed", str(seed)]
    if algo == "ppo":
        cmd += ["--eval-every", str(SB3_PPO_EVAL_EVERY), "--threshold", f"{THRESHOLD:g}"]
    return cmd


def ours_cmd(algo: str, seed: int, profile: bool = False) -> list[str]:
    cmd = [sys.executable, "bench/peers.py", "--worker", algo, "--seed", str(seed)]
    if algo == "ppo":
        cmd += ["--threshold", f"{THRESHOLD:g}"]
    if profile:
        cmd += ["--profile", "always"]
    return cmd + ["--", *OURS[algo]]


def fmt(x, spec=".1f"):
    return "n/a" if x is None else format(x, spec)


def eval_secs(r: dict) -> float:
    """evaluation seconds inside the clock (PPO: every eval up to and including the hit)"""
    if r.get("seconds") is None:
        return float("nan")
    return sum(e["eval_seconds"] for e in r["evals"] if e["seconds"] <= r["seconds"] + 1e-9)


def median(xs):
    xs = [x for x in xs if x is not None and x == x]
    return statistics.median(xs) if xs else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", choices=["ppo", "sac", "td3"], default=["ppo", "td3", "sac"])
    p.add_argument("--ppo-seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--offpolicy-seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--profile", choices=["auto", "never", "always"], default="auto",
                   help="cProfile one run of ours (seed 1) for comparisons that miss their target (auto)")
    p.add_argument("--log", default="bench/results/peers.jsonl", help="every run's JSON result (rewritten)")
    p.add_argument("--from-log", metavar="JSONL", help="no runs: rebuild the table from a --log file")
    p.add_argument("--reuse-sb3", metavar="JSONL", help="take the SB3 results found in this --log file (same "
                   "algorithm and seed) instead of running them again (the SB3 side does not depend on our settings)")
    p.add_argument("--reuse-sb3-for", nargs="+", choices=["ppo", "sac", "td3"], default=["ppo", "sac", "td3"],
                   help="with --reuse-sb3: the comparisons whose SB3 results are reused")
    # worker mode (our side, one run)
    p.add_argument("--worker", choices=["ppo", "sac", "td3"], help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--threshold", type=float, default=None, help=argparse.SUPPRESS)
    p.add_argument("flags", nargs="*", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        out = worker(a.worker, a.seed, a.flags, a.threshold, a.profile == "always")
        print("RESULT " + json.dumps(out), flush=True)
        return

    if a.from_log:
        results, profiles = from_log(ROOT / a.from_log)
        versions = next((r[1]["versions"] for rows in results.values() for r in rows if "versions" in r[1]), {})
        print(report(results, profiles, versions, None))
        return
    t_group = time.perf_counter()
    py = ensure_venv()
    log_path = ROOT / a.log
    log_path.parent.mkdir(parents=True, exist_ok=True)
    results: dict[str, list[tuple[int, dict, dict]]] = {}
    reuse = {}
    if a.reuse_sb3:
        for line in open(ROOT / a.reuse_sb3):
            r = json.loads(line)
            if r.get("side") == "sb3" and r["algo"] in a.reuse_sb3_for:
                r["reused_from"] = a.reuse_sb3
                reuse[(r["algo"], r["seed"])] = r
    with open(log_path, "w") as log:
        for algo in a.only:
            seeds = a.ppo_seeds if algo == "ppo" else a.offpolicy_seeds
            results[algo] = []
            for seed in seeds:
                if (algo, seed) in reuse:
                    sb3 = reuse[(algo, seed)]
                    log.write(json.dumps(sb3) + "\n")
                else:
                    sb3 = run(sb3_cmd(py, algo, seed), log)
                ours = run(ours_cmd(algo, seed), log)
                results[algo].append((seed, sb3, ours))
                if algo == "ppo":
                    print(f"{algo} seed {seed}: SB3 {fmt(sb3.get('seconds'), '.2f')} s (>= {THRESHOLD:g} at "
                          f"{sb3.get('step')} steps, eval {eval_secs(sb3):.2f} s), ours {fmt(ours.get('seconds'), '.2f')} s "
                          f"(at {ours.get('step')} steps, eval {eval_secs(ours):.2f} s)", flush=True)
                else:
                    print(f"{algo} seed {seed}: SB3 {fmt(sb3.get('seconds'))} s, final "
                          f"{fmt((sb3.get('final') or {}).get('eval_return'))}; ours {fmt(ours.get('seconds'))} s, "
                          f"final {fmt((ours.get('final') or {}).get('eval_return'))}", flush=True)
        profiles = {}
        for algo, rows in results.items():
            ratio = ratio_of(rows)
            if a.profile == "always" or (a.profile == "auto" and (ratio is None or ratio < TARGETS[algo])):
                print(f"{algo}: profiling ours (seed {rows[0][0]}) under cProfile", flush=True)
                profiles[algo] = run(ours_cmd(algo, rows[0][0], profile=True), log)
    versions = next((r[1]["versions"] for rows in results.values() for r in rows if "versions" in r[1]), {})
    print(report(results, profiles, versions, time.perf_counter() - t_group))


def from_log(path: Path):
    """(results, profiles) as main() builds them, from the JSON lines of a --log file."""
    runs, profiles = {}, {}
    for line in open(path):
        r = json.loads(line)
        if "profile" in r:
            profiles[r["algo"]] = r
            continue
        runs.setdefault(r["algo"], {}).setdefault(r["seed"], {})[r["side"]] = r
    results = {algo: [(seed, d.get("sb3", {}), d.get("ours", {})) for seed, d in sorted(by_seed.items())]
               for algo, by_seed in runs.items()}
    return results, profiles


def ratio_of(rows) -> float | None:
    s, o = median([r[1].get("seconds") for r in rows]), median([r[2].get("seconds") for r in rows])
    if s is None or o is None:
        return None
    if any(r[1].get("seconds") is None or r[2].get("seconds") is None for r in rows):
        return None  # a seed that never reached the threshold: no honest median
    return s / o


def report(results, profiles, versions, total_seconds) -> str:
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    import torch

    import gymnasium

    out = [f"Stable-Baselines3 vs ours, side by side on this machine ({os.cpu_count()} CPU cores, "
           f"{cpu_name()}), one torch thread each (OMP_NUM_THREADS=1, "
           f"torch.set_num_threads(1)), one run at a time, {date}", ""]
    out += ["| comparison | seeds | SB3 s (median) | ours s (median) | ratio SB3/ours | target | SB3 result | ours result |",
            "|---|---|---:|---:|---:|---:|---|---|"]
    detail = []
    for algo, rows in results.items():
        seeds = ", ".join(str(r[0]) for r in rows)
        sb3_s = median([r[1].get("seconds") for r in rows])
        our_s = median([r[2].get("seconds") for r in rows])
        ratio = ratio_of(rows)
        met = "met" if ratio is not None and ratio >= TARGETS[algo] else "missed"
        if algo == "ppo":
            name = "PPO CartPole-v1, s to eval >= 475"
            res = lambda r: (f"{sum(1 for x in rows if x[r].get('reached'))}/{len(rows)} reached, median "
                             f"{fmt(median([x[r].get('step') for x in rows]), ',.0f')} steps")
            sb3_res, our_res = res(1), res(2)
        else:
            name = f"{algo.upper()} Pendulum-v1, s for 20k steps"
            res = lambda r: fin(rows, r)
            sb3_res, our_res = res(1), res(2)
        out.append(f"| {name} | {seeds} | {fmt(sb3_s)} | {fmt(our_s)} | {fmt(ratio, '.1f')}{'x' if ratio else ''} | >= {TARGETS[algo]:g}x "
                   f"({met}) | {sb3_res} | {our_res} |")
        # per seed
        if algo == "ppo":
            detail += ["", f"PPO CartPole-v1 per seed (clock includes every evaluation up to the first >= 475; "
                       f"excl. eval subtracts their time)", "",
                       "| seed | SB3 s | SB3 steps | SB3 evals (s) | SB3 excl. eval s | ours s | ours steps | ours evals (s) "
                       "| ours excl. eval s | ratio | ratio excl. eval |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for seed, s, o in rows:
                es, eo = eval_secs(s), eval_secs(o)
                ss, os_ = s.get("seconds"), o.get("seconds")
                ns = sum(1 for e in s.get("evals", []) if ss is not None and e["seconds"] <= ss + 1e-9)
                no = sum(1 for e in o.get("evals", []) if os_ is not None and e["seconds"] <= os_ + 1e-9)
                r1 = ss / os_ if ss and os_ else None
                r2 = (ss - es) / (os_ - eo) if ss and os_ else None
                detail.append(f"| {seed} | {fmt(ss, '.2f')} | {fmt(s.get('step'), ',')} | {ns} ({es:.2f}) | "
                              f"{fmt(ss - es if ss else None, '.2f')} | {fmt(os_, '.2f')} | {fmt(o.get('step'), ',')} | "
                              f"{no} ({eo:.2f}) | {fmt(os_ - eo if os_ else None, '.2f')} | {fmt(r1, '.1f')} | {fmt(r2, '.1f')} |")
        else:
            detail += ["", f"{algo.upper()} Pendulum-v1 per seed (20k env steps; final = deterministic 10-episode eval on "
                       "gymnasium's Pendulum-v1, episode seeds seed+10000...)", "",
                       "| seed | SB3 s | SB3 final | ours s | ours final | ratio |", "|---:|---:|---:|---:|---:|---:|"]
            for seed, s, o in rows:
                fs, fo = (s.get("final") or {}), (o.get("final") or {})
                ss, os_ = s.get("seconds"), o.get("seconds")
                detail.append(f"| {seed} | {fmt(ss)} | {fmt(fs.get('eval_return'))} +- {fmt(fs.get('eval_return_std'))} | "
                              f"{fmt(os_)} | {fmt(fo.get('eval_return'))} +- {fmt(fo.get('eval_return_std'))} | "
                              f"{fmt(ss / os_ if ss and os_ else None, '.1f')} |")
    out += detail
    out += ["", "Commands and settings (both sides: OMP_NUM_THREADS=1 MKL_NUM_THREADS=1, torch.set_num_threads(1)):"]
    for algo in results:
        out.append(f"- {algo.upper()} SB3: `bench/.venv-peers/bin/python {' '.join(sb3_cmd(Path('x'), algo, 1)[1:])}`"
                   f" (seed varied); {ZOO_TEXT[algo]}")
        flags = " ".join(OURS[algo])
        script = {"ppo": "algos/ppo_vec.py", "sac": "algos/sac.py", "td3": "algos/td3.py"}[algo]
        out.append(f"- {algo.upper()} ours: `python bench/peers.py --worker {algo} --seed 1"
                   f"{' --threshold 475' if algo == 'ppo' else ''} -- {flags}` = `python {script} {flags} --seed 1 "
                   f"--save-every 0 --quiet` with its `evaluate` replaced by gymnasium rollouts (see bench/peers.py)")
    if "ppo" in results:
        out.append(f"- PPO evaluation: SB3 every {SB3_PPO_EVAL_EVERY:,} env steps (after the update that completes them), "
                   f"ours every `--eval-every` env steps (after an update); 10 deterministic episodes on "
                   f"gymnasium.make('CartPole-v1'), episode k seeded seed+10000+k, both sides")
    reused = sorted({f"{algo.upper()} seed {r[0]}" for algo, rows in results.items() for r in rows if r[1].get("reused_from")})
    if reused:
        files = sorted({r[1]["reused_from"] for rows in results.values() for r in rows if r[1].get("reused_from")})
        out.append(f"- SB3 results reused from an earlier invocation ({', '.join(files)}), not re-run: {', '.join(reused)}")
    loads = [r[i]["load_before"] for rows in results.values() for r in rows for i in (1, 2) if "load_before" in r[i]]
    if loads:
        out.append(f"- machine load: 1-minute load average before each run {min(loads):.1f} to {max(loads):.1f} "
                   f"(1.0 = one busy core of {os.cpu_count()}; above that, other work shared the cores)")
    out.append(f"- versions: SB3 side torch {versions.get('torch', '?')}, stable-baselines3 {versions.get('sb3', '?')}, "
               f"gymnasium {versions.get('gymnasium', '?')}; our side torch {torch.__version__}, gymnasium "
               f"{gymnasium.__version__}; Python {platform.python_version()}")
    if total_seconds is not None:
        out.append(f"- group run time: {total_seconds / 60:.1f} min (`bash benchmark.sh peers`)")
    for algo, prof in profiles.items():
        if "profile" not in prof:
            continue
        pr = prof["profile"]
        out += ["", f"Profile of ours, {algo.upper()} seed {prof['seed']} (cProfile, {pr['total']:.2f} s profiled "
                f"incl. setup; profiled wall clock {fmt(prof.get('seconds'), '.2f')} s): top functions by own time", "",
                "| function | calls | own s | cumulative s |", "|---|---:|---:|---:|"]
        out += [f"| `{r['fn']}` | {r['calls']:,} | {r['tottime']:.3f} | {r['cumtime']:.3f} |" for r in pr["by_tottime"]]
        out += ["", "by cumulative time:", "", "| function | calls | own s | cumulative s |", "|---|---:|---:|---:|"]
        out += [f"| `{r['fn']}` | {r['calls']:,} | {r['tottime']:.3f} | {r['cumtime']:.3f} |" for r in pr["by_cumtime"]]
    return "\n".join(out)


def cpu_name() -> str:
    try:
        return next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def fin(rows, i) -> str:
    vals = [(r[i].get("final") or {}).get("eval_return") for r in rows]
    vals = [v for v in vals if v is not None]
    if not vals:
        return "n/a"
    return f"final {' / '.join(f'{v:.1f}' for v in vals)} (mean {statistics.mean(vals):.1f})"


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
