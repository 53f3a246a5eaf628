"""The benchmark runner (what `bash benchmark.sh GROUP` calls). A learning group's rows
(bench/experiments.py) run over their seeds, `--jobs` at a time, each its own process with one
torch thread, then the group's report (bench/report.py); any other group runs its scripts
(`SCRIPTS` below: throughput, profiles, peers with their own venvs), each writing its own table.

    python bench/run.py quick --jobs 2          # train what is missing, then the report
    python bench/run.py box2d --only sac        # rows by label, env, or ENV:LABEL
    python bench/run.py full --list             # the commands, nothing run
    python bench/run.py report quick            # the report from the saved metrics alone
    python bench/run.py gpu --only Ant-v5:ppo_vec --max-seconds 240   # a run capped (a lease)

A run whose metrics are complete (`bench/results/GROUP/runs/ENV__LABEL__sSEED.jsonl` reaches the
row's budget) is skipped; one stopped part-way (Ctrl-C, a session's end) resumes from the last
checkpoint in its run directory, `bench/runs/GROUP/ENV__LABEL__sSEED/` (not checked in). Every run
is the algorithm file's own command line, kept in `runs/commands.json` beside its metrics with the
machine it ran on and the cores it and the rest of the host kept busy (the report's machine cell).
`--max-seconds S` stops each run with Ctrl-C after S seconds: its metrics so far are copied (not
recorded as complete: the next call resumes it from its last checkpoint; a peer's adapter without
checkpoints, any but `experiments.RESUMES`, starts again). A row on every core
(`threads=0`) runs alone, after the rest; a row with `device="cuda"` on a machine without CUDA
stops the runner before anything runs (exit 2).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import experiments  # noqa: E402
from experiments import Row  # noqa: E402
from report import load_rows  # noqa: E402

RESULTS = ROOT / "bench" / "results"  # what is checked in: metrics and reports
RUNS = ROOT / "bench" / "runs"  # run directories, checkpoints included (not checked in)


def metrics_file(row: Row, seed: int) -> Path:
    return RESULTS / row.group / "runs" / f"{row.key(seed)}.jsonl"


def whole(path: Path, started: float, seconds: float) -> None:
    """A run's metrics with `wall` (seconds since its process started, from the rows' wall clock)
    and, on its last row, `process_seconds` (the whole process, as a peer's adapter writes it)."""
    rows = load_rows(path)
    for r in rows:
        if "time" in r:
            r["wall"] = round(r["time"] - started, 3)
    rows[-1]["process_seconds"] = round(seconds, 3)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def shown(row: Row, seed: int) -> str:
    """The run's command as a user types it (a peer's: with its venv's interpreter)."""
    name = row.peer or row.venv
    python = f"bench/.venv-{name}/bin/python" if name in VENVS else "python"
    n = "$(nproc)" if row.threads == 0 else row.threads  # (0: every core)
    threads = f"OMP_NUM_THREADS={n} " if row.threads != 1 else ""
    if row.algo in CHECKOUTS:
        threads += f"{CHECKOUTS[row.algo][0]}=<checkout of {CHECKOUTS[row.algo][1]}> "
    return threads + " ".join(row.command(seed, "runs", python))


def complete(row: Row, seed: int) -> bool:
    """It finished: runs/commands.json records this command as done (a file may stop a little
    short of `--total-steps`, at its last whole iteration), or records the run as migrated from an
    older script (`migrated_from`: measured history, kept), or its metrics reach the budget with a
    final evaluation."""
    path = metrics_file(row, seed)
    if not path.exists():
        return False
    meta = path.parent / "commands.json"
    done = json.loads(meta.read_text()).get(row.key(seed), {}) if meta.exists() else {}
    if done.get("command") == shown(row, seed) or "migrated_from" in done:
        return True
    last = load_rows(path)[-1:]
    return bool(last) and last[0]["step"] >= row.steps and last[0].get("eval_return") is not None


def run_one(
    row: Row, seed: int, python: str, max_seconds: float | None = None
) -> tuple[float, bool]:
    """Train (or resume) one seed of `row`; copy its metrics into bench/results. (wall seconds,
    resumed). Past `max_seconds` of wall time the run gets Ctrl-C (our files stop with their last
    checkpoint intact): its metrics so far are copied, and it is not recorded as complete; so too
    for a run Ctrl-C'd from outside."""
    out = RUNS / row.group / row.key(seed)
    # (a run directory is `out/ENV__...`, `out/MinAtar/GAME__...` for an id with a namespace)
    # (a peer's adapter that resumes, experiments.RESUMES: its checkpoint.json naming its files)
    ckpt = "checkpoint.json" if row.peer else "checkpoint.pt"
    ckpts = sorted(out.rglob(ckpt), key=lambda p: p.stat().st_mtime)
    name = row.peer or row.venv  # (the population adapter: the project's interpreter)
    cmd = row.command(seed, str(out), venv(name, python) if name in VENVS else python)
    if ckpts:  # stopped part-way: on from its checkpoint, in its own run directory
        cmd += ["--resume", str(ckpts[-1])]
    elif out.exists():
        shutil.rmtree(out)
    threads = str(row.threads or os.cpu_count() or 1)
    env = dict(os.environ, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads, WANDB_MODE="disabled")
    t0, started, busy0 = time.perf_counter(), time.time(), host_busy()
    # SIGINT back to its default in the child: a shell's background job starts with it ignored, and
    # the cap's Ctrl-C must reach the run
    with tempfile.TemporaryFile("w+", errors="replace") as errf:
        proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=errf,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        # reaped here (os.wait4), not by Popen: its CPU seconds come with its exit status
        capped, usage = False, None
        while usage is None:
            block = max_seconds is None or capped
            done, status, ru = os.wait4(proc.pid, 0 if block else os.WNOHANG)
            if done:
                proc.returncode, usage = os.waitstatus_to_exitcode(status), ru
            elif time.perf_counter() - t0 > max_seconds:
                # (os.kill, not Popen's send_signal, whose poll() could reap it first: an exited
                # child stays a zombie until the wait4 below, so the pid is still its own)
                capped = True
                os.kill(proc.pid, signal.SIGINT)
            else:
                time.sleep(0.05)
        wall = time.perf_counter() - t0
        errf.seek(0)
        err = errf.read()
    # a run stopped by Ctrl-C exits 130 (or by the signal); 0: it had ended as the cap came
    capped = capped and proc.returncode != 0
    # the cores it kept busy (its own children, such as async sub-env workers, included once it
    # has reaped them), and those the rest of the host did meanwhile (/proc/stat, Linux): a speed
    # column is comparable only between runs that had the same share of the machine
    cores = (usage.ru_utime + usage.ru_stime) / wall
    others = (host_busy() - busy0) / wall - cores if busy0 is not None else None
    # Ctrl-C'd from outside (its process, or the terminal's whole group): stopped as a cap stops it
    stopped = "capped" if capped else "interrupted"
    capped = capped or proc.returncode in (130, -signal.SIGINT)
    if proc.returncode != 0 and not capped:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{err[-3000:]}")
    dirs = [p.parent for p in out.rglob("metrics.jsonl")]
    run_dir = max(dirs, key=lambda p: p.stat().st_mtime, default=out)
    dest = metrics_file(row, seed)
    if capped and not (run_dir / "metrics.jsonl").exists():
        print(f"  {row.key(seed)}: {stopped} after {wall:.0f} s, before it logged", flush=True)
        return wall, bool(ckpts)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / "metrics.jsonl", dest)
    if not (row.peer or ckpts or capped):  # one whole process of ours: its wall clock
        whole(dest, started, wall)
    if row.gym_final and not row.peer and not capped:  # (a peer's adapter writes its own)
        with open(dest, "a") as f:
            f.write(json.dumps(gym_final(run_dir / "checkpoint.pt", row.env, python)) + "\n")
    rows = load_rows(dest)
    evals = [r for r in rows if r.get("eval_return") is not None]
    got = f"eval {evals[-1]['eval_return']:.1f} at {evals[-1]['step']:,} steps" if evals else ""
    if capped:
        again = (
            "resumes it from its last checkpoint"
            if ckpt == "checkpoint.pt" or (row.peer in experiments.RESUMES and row.save_every)
            else "runs it again (this peer's adapter keeps no checkpoint)"
        )
        print(
            f"  {row.key(seed)}: {stopped} after {wall:.0f} s at {rows[-1]['step']:,} env steps "
            f"({got or 'no evaluation yet'}), its metrics so far copied, not complete: `python "
            f"bench/run.py {row.group} --only {row.env}:{row.label} --seeds {seed}` {again}",
            flush=True,
        )
    else:
        print(f"  {row.key(seed)}: {got}, {wall:.0f} s", flush=True)
    record(row, seed, wall, bool(ckpts), capped, cores, others)
    return wall, bool(ckpts)


def host_busy() -> float | None:
    """CPU seconds the whole host (a container's too) has spent busy since boot, all cores, from
    /proc/stat: user, nice, system, irq and softirq (not idle, I/O wait, or a hypervisor's steal);
    None where there is none."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except (OSError, ValueError):
        return None
    user, nice, system, _idle, _iowait, irq, softirq = fields[:7]
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


RECORDING = threading.Lock()


def gym_final(checkpoint: Path, env_id: str, python: str) -> dict:
    """The final policy on `gymnasium.make(env_id)`, 10 episodes from experiments.GYM_SEED, as a
    metrics row (`gym_return`, `gym_return_std`, `gym_returns`)."""
    code = (
        "import json, sys; from tools.evaluate import gym_rollouts, load_policy; "
        "policy, ckpt = load_policy(sys.argv[1]); "
        "r = gym_rollouts(policy, sys.argv[2], 10, seed=int(sys.argv[3])); "
        "print(json.dumps(dict(step=ckpt['global_step'], gym_return=r['eval_return'], "
        "gym_return_std=r['eval_return_std'], gym_returns=r['returns'])))"
    )
    args = [python, "-c", code, str(checkpoint), env_id, str(experiments.GYM_SEED)]
    out = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def record(
    row: Row, seed: int, wall: float, resumed: bool, capped: bool = False,
    cores: float | None = None, others: float | None = None,
) -> None:  # fmt: skip
    """A finished run's command (as a user types it), wall seconds (of its last part, if it
    resumed: its metrics' `seconds` are the whole run's training clock), machine, and the cores it
    kept busy and the rest of the host kept busy meanwhile (over that part), in
    runs/commands.json, as soon as it finishes; a capped run's entry goes (its metrics are new)."""
    path = RESULTS / row.group / "runs" / "commands.json"
    where = dict(machine=machine(row.flags.get("device", "auto") != "cpu"),
                 date=time.strftime("%Y-%m-%d %H:%M", time.gmtime()))  # fmt: skip
    with RECORDING:
        meta = json.loads(path.read_text()) if path.exists() else {}
        meta.pop(row.key(seed), None)
        if not capped:
            meta[row.key(seed)] = {
                "command": shown(row, seed),
                "wall_seconds": round(wall, 1),
                "resumed": resumed,
                **where,
                **({"cores": round(cores, 2)} if cores is not None else {}),
                **({"other_cores": round(max(others, 0.0), 2)} if others is not None else {}),
            }
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")


@functools.cache
def machine(gpu: bool) -> str:
    """Where the runs ran: the GPU (for a row not on the CPU, where CUDA is present), the cores and
    torch's version."""
    import torch

    name = f"{torch.cuda.get_device_name(0)}, " if gpu and torch.cuda.is_available() else ""
    return f"{name}{os.cpu_count()} CPU cores, torch {torch.__version__}"


# group -> (what it measures, its commands: a script of bench/ and its arguments, or a group)
SCRIPTS: dict[str, tuple[str, list[list[str]]]] = {
    "envs": ("env-steps/s of our torch CartPole vs gymnasium's SyncVectorEnv, N = 1 ... 65536",
             [["micro/env_throughput.py"]]),
    "ensemble": ("REDQ-style critic updates/s: one batched EnsembleMLP vs a loop over 10 critics",
                 [["micro/ensemble_speed.py"]]),
    "mujoco": ("Ant-v5 env-steps/s: batch backend, MuJoCo Warp, gymnasium sync, N = 64/1024/4096",
               [["micro/mujoco_throughput.py"]]),
    "compile": ("--compile on vs off: PPO and SAC env-steps/s, one thread, warm-up excluded",
                [["micro/compile_speed.py"]]),
    "threads": ("two runs at once on a CPU, --threads auto vs a thread a core (~25 min)",
                [["micro/threads.py"]]),
    "tensordict": ("the PPO and PQN rows with TensorDict storage instead of Batch (own venv)",
                   [["@td", "micro/tensordict_overhead.py"]]),
    "minatar-speed": ("MinAtar stepping: our batched port vs the minatar package",
                      [["micro/minatar_speed.py"]]),
    "elastic": ("population on two torchrun nodes: one joins late, then is SIGKILLed (~6 min)",
                [["elastic_population.sh"]]),
    "offpolicy-update": ("SAC's and TD3's step + update beside CleanRL's files (CLEANRL=checkout) "
                         "and the matrix-product floor",
                         [["micro/offpolicy_update.py", "--cleanrl", "$CLEANRL"]]),
    "locomotion-profile": ("where the time goes, ppo_vec vs rsl_rl on Ant and Humanoid",
                           [["micro/locomotion_profile.py", "--task", t]
                            for t in ("Ant", "Humanoid")]),
}  # fmt: skip
# what a learning group runs after its rows
AFTER = {
    "quick": [["stock_trading.py", "--from-group", "quick"], ["envs"]],
    "full": [["stock_trading.py", "--from-group", "full"], *([g] for g in (
        "envs", "asymmetric", "ensemble", "offpolicy", "hterm", "mujoco", "marl", "pipeline",
        "population"))],
    # MuJoCo Warp's env-steps/s beside the CPU batch backend, and where a PPO iteration's time goes
    "gpu": [["micro/mujoco_throughput.py", "--env", "Ant-v5", "Humanoid-v5", "--sizes", "1024",
             "4096", "16384", "--backends", "batch", "warp", "--device", "cuda", "--out",
             "bench/results/gpu/env.md"], ["micro/gpu_profile.py"]],
}  # fmt: skip


def groups_help() -> str:
    learning = [
        f"  {g:<17} {experiments.ABOUT.get(g, '')}"
        for g in experiments.groups()
        if g not in SCRIPTS
    ]
    other = [f"  {g:<17} {about}" for g, (about, _) in SCRIPTS.items()]
    return "\n".join(
        ["learning groups (rows of bench/experiments.py; resumable, skip what is done):",
         *learning, "other groups:", *other,
         "  report GROUP      a group's tables and figures from its saved results, no training"]
    )  # fmt: skip


# the peers' venvs (bench/.venv-NAME): what pip installs, and whether the project's own packages
# come along (a .pth to this venv's site-packages: for a script of ours that needs one more package)
VENVS = {
    "sb3": (["torch==2.13.0", "stable-baselines3==2.9.2",
             "gymnasium[classic-control,box2d]==1.4.0"], False),
    "rsl_rl": (["torch==2.13.0", "rsl-rl-lib==5.5.1", "gymnasium[mujoco]==1.4.0", "mujoco>=4.0",
                "numpy>=1.26", "tyro>=0.9"], False),  # (its adapter imports our envs, as ours do)
    # every ray[rllib] release from 2.54 pins a gymnasium older than ours
    "rllib": (["torch==2.13.0", "ray[rllib]==2.60.0", "gymnasium[mujoco]==1.2.2", "mujoco==4.0.0"],
              False),
    "td": (["--no-deps", "tensordict==0.15.3", "pyvers==0.2.3"], True),
    # PureJaxRL's stack (jax 0.11 and later need Python 3.12; the project's is 3.11)
    "jax": (["jax[cpu]==0.10.2", "gymnax==1.0.1", "flax==0.12.8", "optax==0.2.8",
             "distrax==0.1.9", "gymnasium[classic-control]==1.3.0"], False),
    # the project's requirements, then Genesis (whose pins conflict with skfolio's: its own venv)
    "genesis": (["-r", str(ROOT / "requirements.txt"), "genesis-world==1.4.5"], False),
}  # fmt: skip


# the peer rows whose adapter runs a file of their repository as it is: (the variable naming the
# checkout, the repository)
CHECKOUTS = {"jax:ppo": ("PUREJAXRL", "luchris429/purejaxrl"),
             "jax:pqn": ("PUREJAXQL", "mttga/purejaxql")}  # fmt: skip


def peer_module(name: str):
    """bench/peers/<name>.py as a module (named `<name>_peer`: the file is named after the package
    it runs, so `import <name>` would find the package, not it)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        f"{name}_peer", ROOT / "bench" / "peers" / f"{name}.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def venv(name: str, python: str = sys.executable) -> str:
    """The interpreter of bench/.venv-NAME, built on first use (`VENVS`; a few minutes)."""
    path = ROOT / "bench" / f".venv-{name}"
    packages, with_project = VENVS[name]
    py = path / "bin" / "python"
    if not (path / "ready").exists():
        print(f"building {path.relative_to(ROOT)}: pip install {' '.join(packages)}", flush=True)
        subprocess.run([python, "-m", "venv", str(path)], check=True)
        if with_project:
            site = "import site; print(site.getsitepackages()[0])"
            ours, theirs = (
                subprocess.run([p, "-c", site], capture_output=True, text=True).stdout.strip()
                for p in (python, str(py))
            )
            Path(theirs, "project.pth").write_text(ours + "\n")
        pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *packages], check=True)
        (path / "ready").write_text(" ".join(packages) + "\n")
    return str(py)


def run_commands(commands: list[list[str]], python: str, dry: bool) -> None:
    """Each command: a group's name (run as a group), or a script of bench/ and its arguments
    (`@NAME` first: with bench/.venv-NAME's interpreter, `VENVS`)."""
    for cmd in commands:
        py = python
        if cmd[0].startswith("@"):
            py, cmd = (python if dry else venv(cmd[0][1:], python)), cmd[1:]
        if cmd[0] in SCRIPTS or cmd[0] in experiments.groups():
            main([cmd[0], "--python", python, *(["--list"] if dry else [])])
            continue
        exe = ["bash"] if cmd[0].endswith(".sh") else [py]
        args = [os.path.expandvars(a) for a in cmd[1:]]
        unset = [a[1:] for a in args if a.startswith("$")]
        if unset and not dry:
            raise SystemExit(f"error: bench/{cmd[0]} needs {', '.join(unset)} set (its --help)")
        full = [*exe, f"bench/{cmd[0]}", *args]
        print(" ".join(full), flush=True)
        if (
            not dry
            and subprocess.run(full, cwd=ROOT, env=dict(os.environ, PYTHON=python)).returncode
        ):
            raise SystemExit(f"error: {' '.join(full)} failed")


def selected(rows: list[Row], only: list[str] | None) -> list[Row]:
    if not only:
        return rows
    return [r for r in rows if r.env in only or r.label in only or f"{r.env}:{r.label}" in only]


def main(argv=None) -> None:
    from common.cli import ArgumentParser

    p = ArgumentParser(
        description=__doc__,
        epilog=groups_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    names = list(dict.fromkeys([*experiments.groups(), *SCRIPTS, "report"]))
    p.add_argument("group", metavar="GROUP", choices=names, help="a group below, or report")
    p.add_argument("report_group", nargs="?", metavar="GROUP", help="with report: the group")
    p.add_argument("--jobs", type=int, default=2, help="runs at a time (each one torch thread)")
    p.add_argument(
        "--only", nargs="*", help="only these labels, envs or ENV:LABEL pairs (no AFTER scripts)"
    )
    p.add_argument("--seeds", type=int, nargs="*", help="only these seeds")
    p.add_argument("--list", action="store_true", help="print the commands, run nothing")
    p.add_argument("--setup", action="store_true", help="build the venvs its rows need, no runs")
    p.add_argument("--force", action="store_true", help="train complete runs again")
    p.add_argument("--python", default=sys.executable, help="interpreter of the algorithm files")
    p.add_argument(
        "--max-seconds",
        type=float,
        help="stop each run after this many seconds (Ctrl-C): its metrics so far are kept and the "
        "next call resumes it from its last checkpoint",
    )
    a = p.parse_args(argv)
    if a.group == "report":
        target = a.report_group or p.error("report needs a GROUP")
        return run_commands([["report.py", target]], a.python, a.list)
    if a.group in SCRIPTS:
        return run_commands(SCRIPTS[a.group][1], a.python, a.list)
    rows = selected(experiments.group(a.group), a.only)
    # seed by seed (with --jobs 2, a seed's two sides of a comparison run at the same time)
    seeds = sorted({s for r in rows for s in r.seeds})
    todo = [(r, s) for s in seeds for r in rows if s in r.seeds and (not a.seeds or s in a.seeds)]
    if a.setup:
        for name in sorted({r.peer or r.venv for r in rows} & set(VENVS)):
            print(venv(name, a.python))
        return
    if a.list:
        for r, s in todo:
            print(shown(r, s))
        return run_commands([] if a.only else AFTER.get(a.group, []), a.python, True)
    for algo, (var, repo) in CHECKOUTS.items():  # a peer run from a checkout of its repository
        # (asked before what is done is skipped: `report GROUP` needs none)
        if any(r.algo == algo for r, _ in todo) and not os.environ.get(var):
            from common.errors import UserError

            raise UserError(f"the {algo} rows run bench/peers/{algo.split(':')[0]}.py from a "
                            f"checkout of {repo}: set {var}=/path/to/that/checkout")  # fmt: skip
    if a.force:
        for r, s in todo:
            shutil.rmtree(RUNS / r.group / r.key(s), ignore_errors=True)
    todo = [(r, s) for r, s in todo if a.force or not complete(r, s)]
    need_gpu = sorted({f"{r.env}:{r.label}" for r, _ in todo if r.flags.get("device") == "cuda"})
    if need_gpu:
        import torch

        from common.errors import UserError

        if not torch.cuda.is_available():
            raise UserError(
                f"no GPU: torch sees no CUDA device here, and {len(need_gpu)} rows of group "
                f"{a.group} to train run on one ({', '.join(need_gpu[:3])}"
                f"{', ...' if len(need_gpu) > 3 else ''}); run them on a machine with CUDA, or "
                f"`python bench/run.py report {a.group}` for the table of the saved metrics"
            )
    # a row on every core (threads=0) runs alone, after the others have run `--jobs` at a time
    alone = [(r, s) for r, s in todo if r.threads == 0]
    shared = [(r, s) for r, s in todo if r.threads != 0]
    jobs = max(1, a.jobs)
    then = f", then {len(alone)} alone on every core" if alone else ""
    print(
        f"group {a.group}: {len(todo)} runs to train: {len(shared)} with {jobs} at a time{then}",
        flush=True,
    )
    for batch, n in ((shared, jobs), (alone, 1)):
        with ThreadPoolExecutor(n) as pool:  # each run is its own process
            list(pool.map(lambda rs: run_one(*rs, a.python, a.max_seconds), batch))
    # the report in a fresh process: one that reads bench/experiments.py now, not the table this
    # runner loaded hours ago (a row added meanwhile would be dropped from the group's report)
    run_commands([["report.py", a.group]], a.python, False)
    run_commands([] if a.only else AFTER.get(a.group, []), a.python, False)


if __name__ == "__main__":
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
