"""Wall time of the same short runs in two checkouts of this repository (a refactor's before and
after), one torch thread, evaluation and checkpoints off, the best of `--repeats` runs each; the
final evaluation beside it shows that a refactor which should not change the numbers did not.

    git worktree add /tmp/before <commit>
    python bench/micro/ab_speed.py --before /tmp/before --after . \\
        ppo_vec:CartPole-v1:100000 sac:Pendulum-v1:3000 ppo_vec:CartPole-v1:100000:num_envs=4

A run is `algo:env_id:total_steps`, its env's defaults, then any `field=value` over them.

Each run is its own process (its checkout first on sys.path), one at a time, the two sides
alternating, so that a drift of the machine's speed falls on both alike.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[n]) for n in (2, 1)]  # the repo, bench/
from micro.timing import ROOT, alternating, children, parser, script  # noqa: E402

SIDE = """
import ast, importlib, json, sys, time, torch
from dataclasses import replace
root, spec = sys.argv[1:]
sys.path.insert(0, root)
torch.set_num_threads(1)
algo, env, steps, *over = spec.split(":")
over = {k: ast.literal_eval(v) for k, v in (o.split("=", 1) for o in over)}
m = importlib.import_module("algos." + algo)
a = replace(m.default_args(env, device="cpu"), env=env, seed=1, total_steps=int(steps),
            eval_every=0, save_every=0, quiet=True, tensorboard=False, plots=False, device="cpu",
            out_dir="/tmp/ab_speed_runs", **over)
t = time.perf_counter()
r = m.main(a)
print(json.dumps([time.perf_counter() - t, r["eval_return"]]))
"""


def once(root: str, spec: str) -> list[float]:
    """[seconds, final evaluation] of one run of `spec` in checkout `root`."""
    root = str(Path(root).resolve())
    return children([sys.executable, "-c", SIDE, root, spec], cwd=root)[0]


def main() -> None:
    p = parser(__doc__)
    p.add_argument("specs", nargs="+", help="runs as algo:env_id:total_steps[:field=value...]")
    p.add_argument("--before", required=True, help="checkout before the change")
    p.add_argument("--after", default=str(ROOT), help="checkout after it (default: this one)")
    p.add_argument("--repeats", type=int, default=3, help="runs per side; the fastest counts")
    a = p.parse_args()
    print("| run | before s | after s | after / before | final eval before | final eval after |")
    print("|---|---:|---:|---:|---:|---:|")
    for spec in a.specs:
        before, after = (functools.partial(once, root, spec) for root in (a.before, a.after))
        runs = alternating(a.repeats, before=before, after=after)
        (tb, eb), (ta, ea) = min(runs["before"]), min(runs["after"])
        print(f"| {spec} | {tb:.2f} | {ta:.2f} | {ta / tb:.3f} | {eb:.1f} | {ea:.1f} |", flush=True)


if __name__ == "__main__":
    script(main)
