"""What one GPU does (issue 19): env-steps/s of MuJoCo Warp, the flagship PPO command end to end,
PPO on CartPole at 65536 envs, and rsl_rl on the same MuJoCo Warp env, into bench/results/gpu.md.

    python bench/gpu.py             # every part below, then the report (~90 minutes on one H200)
    python bench/gpu.py env         # Ant-v5 and Humanoid-v5 env-steps/s: MuJoCo Warp at N = 1024,
                                    # 4096, 16384 on the GPU, and the CPU batch backend (every core)
                                    # at 4096 for the ratio
    python bench/gpu.py ppo-ant     # algos/ppo_vec.py --env Ant --num-envs 4096 --device cuda
                                    # (each iteration one CUDA graph, common/graphs.py):
                                    # env-steps/s, time to an eval >= 3000, gymnasium's score
    python bench/gpu.py ppo-ant-eager     # the same with --no-capture (a kernel launch per op)
    python bench/gpu.py ppo-ant-compile   # the same, --compile (a CUDA graph per compiled function)
    python bench/gpu.py ppo-ant-16k       # Ant with --num-envs 16384
    python bench/gpu.py ppo-humanoid      # Humanoid with --num-envs 4096: time to an eval >= 5000
    python bench/gpu.py ppo-humanoid-eager   # the same with --no-capture
    python bench/gpu.py ppo-ant-adaptive    # ppo-ant with the KL-adaptive rate from 1e-3 (opt-in)
    python bench/gpu.py ppo-humanoid-adaptive   # the same on Humanoid
    python bench/gpu.py ppo-humanoid-16k     # Humanoid with --num-envs 16384
    python bench/gpu.py cartpole    # ppo_vec on CartPole-v1 with 65536 envs (16 steps a rollout, 1M
                                    # samples an update): env-steps/s, time to an eval >= 475
    python bench/gpu.py rsl_rl      # rsl_rl (IsaacLab's classic Ant config)
                                    # on the same Warp Ant, 4096 envs
    python bench/gpu.py rsl_rl-16k        # the same with 16384 envs (beside ppo-ant-16k)
    python bench/gpu.py rsl_rl-humanoid   # rsl_rl on Warp Humanoid, 4096 envs (beside ppo-humanoid)
    python bench/gpu.py rsl_rl-humanoid-16k   # the same with 16384 envs (beside ppo-humanoid-16k)
    python bench/gpu.py profile     # where ppo_vec's time goes on the GPU (Ant x4096):
                                    # torch.profiler over 6 PPO iterations, top ops by GPU and CPU
                                    # time, launches and syncs per iteration
    python bench/gpu.py td3-ant     # algos/fast_td3.py --env Ant --num-envs 4096 (each step's
                                    # updates one CUDA graph): env-steps/s
    python bench/gpu.py td3-ant-eager     # the same with --no-capture
    python bench/gpu.py report      # bench/results/gpu.md from whatever has run (no GPU needed)

Each part writes bench/results/gpu/<part>.json and fits in 10 minutes on one H100 (so that a lent
machine can run them one call at a time). The training parts run the algorithm files and
bench/peers/rsl_rl.py as the benchmark runner does (the same clock: evaluations timed and left
out; final evaluation on gymnasium's own env, 10 episodes). On a machine without CUDA every
measuring part prints that no GPU is present and exits 0.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

OUT = ROOT / "bench" / "results" / "gpu"
RUNS = ROOT / "bench" / "runs" / "gpu"
ENV_SIZES = (1024, 4096, 16384)
# the budgets: sized for about 5 minutes of training each at the target of 300k env-steps/s
ANT = dict(steps=100_000_000, eval_every=1_048_576, num_envs=4096)
CARTPOLE = dict(steps=200_000_000, eval_every=8_388_608, num_envs=65536)
ANT_TARGET, HUMANOID_TARGET, CARTPOLE_TARGET = 3000.0, 5000.0, 475.0
ADAPTIVE = ["--lr-schedule", "adaptive", "--learning-rate", "1e-3"]
# the ppo_vec parts: (task, envs, flags, the row's name)
PPO = {
    "ppo-ant": ("Ant", 4096, [], "captured"),
    "ppo-ant-eager": ("Ant", 4096, ["--no-capture"], "eager"),
    "ppo-ant-compile": ("Ant", 4096, ["--compile"], "compile"),
    "ppo-ant-16k": ("Ant", 16384, [], "captured"),
    "ppo-humanoid": ("Humanoid", 4096, [], "captured"),
    "ppo-humanoid-eager": ("Humanoid", 4096, ["--no-capture"], "eager"),
    "ppo-humanoid-16k": ("Humanoid", 16384, [], "captured"),
    # Rudin et al.'s KL-adaptive rate from 1e-3 beside the default 3e-4 annealed to 0 (the
    # default for a few hours of 2026-11-29; bench/NOTES.md, "The GPU defaults' learning rate")
    "ppo-ant-adaptive": ("Ant", 4096, ADAPTIVE, "adaptive lr"),
    "ppo-humanoid-adaptive": ("Humanoid", 4096, ADAPTIVE, "adaptive lr"),
}
# fast_td3's parts, the same shape (issue 59: its updates captured as one graph a step, or eager);
# its file defaults otherwise (4 updates of 1024 a step); learning starts after 5 steps of the
# 4096 envs (the file asks for at least n_step of them)
_FAST = ["--learning-starts", "20480"]
FAST_TD3 = {
    "td3-ant": ("Ant", 4096, _FAST, "captured"),
    "td3-ant-eager": ("Ant", 4096, [*_FAST, "--no-capture"], "eager"),
}
# the rsl_rl parts: (task, envs), each beside the ppo_vec part of the same shape
RSL_RL = {
    "rsl_rl": ("Ant-v5", 4096, "ppo-ant"),
    "rsl_rl-16k": ("Ant-v5", 16384, "ppo-ant-16k"),
    "rsl_rl-humanoid": ("Humanoid-v5", 4096, "ppo-humanoid"),
    "rsl_rl-humanoid-16k": ("Humanoid-v5", 16384, "ppo-humanoid-16k"),
}
PARTS = ("env", *PPO, "cartpole", *RSL_RL, "profile", *FAST_TD3)


def have_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def machine() -> str:
    import torch

    from common.device import available_cores

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{gpu}, {available_cores()} CPU cores, torch {torch.__version__}"


def save(part: str, data: dict) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    data = dict(data, machine=machine(), date=time.strftime("%Y-%m-%d %H:%M"))
    (OUT / f"{part}.json").write_text(json.dumps(data, indent=1))
    print(f"wrote {(OUT / f'{part}.json').relative_to(ROOT)}", flush=True)


# ---- parts ---------------------------------------------------------------------------------------
def part_env(seconds: float) -> None:
    from micro.mujoco_throughput import ours

    from common.device import available_cores

    rows = []
    for task in ("Ant-v5", "Humanoid-v5"):
        cpu = ours(task, 4096, seconds, "batch", nthread=available_cores(), device="cpu")
        rows.append(
            {"task": task, "backend": "batch (CPU, every core)", "num_envs": 4096, "sps": cpu}
        )
        print(f"{task} batch CPU x4096: {cpu:,.0f} env-steps/s", flush=True)
        for n in ENV_SIZES:
            sps = ours(task, n, seconds, "warp", device="cuda")
            rows.append(
                {
                    "task": task,
                    "backend": "warp (CUDA)",
                    "num_envs": n,
                    "sps": sps,
                    "vs_cpu_4096": sps / cpu,
                }
            )
            print(
                f"{task} warp CUDA x{n}: {sps:,.0f} env-steps/s ({sps / cpu:.1f}x the CPU at 4096)",
                flush=True,
            )
    save("env", {"seconds_per_cell": seconds, "rows": rows})


def _run_capped(cmd: list[str], log: Path, max_seconds: float | None, env: dict) -> str:
    """Runs `cmd` with its output in `log`; past `max_seconds` it gets Ctrl-C (the run stops where
    it is). Returns "done" or "capped"; a failure raises."""
    log.parent.mkdir(parents=True, exist_ok=True)
    print(" ".join(cmd[1:]), flush=True)
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
        try:
            rc = proc.wait(timeout=max_seconds)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            proc.wait()
            return "capped"
    if rc != 0:
        raise SystemExit(f"training run failed (exit {rc}); see {log}")
    return "done"


def _partial(run_dir_glob: str, command: str) -> dict:
    """What a capped ppo_vec run logged (its metrics.jsonl, evaluations on our env): no final
    gymnasium score."""
    runs = sorted(RUNS.glob(run_dir_glob), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise SystemExit(f"capped before the run wrote anything ({RUNS / run_dir_glob})")
    curve, train, steps, _ = _read_metrics(runs[-1] / "metrics.jsonl")
    return _capped_result(command, steps, train, curve)


def _read_metrics(path: Path) -> tuple[list[dict], float, int, dict]:
    """A run's metrics.jsonl (ours or a peer adapter's): its evaluations, each with the training
    seconds so far (evaluations left out), the training seconds and env steps at its last row, and
    its final gymnasium row ({} if none)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    curve, spent, gym = [], 0.0, {}
    for r in rows:
        if "gym_return" in r:
            gym = r
        elif "eval_return" in r:
            spent += r.get("eval_seconds", 0.0)
            curve.append(dict(step=r["step"], seconds=r["seconds"], eval_return=r["eval_return"],
                              train_seconds=r["seconds"] - spent))  # fmt: skip
    timed = [r for r in rows if "seconds" in r]
    return curve, timed[-1]["seconds"] - spent, timed[-1]["step"], gym


def _capped_result(command: str, steps: int, train: float, curve: list[dict]) -> dict:
    return {
        "command": command + " (capped)",
        "steps": steps,
        "train_seconds": train,
        "sps": steps / train,
        "curve": curve,
        "eval_return": curve[-1]["eval_return"] if curve else None,
        "gym_return": None,
        "gym_return_std": None,
    }


def _train(
    algo_flags: list[str],
    out: Path,
    log: Path,
    max_seconds: float | None = None,
    algo: str = "ppo_vec",
) -> dict:
    """`algos/<algo>.py` on these flags (every core for the host side), stopped after
    `max_seconds` if given (then what its metrics.jsonl holds, without the final gymnasium score);
    its final policy on gymnasium's env as the benchmark runner scores it (bench/run.py)."""
    import run as runner

    threads = os.cpu_count() or 1
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), WANDB_MODE="disabled")
    extra = ["--device", "cuda", "--save-every", "0", "--quiet", "--out-dir", str(RUNS)]
    cmd = [sys.executable, str(ROOT / "algos" / f"{algo}.py"), *algo_flags, *extra]
    env_id = algo_flags[algo_flags.index("--env") + 1]
    seed = algo_flags[algo_flags.index("--seed") + 1]
    command = f"python algos/{algo}.py " + " ".join(algo_flags)
    if _run_capped(cmd, log, max_seconds, env) == "capped":
        return _partial(f"{env_id}__{algo}__s{seed}__*", command)
    run_dir = max(RUNS.glob(f"{env_id}__{algo}__s{seed}__*"), key=lambda p: p.stat().st_mtime)
    curve, train, steps, _ = _read_metrics(run_dir / "metrics.jsonl")
    gym_id = env_id if "-v" in env_id else f"{env_id}-v5"  # `Ant`: the batched Ant-v5
    gym = runner.gym_final(run_dir / "checkpoint.pt", gym_id, sys.executable)
    r = _capped_result(command, steps, train, curve)
    r.update(command=command, gym_return=gym["gym_return"], gym_return_std=gym["gym_return_std"])
    return r


def _reach(curve: list[dict], level: float) -> dict | None:
    return next((c for c in curve if c["eval_return"] >= level), None)


def _summary(r: dict, level: float) -> dict:
    hit = _reach(r["curve"], level)
    return {
        "command": r["command"],
        "steps": r["steps"],
        "train_seconds": r["train_seconds"],
        "sps": r["sps"],
        "eval_return": r["eval_return"],
        "gym_return": r["gym_return"],
        "gym_return_std": r["gym_return_std"],
        "level": level,
        "reached_seconds": hit["train_seconds"] if hit else None,
        "reached_step": hit["step"] if hit else None,
        "curve": r["curve"],
    }


def part_ppo(part: str, steps: int, max_seconds: float | None = None) -> None:
    """A ppo_vec part, or a fast_td3 one."""
    algo = "fast_td3" if part in FAST_TD3 else "ppo_vec"
    task, num_envs, extra, name = PPO.get(part) or FAST_TD3[part]
    level = HUMANOID_TARGET if task == "Humanoid" else ANT_TARGET
    flags = [
        "--env",
        task,
        "--num-envs",
        str(num_envs),
        "--total-steps",
        str(steps),
        "--seed",
        "1",
        "--eval-every",
        str(ANT["eval_every"]),
        *extra,
    ]
    tag = part.replace("-", "_")
    r = _summary(
        _train(flags, RUNS / f"{tag}.json", OUT / "logs" / f"{tag}.log", max_seconds, algo), level
    )
    print(
        f"{algo} {task} x{num_envs} {name}: {r['sps']:,.0f} env-steps/s, gym {_score(r, False)}, "
        f"eval >= {level:.0f} at {_secs(r['reached_seconds'])}",
        flush=True,
    )
    save(part, {name: r})


def part_cartpole(steps: int, max_seconds: float | None = None) -> None:
    flags = [
        "--env",
        "CartPole-v1",
        "--num-envs",
        str(CARTPOLE["num_envs"]),
        "--total-steps",
        str(steps),
        "--seed",
        "1",
        "--eval-every",
        str(CARTPOLE["eval_every"]),
        "--num-steps",
        "16",
        "--num-minibatches",
        "4",
    ]
    r = _train(flags, RUNS / "ppo_cartpole.json", OUT / "logs" / "ppo_cartpole.log", max_seconds)
    save("cartpole", {"ppo_vec": _summary(r, CARTPOLE_TARGET)})


def part_rsl_rl(part: str, steps: int, max_seconds: float | None = None) -> None:
    task, num_envs, _ = RSL_RL[part]
    if importlib.util.find_spec("rsl_rl") is not None:
        py = sys.executable  # the project venv has rsl-rl-lib (a test-only requirement)
    else:
        import run as runner

        py = runner.venv("rsl_rl")
    tag = {"rsl_rl": "rsl_rl_ant"}.get(part, part.replace("-", "_"))
    log = OUT / "logs" / f"{tag}.log"
    threads = os.cpu_count() or 1
    cmd = [
        py,
        str(ROOT / "bench" / "peers" / "rsl_rl.py"),
        "ppo",
        "--env",
        task,
        "--seed",
        "1",
        "--total-steps",
        str(steps),
        "--num-envs",
        str(num_envs),
        "--eval-every",
        str(ANT["eval_every"]),
        "--device",
        "cuda",
        "--backend",
        "warp",
        "--threads",
        str(threads),
        "--out-dir",
        str(RUNS / tag),
    ]
    command = "bench/peers/rsl_rl.py " + " ".join(cmd[2:-2])
    capped = _run_capped(cmd, log, max_seconds, dict(os.environ, OMP_NUM_THREADS=str(threads)))
    metrics = RUNS / tag / f"{task}__rsl_rl__s1" / "metrics.jsonl"
    if not metrics.exists() or not metrics.read_text().strip():
        raise SystemExit(
            f"rsl_rl capped before its first evaluation (every {ANT['eval_every']:,} steps); see "
            f"{log}"
        )
    curve, train, steps, gym = _read_metrics(metrics)
    r = _capped_result(command, steps, train, curve)
    if capped != "capped":
        r.update(
            command=command, gym_return=gym["gym_return"], gym_return_std=gym["gym_return_std"]
        )
    save(
        part,
        {"rsl_rl": _summary(r, HUMANOID_TARGET if task.startswith("Humanoid") else ANT_TARGET)},
    )


def part_profile(
    iterations: int = 3, env_id: str = "Ant", num_envs: int = ANT["num_envs"], device: str = "cuda"
) -> None:
    """ppo_vec on Ant x4096 (its GPU defaults) in this process under torch.profiler: 3 iterations of
    warm-up (Warp's graph capture, the first allocations), then `iterations` recorded. The loop
    calls `Logger.burn_in` once per iteration, which steps the profiler's schedule here. Writes the
    top ops by GPU and by CPU time to bench/results/gpu/profile.txt and, per iteration: wall time,
    GPU busy time (the kernels' own time, summed), kernel and graph launches, and calls that make
    the host wait; then 8 more iterations untraced, over which NVML's utilization is sampled (the
    busy share by the driver's count, where CUPTI misses kernels)."""
    from dataclasses import replace

    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, schedule

    import algos.ppo_vec as ppo
    from common.logger import Logger

    args = replace(ppo.default_args(env_id, num_envs, device), num_envs=num_envs)
    # then `sampled` iterations untraced, while NVML samples the GPU's utilization
    warm, sampled, batch = 3, 8, args.num_envs * args.num_steps
    args = replace(
        args,
        env=env_id,
        device=device,
        seed=1,
        total_steps=batch * (warm + iterations + 1 + sampled),
        eval_every=0,
        save_every=0,
        quiet=True,
        out_dir=str(RUNS / "profile"),
    )
    from common.graphs import Captured

    ticks: list[float] = []
    original, capture = Logger.burn_in, Captured._capture
    recorded: list[tuple[float, float, float]] = []

    # what recording and instantiating the iteration's graph costs (host time): in all, and
    # split into running the iteration under capture and instantiating the graph
    def timed_capture(self):
        t = time.perf_counter()
        capture(self)
        torch.cuda.synchronize()
        recorded.append((time.perf_counter() - t, self.record_s, self.instantiate_s))

    # of that, MuJoCo Warp recording its step and reset into the capture again (each of the
    # rollout's steps records its solver loop anew): what a graph per rollout step would save
    from envs.mujoco_locomotion import _WarpBackend

    launch, warp_recorded = _WarpBackend._launch, [0.0, 0]

    def timed_launch(self, name, work):
        if not (device == "cuda" and torch.cuda.is_current_stream_capturing()):
            return launch(self, name, work)
        t = time.perf_counter()
        try:
            return launch(self, name, work)
        finally:
            warp_recorded[0] += time.perf_counter() - t
            warp_recorded[1] += 1

    def burn_in(self, step, learned=True):
        original(self, step, learned)
        ticks.append(time.perf_counter())
        prof.step()

    # the GPU's own busy share, not the profiler's (whose kernel sum misses what CUPTI does not
    # trace): NVML's utilization, the share of its last sample period in which a kernel ran
    # (`torch.cuda.utilization`, needs nvidia-ml-py), sampled from a thread
    utilization: list[tuple[float, int]] = []
    sampling = threading.Event()

    def sample():
        try:
            while not sampling.wait(0.02):
                utilization.append((time.perf_counter(), torch.cuda.utilization(device)))
        except Exception as e:  # no NVML here: the summary's share is None
            print(f"NVML utilization not sampled: {type(e).__name__}: {e}")

    sampler = threading.Thread(target=sample, daemon=True)
    if device == "cuda":
        sampler.start()

    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device == "cuda" else [])]
    with profile(
        activities=activities,
        # tracing on from the first iteration, where MuJoCo Warp records its own graphs: with it
        # off then, the profile saw none of the kernels of their solver loop's body (conditional
        # nodes) when those graphs ran between the iteration's (ninth lease, lease.md)
        schedule=schedule(wait=0, warmup=warm, active=iterations, repeat=1),
    ) as prof:
        Logger.burn_in, Captured._capture = burn_in, timed_capture
        _WarpBackend._launch = timed_launch
        start = time.perf_counter()
        try:
            ppo.main(args)
        finally:
            Logger.burn_in, Captured._capture = original, capture
            _WarpBackend._launch = launch
            sampling.set()
    events = prof.key_averages()
    # the untraced iterations after the profile's: NVML's samples in them, and their wall time
    lo, hi = ticks[warm + iterations], ticks[warm + iterations + sampled]
    in_window = [u for t, u in utilization if lo <= t <= hi]
    nvml = sum(in_window) / len(in_window) / 100 if in_window else None
    # the recorded iterations, host clock
    wall = (ticks[warm + iterations - 1] - ticks[warm - 1]) / iterations

    def total(e, attr):  # torch renamed cuda_* to device_* (both kept for a while)
        return next(
            (getattr(e, a) for a in (f"self_device_{attr}", f"self_cuda_{attr}") if hasattr(e, a)),
            0.0,
        )

    def calls(*names):
        return sum(e.count for e in events if e.key in names) / iterations

    # the kernels, copies and fills themselves (an op's row also carries its kernels' time: not
    # summed twice)
    # (user annotations, such as the profiler's step and the optimizer's step, sit on the GPU's
    # track too: left out, as torch's own table leaves them out of its "Self CUDA time total")
    gpu_busy = (
        sum(
            total(e, "time_total")
            for e in events
            if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
        )
        / 1e6
        / iterations
    )
    summary = {
        "command": f"python algos/ppo_vec.py --env {env_id} --num-envs {num_envs} "
        f"--device {device} (in process, profiled)",
        "env_steps_per_iteration": batch,
        "iterations": iterations,
        "wall_s_per_iteration": wall,
        "env_steps_per_s": batch / wall,
        "gpu_busy_s_per_iteration": gpu_busy,
        "kernel_launches_per_iteration": calls(
            "cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"
        ),
        "graph_launches_per_iteration": calls("cudaGraphLaunch", "cuGraphLaunch"),
        # host time blocked because the launch queue was full: the GPU had work queued all along
        # (a check on the busy share, whose kernel sum can miss kernels CUPTI does not trace)
        "nvml_busy_share": nvml,
        "nvml_samples": len(in_window),
        "nvml_iterations": sampled,
        "unprofiled_wall_s_per_iteration": (hi - lo) / sampled,
        "queue_full_s_per_iteration": sum(
            e.cpu_time_total for e in events if e.key == "Command Buffer Full"
        )
        / 1e6
        / iterations,
        "host_waits_per_iteration": calls(
            "cudaStreamSynchronize",
            "cudaDeviceSynchronize",
            "cudaEventSynchronize",
            "cuStreamSynchronize",
            "cuCtxSynchronize",
        ),
        # the start-up a run pays before its first replay: set-up with the first (eager) iteration,
        # the second (eager, checked), the third (recorded, then replayed); and the capture alone
        "startup_s": [ticks[0] - start, *(ticks[i] - ticks[i - 1] for i in range(1, warm))],
        "capture_s": recorded[0][0] if recorded else None,
        "record_s": recorded[0][1] if recorded else None,
        "instantiate_s": recorded[0][2] if recorded else None,
        "warp_record_s": warp_recorded[0] if warp_recorded[1] else None,
        "warp_records": warp_recorded[1],
    }
    OUT.mkdir(parents=True, exist_ok=True)
    sort_gpu = (
        (
            "self_device_time_total"
            if hasattr(events[0], "self_device_time_total")
            else "self_cuda_time_total"
        )
        if device == "cuda"
        else "self_cpu_time_total"
    )
    (OUT / "profile.txt").write_text(
        f"{summary['command']}: {iterations} iterations of {batch:,} env steps\n\n"
        f"## by GPU time\n\n"
        + events.table(sort_by=sort_gpu, row_limit=30, max_name_column_width=60)
        + "\n\n## by CPU time\n\n"
        + events.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60)
    )
    print(json.dumps(summary, indent=1), flush=True)
    save("profile", summary)


# ---- report --------------------------------------------------------------------------------------
def _load(part: str) -> dict | None:
    p = OUT / f"{part}.json"
    return json.loads(p.read_text()) if p.exists() else None


def _score(r: dict, std: bool = True) -> str:
    # capped: no final gymnasium score; its last in-run evaluation, if any
    if r.get("gym_return") is None:
        last = (r.get("curve") or [None])[-1]
        return (
            f"n/a (capped run; last eval {last['eval_return']:.0f} at {last['step'] / 1e6:.1f}M "
            f"steps, {last['train_seconds']:.0f} s)"
            if last
            else "n/a (capped run)"
        )
    return (
        f"{r['gym_return']:.0f} \u00b1 {r['gym_return_std']:.0f}"
        if std
        else f"{r['gym_return']:.0f}"
    )


def _steady(r: dict) -> float | None:
    """env-steps/s between a run's first and last evaluation: without its start-up (the first
    iterations, a capture, the env's kernels loading), which weighs more the shorter the run."""
    c = r.get("curve") or []
    if len(c) < 2 or c[-1]["train_seconds"] <= c[0]["train_seconds"]:
        return None
    return (c[-1]["step"] - c[0]["step"]) / (c[-1]["train_seconds"] - c[0]["train_seconds"])


def _at_equal_steps(ours: dict, peer: dict) -> tuple[float, int] | None:
    """(peer's training seconds / ours, step) at the last evaluation step both runs reached:
    the end-to-end ratio with both start-ups in, which a run longer than the other's would
    otherwise dilute."""
    a = {c["step"]: c["train_seconds"] for c in ours.get("curve") or []}
    b = {c["step"]: c["train_seconds"] for c in peer.get("curve") or []}
    common = sorted(set(a) & set(b))
    if not common or a[common[-1]] <= 0:
        return None
    return b[common[-1]] / a[common[-1]], common[-1]


def _first_run(part: dict | None) -> tuple[str | None, dict | None]:
    """(row name, run) of a saved part: its first dict-valued entry, beside "machine" and "date"
    in whatever order the file has them."""
    return next(((k, v) for k, v in (part or {}).items() if isinstance(v, dict)), (None, None))


def _rate(x) -> str:
    return f"{x:,.0f}" if x is not None else "n/a"


def _secs(x) -> str:
    return f"{x:.0f} s" if x is not None else "not reached"


def report() -> str:
    lines = ["# One GPU: MuJoCo Warp throughput, PPO end to end, rsl_rl beside it", ""]
    parts = {p: _load(p) for p in PARTS}
    if not any(parts.values()):
        lines += [
            "No GPU run yet: on a machine with CUDA, `bash benchmark.sh gpu` (or `python "
            "bench/gpu.py PART`, one part at a time) fills this table."
        ]
    env = parts["env"]
    if env:
        lines += [
            f"## Env-steps/s (uniform random actions, same-step autoreset; {env['machine']}, "
            f"{env['date']})",
            "",
            "| task | backend | envs | env-steps/s | vs CPU batch at 4096 |",
            "|---|---|---:|---:|---:|",
        ]
        for r in env["rows"]:
            ratio = f"{r['vs_cpu_4096']:.1f}x" if "vs_cpu_4096" in r else "1.0x"
            lines.append(
                f"| {r['task']} | {r['backend']} | {r['num_envs']} | {r['sps']:,.0f} | {ratio} |"
            )
        lines.append("")
    runs = []
    for part in (*PPO, *RSL_RL, "cartpole", *FAST_TD3):
        for name, r in (parts[part] or {}).items():
            if isinstance(r, dict) and "sps" in r:
                runs.append((part, name, r, parts[part]))
    if runs:
        lines += [
            "## Training end to end (evaluations left out of the clock; final score on gymnasium's "
            "env, 10 episodes; env-steps/s over the run and between its first and last evaluation)",
            "",
            "| run | GPU, date | env steps | env-steps/s | between evals | eval reached | at | "
            "gymnasium return | command |",
            "|---|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        # parts may come from different leases: each row names its GPU
        for part, name, r, meta in runs:
            lines.append(
                f"| {part} {name} | {meta['machine'].split(',')[0]}, {meta['date']} "
                f"| {r['steps'] / 1e6:.0f}M | {r['sps']:,.0f} | {_rate(_steady(r))} "
                f"| >= {r['level']:.0f} | {_secs(r['reached_seconds'])} | {_score(r)} "
                f"| `{r['command']}` |"
            )
        lines += [
            "",
            "The `adaptive lr` rows ran Rudin et al.'s KL-adaptive rate from 1e-3 "
            "(`--lr-schedule adaptive --learning-rate 1e-3`); the other ppo_vec rows the default, "
            "3e-4 annealed to 0.",
            "",
        ]
        pairs = [
            (p, "rsl_rl")
            for p in ("ppo-ant", "ppo-ant-adaptive", "ppo-ant-eager", "ppo-ant-compile")
        ]
        pairs += [("ppo-humanoid-eager", "rsl_rl-humanoid")] + [
            (ppo, rsl) for rsl, (_, _, ppo) in RSL_RL.items() if rsl != "rsl_rl"
        ]
        for part, rsl in pairs:
            peer = (parts[rsl] or {}).get("rsl_rl")
            name, ours = _first_run(parts[part])
            if ours and peer and "sps" in ours:
                same = parts[part]["machine"] == parts[rsl]["machine"]
                # the same hour: the same lease
                lease = parts[part]["date"][:13] == parts[rsl]["date"][:13]
                a, b = _steady(ours), _steady(peer)
                equal = _at_equal_steps(ours, peer)
                task, n = PPO[part][0], PPO[part][1]
                lines.append(
                    f"- {task} x{n}, ours ({name}) / rsl_rl env-steps/s: "
                    + (
                        f"{equal[0]:.2f}x to {equal[1] / 1e6:.1f}M steps (both start-ups in), "
                        if equal
                        else ""
                    )
                    + f"{ours['sps'] / peer['sps']:.2f}x over the runs"
                    + (f", {a / b:.2f}x between evaluations" if a and b else "")
                    + (f" ({ours['steps'] / 1e6:.1f}M and {peer['steps'] / 1e6:.1f}M steps)")
                    + (
                        (
                            " (same lease)"
                            if lease
                            else " (the same card type, leases of "
                            f"{parts[part]['date']} and {parts[rsl]['date']})"
                        )
                        if same
                        else " (different machines: not a ratio to quote)"
                    )
                    + f"; gymnasium return {_score(ours, False)} vs {_score(peer, False)}"
                )
    captured, eager = (_first_run(parts[p])[1] for p in FAST_TD3)
    if all(isinstance(r, dict) and "sps" in r for r in (captured, eager)):
        lines.append(
            f"- fast_td3 Ant x{FAST_TD3['td3-ant'][1]}, its updates captured / eager env-steps/s: "
            f"{captured['sps'] / eager['sps']:.2f}x"
        )
    prof = parts["profile"]
    if prof:
        lines += [
            "",
            f"## Where ppo_vec's time goes (torch.profiler, {prof['machine']}, {prof['date']})",
            "",
            f"`{prof['command']}`",
            "",
            f"Per PPO iteration ({prof['env_steps_per_iteration']:,} env steps; "
            f"{prof['env_steps_per_s']:,.0f} env-steps/s under the profiler): "
            f"{prof['wall_s_per_iteration'] * 1e3:.0f} ms of wall time, of which the GPU is busy "
            f"{prof['gpu_busy_s_per_iteration'] * 1e3:.0f} ms "
            f"({prof['gpu_busy_s_per_iteration'] / prof['wall_s_per_iteration']:.0%}); "
            f"{prof['kernel_launches_per_iteration']:,.0f} kernel launches, "
            f"{prof['graph_launches_per_iteration']:,.0f} CUDA graph launches, "
            f"{prof['host_waits_per_iteration']:,.0f} host waits"
            + (
                f"; NVML: the GPU busy {prof['nvml_busy_share']:.0%} of {prof['nvml_samples']} "
                f"samples over {prof['nvml_iterations']} untraced iterations of "
                f"{prof['unprofiled_wall_s_per_iteration'] * 1e3:.0f} ms"
                if prof.get("nvml_busy_share") is not None
                else ""
            )
            + (
                f"; the host blocked {prof['queue_full_s_per_iteration'] * 1e3:.0f} ms on a full "
                "launch queue (the GPU had work queued)"
                if prof.get("queue_full_s_per_iteration")
                else ""
            )
            + ". Top ops: `bench/results/gpu/profile.txt`.",
        ]
        if prof.get("startup_s"):
            lines += [
                "",
                "Start-up (host clock, under the profiler): set-up and iteration 1 "
                + ", then ".join(f"{x:.2f} s" for x in prof["startup_s"])
                + (
                    f"; recording and instantiating the graph {prof['capture_s']:.2f} s"
                    if prof.get("capture_s")
                    else ""
                )
                + (
                    f" (the iteration under capture {prof['record_s']:.2f} s, "
                    f"instantiation {prof['instantiate_s']:.2f} s)"
                    if prof.get("instantiate_s") is not None
                    else ""
                )
                + (
                    f"; of the recording, MuJoCo Warp recording its step and reset into it "
                    f"{prof['warp_record_s']:.2f} s ({prof['warp_records']} times)"
                    if prof.get("warp_record_s") is not None
                    else ""
                )
                + ".",
            ]
    if (OUT / "lease.md").exists():  # the hand-kept record of what each lent GPU ran and found
        lines += ["", (OUT / "lease.md").read_text().rstrip()]
    text = "\n".join(lines) + "\n"
    (ROOT / "bench" / "results" / "gpu.md").write_text(text)
    print(text)
    return text


def main() -> None:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("part", nargs="?", default="all", choices=("all", *PARTS, "report"))
    p.add_argument("--seconds", type=float, default=5.0, help="env part: measuring time per cell")
    p.add_argument(
        "--max-seconds",
        type=float,
        help="training parts: stop a run after this many seconds (Ctrl-C; the "
        "report then shows what it logged, without gymnasium's score)",
    )
    p.add_argument(
        "--steps",
        type=int,
        help=f"training parts: env steps (default: Ant {ANT['steps']:,}, CartPole "
        f"{CARTPOLE['steps']:,})",
    )
    a = p.parse_args()
    if a.part == "report":
        report()
        return
    if not have_cuda():
        print(
            "no GPU: torch sees no CUDA device here, so bench/gpu.py has nothing to measure (run "
            "it on a machine with one; `python bench/gpu.py report` rebuilds bench/results/gpu.md "
            "from saved results)"
        )
        return
    todo = PARTS if a.part == "all" else (a.part,)
    for part in todo:
        if part == "env":
            part_env(a.seconds)
        elif part in PPO or part in FAST_TD3:
            part_ppo(part, a.steps or ANT["steps"], max_seconds=a.max_seconds)
        elif part == "cartpole":
            part_cartpole(a.steps or CARTPOLE["steps"], a.max_seconds)
        elif part == "profile":
            part_profile()
        elif part in RSL_RL:
            part_rsl_rl(part, a.steps or ANT["steps"], a.max_seconds)
    report()


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from common.cli import install_error_hook

    install_error_hook()  # a user error: one line naming the fix, exit status 2
    main()
