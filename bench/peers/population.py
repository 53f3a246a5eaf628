"""Population training (`python -m population`, this project's own) as a row of the benchmark: the
row's command line in, our metrics schema out, like the peers' adapters (the runner runs it with the
project's interpreter).

    python bench/peers/population.py tournament --env Pendulum-v1 --seed 1 --total-steps 262144 \\
        --eval-every 8192 --eval-episodes 10 --out-dir runs --population 4 \\
        --vary learning_rate=3e-4,1e-3,3e-3,1e-2 --learning-rate 1e-3 --num-envs 64 ...

`--eval-every` is the round (each member's steps between selections), `--total-steps` the whole
population's steps (P members x R rounds x the round); `--population`, `--vary` and
`--pop-eval-episodes` (the episodes that score every round: what the selection ranks) go to the
population, every other flag to each member's algorithm file. Members get algorithm seed 100 x
seed + member. Metrics, one row a round as it ends: the population's steps so far, its wall seconds
(start-up and the rounds' scoring included), and `eval_return`, the best round score so far: the
leaderboard's best entry, what the population hands over at that point (a maximum of noisy scores,
so optimistic). The final row re-scores that entry on gymnasium's env from GYM_SEED (`gym_return`),
episodes no selection saw.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("mode", choices=("tournament", "generational"))
    for name, kind in (("env", str), ("seed", int), ("total_steps", int), ("eval_every", int),
                       ("eval_episodes", int), ("out_dir", str)):  # fmt: skip
        p.add_argument("--" + name.replace("_", "-"), type=kind, required=True)
    p.add_argument("--population", type=int, default=4)
    p.add_argument("--vary", default="")
    p.add_argument("--pop-eval-episodes", type=int, default=50)
    a, algo_flags = p.parse_known_args()
    from experiments import GYM_SEED
    from tools.evaluate import gym_rollouts, load_policy

    rounds, rest = divmod(a.total_steps, a.population * a.eval_every)
    if rest or not rounds:
        p.error("--total-steps must be a multiple of --population x --eval-every (the round)")
    out = Path(a.out_dir) / f"{a.env}__population-{a.mode}__s{a.seed}__{time.strftime('%H%M%S')}"
    out.mkdir(parents=True)
    cmd = [
        sys.executable, "-m", "population", "--algo", "algos/ppo_vec.py", "--mode", a.mode,
        "--population", str(a.population), "--rounds", str(rounds),
        "--steps-per-round", str(a.eval_every), "--seed", str(a.seed), "--dir", str(out / "pop"),
        *(["--vary", a.vary] if a.vary else []), "--eval-episodes", str(a.pop_eval_episodes),
        "--", "--env", a.env, "--save-every", "0", "--seed", str(100 * a.seed), *algo_flags,
    ]  # fmt: skip
    t0 = time.time()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    events = [json.loads(x) for x in (out / "pop" / "population.jsonl").read_text().splitlines()]
    rows, steps, best = [], 0, -float("inf")
    for e in sorted((e for e in events if e["event"] == "round"), key=lambda e: e["time"]):
        steps, best = steps + e["trained"], max(best, e["score"])
        rows.append(dict(step=steps, seconds=round(e["time"] - t0, 3), eval_return=best))
    board = json.loads((out / "pop" / "leaderboard.json").read_text())
    policy, _ = load_policy(board[0]["checkpoint"])
    r = gym_rollouts(policy, a.env, a.eval_episodes, seed=GYM_SEED)
    rows.append(dict(step=steps, gym_return=r["eval_return"], gym_return_std=r["eval_return_std"],
                     gym_returns=r["returns"], best_entry=board[0]["id"]))  # fmt: skip
    (out / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))


if __name__ == "__main__":
    main()
