"""The off-policy update near its floor: SAC's and TD3's env-step-plus-update on one CPU core, ours
beside CleanRL's `sac_continuous_action.py` and `td3_continuous_action.py`, and both beside the
matrix-product floor of the update's FLOPs.

    python bench/micro/offpolicy_update.py --cleanrl PATH   # PATH: a checkout of vwxyzjn/cleanrl
    python bench/micro/offpolicy_update.py --device cuda    # ours on a GPU: captured beside eager

Settings (both sides): Hopper-v5, one env, batch 256, 256x256 networks, one critic update per env
step (SAC: an actor update per step, CleanRL's two every second step; TD3: an actor update every
second step), one thread. CleanRL's files run unchanged in bench/.venv-cleanrl (the project's
packages through a .pth: the same torch build on both sides). Time per step: two runs of a side
past the same learning_starts at two budgets, the difference of their wall times over that of their
steps (start-up and the random-action phase cancel), `--repeats` times a side, the sides
alternating; medians, and the speed ratio's bootstrap interval. FLOPs: torch's `FlopCounterMode`
over one of our updates; floor: those FLOPs at the rate of `torch.mm` on 256-wide products.

On a GPU (`--device cuda`) the same steps of ours are timed with a step's updates captured as one
CUDA graph (the default) and eager (`--no-capture`), the env on the host as on a CPU; CleanRL's
side is left out (its files need SB3 and TensorBoard, which a lent machine lacks). There the
update is bound by kernel launches, not FLOPs: the floor column is the FLOPs at `torch.mm`'s
256-wide rate on the card, printed to show how far from FLOP-bound a step is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
from micro.timing import ROOT, alternating, machine, parser, publish, rate  # noqa: E402
from micro.timing import ratio, script, times, write  # noqa: E402

from common.errors import UserError  # noqa: E402

VENV = ROOT / "bench" / ".venv-cleanrl"
ENV, LEARNING_STARTS = "Hopper-v5", 1000
BUDGETS = {"cpu": (2000, 5000), "cuda": (2000, 8000)}  # env steps of the two timed runs
OUT = {"cpu": "bench/results/offpolicy_update", "cuda": "bench/results/gpu/offpolicy_update"}


def venv() -> Path:
    """bench/.venv-cleanrl: a venv seeing the project's packages (one torch build on both sides)."""
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        site = "import site; print(site.getsitepackages()[0])"
        venv_site, project_site = (
            subprocess.run([p, "-c", site], capture_output=True, text=True, check=True).stdout
            for p in (str(py), sys.executable)
        )
        Path(venv_site.strip(), "project.pth").write_text(project_site.strip() + "\n")
    return py


def per_step(
    algo: str, checkout: Path | None = None, device: str = "cpu", capture: bool = True
) -> float:
    """Seconds per env step (with its update) past learning_starts, of ours or, given a `checkout`,
    of CleanRL's: two budgets, differenced. On CUDA, ours with its updates captured or eager."""
    budgets = BUDGETS[device]

    def command(steps: int) -> list[str]:
        if checkout is None:
            flags = (
                f"--env {ENV} --num-envs 1 --gradient-steps 1 --batch-size 256 --hidden 256 256 "
                f"--learning-starts {LEARNING_STARTS} --total-steps {steps} --eval-every 0 "
                "--save-every 0 --eval-episodes 1 --threads 1 --quiet --out-dir runs "
                f"--device {device} --mujoco-backend batch --{'' if capture else 'no-'}capture"
            )
            return [sys.executable, str(ROOT / "algos" / f"{algo}.py"), *flags.split()]
        script = checkout / "cleanrl" / f"{algo}_continuous_action.py"
        flags = f"--env-id {ENV} --total-timesteps {steps} --learning-starts {LEARNING_STARTS}"
        return [str(venv()), str(script), *flags.split()]

    env = dict(os.environ, OMP_NUM_THREADS="1")
    if checkout is not None:  # CleanRL's `cleanrl_utils`
        env["PYTHONPATH"] = str(checkout)
    walls = []
    for steps in budgets:
        with tempfile.TemporaryDirectory() as cwd:
            t = time.perf_counter()
            got = subprocess.run(command(steps), cwd=cwd, env=env, capture_output=True, text=True)
            if got.returncode:
                raise SystemExit(f"{' '.join(command(steps))} failed: {got.stderr[-600:]}")
            walls.append(time.perf_counter() - t)
    return (walls[1] - walls[0]) / (budgets[1] - budgets[0])


def update_flops(algo: str) -> int:
    """Matrix-product FLOPs of one env step's updates of ours (forward and backward), as the files
    run them: the actor's backward stops at the actor's parameters (no critic weight gradients)."""
    import importlib

    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from common.storage import Batch

    mod = importlib.import_module(f"algos.{algo}")
    obs_dim, act_dim, B = 11, 3, 256  # Hopper
    nets = [net(obs_dim, act_dim, (256, 256)) for net in (mod.Actor, mod.Critic) * 2]
    actor, critic, actor_t, critic_t = nets
    b = Batch(obs={"policy": torch.randn(B, obs_dim)}, next_obs={"policy": torch.randn(B, obs_dim)},
              actions=torch.rand(B, act_dim) * 2 - 1, rewards=torch.randn(B),
              terminated=torch.zeros(B), weights=torch.ones(B))  # fmt: skip
    with FlopCounterMode(display=False) as count:
        if algo == "sac":
            alpha = torch.ones(1)
            mod.critic_loss(actor, critic, critic_t, 0.99, b, alpha)[0].backward()
            mod.actor_loss(actor, critic, b, alpha)[0].backward(inputs=list(actor.parameters()))
            return int(count.get_total_flops())
        # td3: the actor every second step, half its cost a step
        mod.critic_loss(actor_t, critic, critic_t, 0.99, b, 0.2, 0.5)[0].backward()
        critic_flops = count.get_total_flops()
        mod.actor_loss(actor, critic, b).backward(inputs=list(actor.parameters()))
        return int(critic_flops + (count.get_total_flops() - critic_flops) / 2)


def mm_rate(n: int = 256, seconds: float = 2.0, device: str = "cpu") -> float:
    """FLOP/s of `torch.mm` on n x n float32 products, one thread (a GPU: its kernels, queued)."""
    import torch

    from micro.timing import synchronizer

    torch.set_num_threads(1)
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)
    sync = synchronizer(device)
    return 2 * n**3 * rate(lambda: a @ b, seconds, warmup=20, chunk=50, sync=sync)


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--cleanrl", type=Path, help="a checkout of vwxyzjn/cleanrl (on a CPU)")
    p.add_argument("--commit", help="the checkout's commit (default: git rev-parse HEAD there)")
    p.add_argument("--device", choices=sorted(BUDGETS), default="cpu", help="cpu: beside CleanRL")
    p.add_argument("--repeats", type=int, default=3, help="measurements of each side, alternated")
    p.add_argument("--algos", nargs="+", choices=("sac", "td3"), default=["sac", "td3"])
    p.add_argument("--out", type=Path, help="X for X.md and X.json (default: " + OUT["cpu"] + ")")
    a = p.parse_args()
    if a.device == "cuda":
        return on_gpu(a.repeats, a.out or Path(OUT["cuda"]), a.algos)
    if a.cleanrl is None:
        raise UserError("--cleanrl PATH is needed on a CPU: a checkout of vwxyzjn/cleanrl")
    head = ["git", "-C", str(a.cleanrl), "rev-parse", "HEAD"]
    commit = a.commit or subprocess.run(head, capture_output=True, text=True).stdout.strip()
    mm, rows = mm_rate(), []
    for algo in a.algos:
        sides = dict(ours=partial(per_step, algo), cleanrl=partial(per_step, algo, a.cleanrl))
        got = alternating(a.repeats, **sides)
        ours_s, clean_s = float(np.median(got["ours"])), float(np.median(got["cleanrl"]))
        flops = update_flops(algo)
        row = dict(algo=algo, flops=flops, floor_s=flops / mm, ours_s=ours_s, cleanrl_s=clean_s)
        # steps/s, ours over CleanRL: medians, and the interval of that ratio over the repeats
        rows.append({**row, "speedup": ratio(got["cleanrl"], got["ours"]), "times": got})
        print(rows[-1], flush=True)
    lines = [
        f"One CPU core ({machine()}); `torch.mm` 256x256: {mm / 1e9:.1f} GFLOP/s; {ENV}, batch "
        f"256, 256x256 networks, UTD 1; CleanRL at {commit or 'an unknown commit'}.",
        "",
        f"Medians of {a.repeats} measurements a side (alternated); the ratio's 95% bootstrap "
        "interval in brackets (bench/stats.py).",
        "",
        "| algo | update MFLOP / step | floor ms | ours ms / step | CleanRL ms / step "
        "| ours / CleanRL steps/s | floor / ours |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['algo']} | {r['flops'] / 1e6:.0f} | {1e3 * r['floor_s']:.2f} | "
            f"{1e3 * r['ours_s']:.2f} | {1e3 * r['cleanrl_s']:.2f} | {times(r['speedup'])} | "
            f"{r['floor_s'] / r['ours_s']:.0%} |"
        )
    out = a.out or Path(OUT["cpu"])
    write(out.with_suffix(".json"), json.dumps(dict(mm_flops_per_s=mm, rows=rows), indent=1))
    publish("\n".join(lines), out.with_suffix(".md"))


def on_gpu(repeats: int, out: Path, algos=("sac", "td3")) -> None:
    """Ours on CUDA, a step's updates captured as one graph beside eager, alternated."""
    import torch

    if not torch.cuda.is_available():
        raise UserError("no GPU: torch sees no CUDA device; run --device cuda where there is one")
    mm, rows = mm_rate(device="cuda"), []
    for algo in algos:
        sides = dict(
            captured=partial(per_step, algo, device="cuda"),
            eager=partial(per_step, algo, device="cuda", capture=False),
        )
        got = alternating(repeats, **sides)
        cap_s, eager_s = float(np.median(got["captured"])), float(np.median(got["eager"]))
        flops = update_flops(algo)
        rows.append(dict(algo=algo, flops=flops, floor_s=flops / mm, captured_s=cap_s,
                         eager_s=eager_s, times=got))  # fmt: skip
        print(rows[-1], flush=True)
    lines = [
        f"One GPU ({machine('cuda')}); `torch.mm` 256x256 there: {mm / 1e9:.0f} GFLOP/s; {ENV} "
        "on the host, batch 256, 256x256 networks, UTD 1, one torch thread.",
        "",
        f"Medians of {repeats} measurements a side (alternated); each the difference of two runs' "
        f"wall times over that of their steps ({BUDGETS['cuda'][0]:,} and "
        f"{BUDGETS['cuda'][1]:,}).",
        "",
        "| algo | update MFLOP / step | floor ms | captured ms / step | eager ms / step "
        "| captured steps/s | eager / captured |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['algo']} | {r['flops'] / 1e6:.0f} | {1e3 * r['floor_s']:.3f} | "
            f"{1e3 * r['captured_s']:.2f} | {1e3 * r['eager_s']:.2f} | "
            f"{1 / r['captured_s']:,.0f} | {r['eager_s'] / r['captured_s']:.2f}x |"
        )
    write(out.with_suffix(".json"), json.dumps(dict(mm_flops_per_s=mm, rows=rows), indent=1))
    publish("\n".join(lines), out.with_suffix(".md"))


if __name__ == "__main__":
    script(main)
