"""Where ppo_vec's time goes on a GPU: `python algos/ppo_vec.py --env Ant --num-envs 4096` (its GPU
defaults, each iteration replayed as CUDA graphs) in this process under torch.profiler, into
bench/results/gpu/profile.md (per PPO iteration) and profile.txt (the top ops by GPU and CPU time).

    python bench/micro/gpu_profile.py                        # Ant x4096 on CUDA (about a minute)
    python bench/micro/gpu_profile.py --env CartPole-v1 --num-envs 8 --device cpu --out /tmp/p

3 iterations of warm-up traced too (on CUDA the eager iteration, the checked one and the one
recorded into a graph: MuJoCo Warp records its own graphs there, and a trace started later missed
their solver loop's kernels), then `--iterations` recorded, then 8 untraced over which NVML's
utilization is sampled (the GPU's busy share by the driver's count, where CUPTI misses kernels).
Per iteration: wall time, GPU busy time (the kernels' own time, summed), kernel and graph launches,
calls that make the host wait, the host's time blocked on a full launch queue; and the start-up
(set-up with the first iterations, host clock) with the capture of the iteration's graph (in all,
the iteration under capture, the graph's instantiation).

It reaches the run through `common.run.hooks` alone: the end of each iteration (`on_iteration`,
which steps the profiler's schedule) and the capture (`capture`: a `Captured` that times itself).
What only replacing the library's names could measure is left out: how long MuJoCo Warp spends
recording its own graphs inside the capture (bench/gpu.py timed `_WarpBackend._launch`: 0 such
recordings once Warp's graphs were launched in place, results/gpu/lease.md's ninth lease).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import torch

# the repository and bench/
sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]
from common.device import available_cores  # noqa: E402
from common.graphs import Captured  # noqa: E402
from common.run import hooks  # noqa: E402
from micro.timing import ROOT, parser, script, write  # noqa: E402

OUT = ROOT / "bench" / "results" / "gpu"
WARM, SAMPLED = 3, 8  # iterations traced before the recorded ones; untraced after, NVML sampled
RECORDED: list[tuple[float, float, float]] = []  # each capture: in all, recording, instantiating


class Timed(Captured):
    """`Captured` timing its capture (host clock, the GPU's queue drained)."""

    def _capture(self) -> None:
        start = time.perf_counter()
        super()._capture()
        torch.cuda.synchronize()
        RECORDED.append((time.perf_counter() - start, self.record_s, self.instantiate_s))


def profile(iterations: int, env_id: str, num_envs: int, device: str, out: Path) -> dict:
    """ppo_vec under torch.profiler (module docstring); writes `out`/profile.txt, returns the
    summary per iteration."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, schedule

    import algos.ppo_vec as ppo

    args = replace(ppo.default_args(env_id, num_envs, device), num_envs=num_envs)
    batch = args.num_envs * args.num_steps
    args = replace(args, env=env_id, device=device, seed=1, eval_every=0, save_every=0, quiet=True,
                   total_steps=batch * (WARM + iterations + 1 + SAMPLED),
                   out_dir=str(ROOT / "bench" / "runs" / "gpu_profile"))  # fmt: skip
    ticks: list[float] = []
    RECORDED.clear()
    utilization: list[tuple[float, int]] = []  # (host clock, NVML's busy percent)
    sampling = threading.Event()

    def sample():  # `torch.cuda.utilization` needs nvidia-ml-py
        try:
            while not sampling.wait(0.02):
                utilization.append((time.perf_counter(), torch.cuda.utilization(device)))
        except Exception as e:  # no NVML here: the summary's share is None
            print(f"NVML utilization not sampled: {type(e).__name__}: {e}")

    def on_iteration(run):
        ticks.append(time.perf_counter())
        prof.step()

    if device == "cuda":
        threading.Thread(target=sample, daemon=True).start()
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device == "cuda" else [])]
    plan = schedule(wait=0, warmup=WARM, active=iterations, repeat=1)
    with torch.profiler.profile(activities=activities, schedule=plan) as prof:
        start = time.perf_counter()
        try:
            with hooks(on_iteration=on_iteration, capture=Timed):
                ppo.main(args)
        finally:
            sampling.set()
    events = prof.key_averages()
    # the untraced iterations after the profile's: NVML's samples in them, and their wall time
    lo, hi = ticks[WARM + iterations], ticks[WARM + iterations + SAMPLED]
    in_window = [u for t, u in utilization if lo <= t <= hi]

    def gpu_time(e):  # torch renamed cuda_* to device_* (both kept for a while)
        names = ("self_device_time_total", "self_cuda_time_total")
        return next((getattr(e, a) for a in names if hasattr(e, a)), 0.0)

    def calls(*names):
        return sum(e.count for e in events if e.key in names) / iterations

    # the kernels, copies and fills themselves (an op's row also carries its kernels' time: not
    # summed twice); user annotations (the profiler's step, the optimizer's) left out, as torch's
    # own "Self CUDA time total" leaves them
    busy = sum(
        gpu_time(e)
        for e in events
        if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)
    )
    wall = (ticks[WARM + iterations - 1] - ticks[WARM - 1]) / iterations
    summary = {
        "command": f"python algos/ppo_vec.py --env {env_id} --num-envs {num_envs} "
        f"--device {device} (in process, profiled)",
        "env_steps_per_iteration": batch,
        "iterations": iterations,
        "wall_s_per_iteration": wall,
        "env_steps_per_s": batch / wall,
        "gpu_busy_s_per_iteration": busy / 1e6 / iterations,
        "kernel_launches_per_iteration": calls(
            "cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC"
        ),
        "graph_launches_per_iteration": calls("cudaGraphLaunch", "cuGraphLaunch"),
        "host_waits_per_iteration": calls(
            "cudaStreamSynchronize",
            "cudaDeviceSynchronize",
            "cudaEventSynchronize",
            "cuStreamSynchronize",
            "cuCtxSynchronize",
        ),  # fmt: skip
        # host time blocked because the launch queue was full: the GPU had work queued all along
        "queue_full_s_per_iteration": sum(
            e.cpu_time_total for e in events if e.key == "Command Buffer Full"
        )
        / 1e6
        / iterations,
        "nvml_busy_share": sum(in_window) / len(in_window) / 100 if in_window else None,
        "nvml_samples": len(in_window),
        "nvml_iterations": SAMPLED,
        "unprofiled_wall_s_per_iteration": (hi - lo) / SAMPLED,
        # set-up with the first (eager) iteration, the second (eager, checked), the third
        # (recorded, then replayed); the capture alone
        "startup_s": [ticks[0] - start, *(ticks[i] - ticks[i - 1] for i in range(1, WARM))],
        "capture_s": RECORDED[0][0] if RECORDED else None,
        "record_s": RECORDED[0][1] if RECORDED else None,
        "instantiate_s": RECORDED[0][2] if RECORDED else None,
    }
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    if device == "cuda" and hasattr(events[0], "self_device_time_total"):
        key = "self_device_time_total"
    write(
        out / "profile.txt",
        f"{summary['command']}: {iterations} iterations of {batch:,} env steps\n\n"
        + "## by GPU time\n\n"
        + events.table(sort_by=key, row_limit=30, max_name_column_width=60)
        + "\n\n## by CPU time\n\n"
        + events.table(sort_by="self_cpu_time_total", row_limit=30, max_name_column_width=60),
    )
    return summary


def table(p: dict, where: str) -> str:
    """The summary as Markdown, headed by the machine and date it ran on (`where`)."""
    ms = lambda s: f"{s * 1e3:,.0f} ms"  # noqa: E731
    rows = [
        ("wall time", f"{ms(p['wall_s_per_iteration'])} ({p['env_steps_per_s']:,.0f} env-steps/s "
                      "under the profiler)"),
        ("GPU busy (the kernels' own time)", f"{ms(p['gpu_busy_s_per_iteration'])} "
         f"({p['gpu_busy_s_per_iteration'] / p['wall_s_per_iteration']:.0%})"),
        ("kernel launches", f"{p['kernel_launches_per_iteration']:,.0f}"),
        ("CUDA graph launches", f"{p['graph_launches_per_iteration']:,.0f}"),
        ("host waits (synchronize calls)", f"{p['host_waits_per_iteration']:,.1f}"),
        ("host blocked on a full launch queue", ms(p.get("queue_full_s_per_iteration") or 0)),
    ]  # fmt: skip
    if p.get("nvml_busy_share") is not None:
        rows.append((f"GPU busy by NVML ({p['nvml_samples']} samples over {p['nvml_iterations']} "
                     f"untraced iterations of {ms(p['unprofiled_wall_s_per_iteration'])})",
                     f"{p['nvml_busy_share']:.0%}"))  # fmt: skip
    startup = "set-up and iteration 1 " + ", then ".join(f"{x:.2f} s" for x in p["startup_s"])
    if p.get("capture_s") is not None:
        startup += (
            f"; recording and instantiating the graph {p['capture_s']:.2f} s (the iteration "
            f"under capture {p['record_s']:.2f} s, instantiation {p['instantiate_s']:.2f} s)"
        )
    return "\n".join([
        f"# Where ppo_vec's time goes (torch.profiler; {where})",
        "",
        f"`{p['command']}`: {p['iterations']} iterations of {p['env_steps_per_iteration']:,} env "
        "steps recorded.",
        "",
        "| per PPO iteration | |",
        "|---|---:|",
        *(f"| {k} | {v} |" for k, v in rows),
        "",
        f"Start-up (host clock, under the profiler): {startup}. The top ops by GPU and by CPU "
        "time: [profile.txt](profile.txt).",
    ])  # fmt: skip


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--env", default="Ant")
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--device", default="cuda")
    p.add_argument("--iterations", type=int, default=3, help="iterations recorded")
    p.add_argument("--out", default=str(OUT), help="folder of profile.md and profile.txt")
    a = p.parse_args()
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        from common.errors import UserError

        raise UserError("no GPU: torch sees no CUDA device here (--device cpu runs the mechanics)")
    summary = profile(a.iterations, a.env, a.num_envs, a.device, Path(a.out))
    gpu = torch.cuda.get_device_name(0) if a.device.startswith("cuda") else "no GPU"
    when = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    text = table(
        summary, f"{gpu}, {available_cores()} CPU cores, torch {torch.__version__}, {when}"
    )
    write(Path(a.out) / "profile.md", text)
    print(text)


if __name__ == "__main__":
    script(main)
