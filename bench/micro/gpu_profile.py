"""Where ppo_vec's time goes on a GPU: `python algos/ppo_vec.py --env Ant --num-envs 4096` (its GPU
defaults, each iteration replayed as CUDA graphs) in this process under torch.profiler, into
bench/results/gpu/profile.md (per PPO iteration) and profile.txt (the top ops by GPU and CPU time).

    python bench/micro/gpu_profile.py                        # Ant x4096 on CUDA (about a minute)
    python bench/micro/gpu_profile.py --env CartPole-v1 --num-envs 8 --device cpu --out /tmp/p

3 iterations of warm-up are traced too (on CUDA the eager iteration, the checked one and the one
recorded into a graph, where MuJoCo Warp records its own: a trace started later missed their
kernels), then `--iterations` recorded, then 8 untraced over which NVML's utilization is sampled
(the GPU's busy share by the driver's count, where CUPTI misses kernels). Per iteration: wall time,
GPU busy time (the kernels' own time, summed), kernel and graph launches, calls that make the host
wait, the host's time blocked on a full launch queue; and the start-up with the graph's capture.
The run is reached through `common.run.hooks` alone (`on_iteration`, and `capture` to time it).
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
from common.errors import UserError  # noqa: E402
from common.graphs import Captured  # noqa: E402
from common.run import hooks  # noqa: E402
from micro.timing import machine, measured, parser, publish, script, write  # noqa: E402

WARM, SAMPLED = 3, 8  # iterations traced before the recorded ones; untraced after, NVML sampled
RECORDED: list[tuple[float, float, float]] = []  # each capture: in all, recording, instantiating
LAUNCHES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC")
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")
WAITS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
         "cuStreamSynchronize", "cuCtxSynchronize")  # fmt: skip


class Timed(Captured):
    """`Captured` timing its capture (host clock, the GPU's queue drained)."""

    def _capture(self) -> None:
        start = time.perf_counter()
        super()._capture()
        torch.cuda.synchronize()
        RECORDED.append((time.perf_counter() - start, self.record_s, self.instantiate_s))


def profile(
    iterations: int, env_id: str, num_envs: int, device: str, out: Path, runs: Path | None = None
) -> dict:
    """ppo_vec under torch.profiler (module docstring); writes `out`/profile.txt, returns the
    summary per iteration. The run's directory goes under `runs` (default bench/runs/)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, schedule

    import algos.ppo_vec as ppo

    args = ppo.default_args(env_id, num_envs, device)
    batch = num_envs * args.num_steps
    steps = batch * (WARM + iterations + 1 + SAMPLED)
    args = measured(
        args, "gpu_profile", env=env_id, device=device, num_envs=num_envs, total_steps=steps
    )
    if runs is not None:
        args = replace(args, out_dir=str(runs))
    ticks: list[float] = []
    utilization: list[tuple[float, int]] = []  # (host clock, NVML's busy percent)
    sampling = threading.Event()
    RECORDED.clear()

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
    wall = (ticks[WARM + iterations - 1] - ticks[WARM - 1]) / iterations

    def calls(names) -> float:
        return sum(e.count for e in events if e.key in names) / iterations

    # the kernels, copies and fills themselves (an op's row also carries its kernels' time: not
    # summed twice); user annotations (the profiler's step, the optimizer's) left out, as torch's
    # own "Self CUDA time total" leaves them
    kernels = [e for e in events if e.device_type == DeviceType.CUDA]
    busy = sum(e.self_device_time_total for e in kernels if not getattr(e, "is_user_annotation", 0))
    # host time blocked because the launch queue was full: the GPU had work queued all along
    queue_full = sum(e.cpu_time_total for e in events if e.key == "Command Buffer Full")
    capture_s, record_s, instantiate_s = RECORDED[0] if RECORDED else (None, None, None)
    summary = dict(
        command=f"python algos/ppo_vec.py --env {env_id} --num-envs {num_envs} --device {device} "
        "(in process, profiled)",
        env_steps_per_iteration=batch, iterations=iterations, wall_s_per_iteration=wall,
        env_steps_per_s=batch / wall, gpu_busy_s_per_iteration=busy / 1e6 / iterations,
        kernel_launches_per_iteration=calls(LAUNCHES),
        graph_launches_per_iteration=calls(GRAPH_LAUNCHES),
        host_waits_per_iteration=calls(WAITS),
        queue_full_s_per_iteration=queue_full / 1e6 / iterations,
        nvml_busy_share=sum(in_window) / len(in_window) / 100 if in_window else None,
        nvml_samples=len(in_window), nvml_iterations=SAMPLED,
        unprofiled_wall_s_per_iteration=(hi - lo) / SAMPLED,
        # set-up with the first (eager) iteration, the second (eager, checked), the third
        # (recorded, then replayed); the capture alone
        startup_s=[ticks[0] - start, *(ticks[i] - ticks[i - 1] for i in range(1, WARM))],
        capture_s=capture_s, record_s=record_s, instantiate_s=instantiate_s,
    )  # fmt: skip

    def top(key: str) -> str:
        return events.table(sort_by=key, row_limit=30, max_name_column_width=60)

    head = f"{summary['command']}: {iterations} iterations of {batch:,} env steps"
    gpu = top("self_device_time_total" if device == "cuda" else "self_cpu_time_total")
    text = [head, "## by GPU time", gpu, "## by CPU time", top("self_cpu_time_total")]
    write(out / "profile.txt", "\n\n".join(text))
    return summary


def table(p: dict, where: str) -> str:
    """The summary as Markdown, headed by the machine and date it ran on (`where`)."""
    ms = lambda s: f"{s * 1e3:,.0f} ms"  # noqa: E731
    wall, busy = p["wall_s_per_iteration"], p["gpu_busy_s_per_iteration"]
    rows = [
        ("wall time", f"{ms(wall)} ({p['env_steps_per_s']:,.0f} env-steps/s under the profiler)"),
        ("GPU busy (the kernels' own time)", f"{ms(busy)} ({busy / wall:.0%})"),
        ("kernel launches", f"{p['kernel_launches_per_iteration']:,.0f}"),
        ("CUDA graph launches", f"{p['graph_launches_per_iteration']:,.0f}"),
        ("host waits (synchronize calls)", f"{p['host_waits_per_iteration']:,.1f}"),
        ("host blocked on a full launch queue", ms(p["queue_full_s_per_iteration"])),
    ]
    if p["nvml_busy_share"] is not None:
        rows.append((f"GPU busy by NVML ({p['nvml_samples']} samples over {p['nvml_iterations']} "
                     f"untraced iterations of {ms(p['unprofiled_wall_s_per_iteration'])})",
                     f"{p['nvml_busy_share']:.0%}"))  # fmt: skip
    startup = "set-up and iteration 1 " + ", then ".join(f"{x:.2f} s" for x in p["startup_s"])
    if p["capture_s"] is not None:
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
    p.add_argument("--out", default="bench/results/gpu", help="folder of profile.md and .txt")
    a = p.parse_args()
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError("no GPU: torch sees no CUDA device here (--device cpu runs the mechanics)")
    summary = profile(a.iterations, a.env, a.num_envs, a.device, Path(a.out))
    publish(table(summary, machine(a.device)), Path(a.out) / "profile.md")


if __name__ == "__main__":
    script(main)
