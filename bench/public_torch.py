"""What the lean copies of torch's Adam step, gradient clipping and distributions (common/optim.py,
common/distributions.py) are worth end to end, against torch's public API on the same runs.

Issue 56 keeps a fork of a torch function only where it is worth >= 1.2x end to end on a row of the peers
table. This runs the peers table's rows (each file's own defaults for the task, one thread) twice in fresh
processes: as the files are, and with `torch.optim.Adam` (fused on CPU), `torch.nn.utils.clip_grad_norm_`
and `torch.distributions` put in place of the lean versions. The numbers are the same bit for bit either
way (tests/test_optim.py, tests/test_action_masks.py), so a time-to-threshold ratio is the ratio of the
training seconds over the same steps, which is what this reports.

    python bench/public_torch.py                      # every row, 3 repeats each (~5 min on 2 cores)
    python bench/public_torch.py --only ppo dqn --repeats 5
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# the peers table's rows (bench/peers.py): file, task, env steps timed (a span of each run's way to its threshold)
ROWS = {"ppo": ("ppo_vec", "CartPole-v1", 60_000), "ppo-pendulum": ("ppo_vec", "Pendulum-v1", 40_000),
        "dqn": ("dqn", "CartPole-v1", 15_000), "pqn": ("pqn", "CartPole-v1", 60_000),
        "sac": ("sac", "Pendulum-v1", 3_000), "td3": ("td3", "Pendulum-v1", 5_000)}
OUT = ROOT / "bench" / "results" / "public_torch.md"


def _public(module) -> None:
    """Put torch's public API where the file uses the lean copies."""
    import torch

    import common.distributions as D

    class Categorical(torch.distributions.Categorical):
        def __init__(self, logits):
            super().__init__(logits=logits, validate_args=False)

    if hasattr(module, "Adam"):
        module.Adam = torch.optim.Adam
    if hasattr(module, "clip_grad_norm_"):
        module.clip_grad_norm_ = torch.nn.utils.clip_grad_norm_
    D.Categorical = Categorical  # Categoricals builds its dimensions from the module's name
    if hasattr(module, "Normal"):
        module.Normal = lambda loc, scale: torch.distributions.Normal(loc, scale, validate_args=False)


def worker(variant: str, row: str) -> None:
    import importlib
    from dataclasses import replace

    import torch

    torch.set_num_threads(1)
    algo, env_id, steps = ROWS[row]
    module = importlib.import_module(f"algos.{algo}")
    if variant == "public":
        _public(module)
    args = replace(module.default_args(env_id, device="cpu"), env=env_id, seed=1, total_steps=steps, eval_every=0,
                   save_every=0, quiet=True, tensorboard=False, plots=False, device="cpu",
                   out_dir=f"/tmp/public_torch_{os.getpid()}")
    t = time.perf_counter()
    r = module.main(args)
    print(json.dumps({"row": row, "variant": variant, "seconds": r["seconds"], "wall": time.perf_counter() - t,
                      "steps": r["steps"]}))


def main() -> None:
    from common.cli import ArgumentParser, install_error_hook

    install_error_hook()
    p = ArgumentParser(description=__doc__, formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", choices=list(ROWS), default=list(ROWS))
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled")
    res: dict[tuple[str, str], list[float]] = {}
    for row in a.only:
        for _ in range(a.repeats):
            for variant in ("lean", "public"):  # interleaved: drift of the machine hits both alike
                out = subprocess.run([sys.executable, __file__, "--worker", variant, row], capture_output=True,
                                     text=True, env=env, check=True).stdout
                r = json.loads(out.strip().splitlines()[-1])
                res.setdefault((row, variant), []).append(r["seconds"])
                print(row, variant, f"{r['seconds']:.2f} s", flush=True)
    lines = ["# torch's public API against the lean copies (common/optim.py, common/distributions.py)", "",
             f"`python bench/public_torch.py` ({time.strftime('%Y-%m-%d')}, one thread, median training seconds of "
             f"{a.repeats} runs over the same steps; the numbers of both are the same bit for bit)", "",
             "| row | file, task | env steps | lean | public | lean speed-up |", "|---|---|---:|---:|---:|---:|"]
    for row in a.only:
        algo, env_id, steps = ROWS[row]
        lean, public = statistics.median(res[row, "lean"]), statistics.median(res[row, "public"])
        lines.append(f"| {row} | {algo} {env_id} | {steps:,} | {lean:.2f} s | {public:.2f} s | {public / lean:.2f}x |")
    OUT.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
    else:
        main()
