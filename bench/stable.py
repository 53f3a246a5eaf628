"""Our side alone, by the stable solve (issue 57): each algorithm file with its own defaults for a
task (`python algos/<file>.py --env <id>`, nothing else but the evaluation cadence), over held-out
seeds, evaluated on gymnasium's env on one schedule, with bench/peers.py's worker and measures. It
answers, for the files that the peers table (PPO, DQN, PQN, SAC, TD3 against SB3) does not show:
does the final policy solve, and once solved, does it stay solved?

    python bench/stable.py                    # every file below, held-out seeds 11-13
    python bench/stable.py --only redq modsac --seeds 11 12 13 14 15
    python bench/stable.py --from-log bench/results/stable.jsonl   # the table again, no runs

Each run is its own process with one torch thread, one at a time. **Stable at**: the env steps of
the first evaluation after which every one to the end, the final policy's included, is at or above
the threshold ("never": the final policy is below it). **After the first hit**: the share of the
evaluations after each seed's first hit that are at or above it, seeds pooled.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import peers  # noqa: E402  (bench/peers.py: the worker and the measures)

CARTPOLE = dict(env="CartPole-v1", threshold=475.0, eval_every=2048)
PENDULUM = dict(env="Pendulum-v1", threshold=-200.0, eval_every=1000)
# file -> its task, threshold and evaluation cadence (the peers table's, per env)
FILES = {
    "a2c": CARTPOLE,
    "ppo_h": CARTPOLE,
    "ppo_rnn": CARTPOLE,
    "double_dqn": CARTPOLE,
    "d3qn": CARTPOLE,
    "ddpg": PENDULUM,
    "ddpg_h": PENDULUM,
    "td3_h": PENDULUM,
    "fast_td3": PENDULUM,
    "sac_h": PENDULUM,
    "modsac": PENDULUM,
    "redq": PENDULUM,
}


def run_one(file: str, seed: int, log) -> dict:
    t = FILES[file]
    flags = ["--env", t["env"], "--eval-every", str(t["eval_every"])]
    cmd = [sys.executable, "bench/peers.py", "--worker", file, "--seed", str(seed)]
    cmd += ["--threshold", f"{t['threshold']:g}", "--", *flags]
    return peers.run(cmd, log)


def row(file: str, runs: list[dict]) -> str:
    t = FILES[file]
    runs = sorted(runs, key=lambda r: r["seed"])
    finals = [peers.final_return(r) for r in runs]
    solved = sum(f is not None and f >= t["threshold"] for f in finals)
    stable = [peers.step_at(r, peers.stable_index) for r in runs]
    first = [peers.step_at(r, peers.first_index) for r in runs]
    after = [peers.after_first(r) for r in runs]
    held, total = sum(a[0] for a in after if a), sum(a[1] for a in after if a)
    secs = peers.median([peers.stable_secs(r) for r in runs])

    def steps(xs):
        return ", ".join("never" if x is None else f"{x:,}" for x in xs)

    return (
        f"| {file} | {t['env']} >= {t['threshold']:g} | {', '.join(str(r['seed']) for r in runs)} "
        f"| {solved}/{len(runs)} ({', '.join(peers.fmt(f) for f in finals)}) | {steps(stable)} "
        f"| {peers.fmt(secs, '.1f') if secs != float('inf') else 'never'} "
        f"| {f'{100 * held / total:.0f}% of {total}' if total else 'n/a'} | {steps(first)} "
        f"| {runs[0]['budget']:,} |"
    )


def table(results: dict[str, list[dict]]) -> str:
    head = (
        "Each file's own defaults for its task, our side alone (`bench/stable.py`): deterministic "
        "10-episode evaluations on gymnasium's env every `eval_every` env steps and on the final "
        "policy, one torch thread, one run at a time. Stable at: the first evaluation after which "
        "every one, the final policy's included, is at or above the threshold (env steps; 'never': "
        "the final policy is below it); stable s: the median training seconds to it.\n\n"
        "| file | task | seeds | final policy (per seed) | stable at (env steps) | stable s "
        "(median) | after the first hit | first hit at | budget |\n"
        "|---|---|---|---|---|---:|---|---|---:|"
    )
    return "\n".join([head, *(row(f, rs) for f, rs in results.items())])


def main() -> None:
    from common.cli import ArgumentParser

    p = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", choices=list(FILES), default=list(FILES))
    p.add_argument("--seeds", type=int, nargs="+", default=[11, 12, 13])
    p.add_argument("--log", default="bench/results/stable.jsonl", help="every run, a JSON line")
    p.add_argument("--from-log", metavar="JSONL", help="no runs: the table of a --log file")
    a = p.parse_args()
    if a.from_log:
        results: dict[str, list[dict]] = {}
        for line in open(ROOT / a.from_log):
            r = json.loads(line)
            results.setdefault(r["algo"], []).append(r)
        print(table(results))
        return
    log_path = ROOT / a.log
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = datetime.datetime.now(datetime.timezone.utc)
    results = {}
    with open(log_path, "w") as log:
        for file in a.only:
            results[file] = [run_one(file, seed, log) for seed in a.seeds]
            print(row(file, results[file]), flush=True)
    print(f"\n{started:%Y-%m-%d %H:%M} UTC, seeds {a.seeds}\n")
    print(table(results))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from common.cli import install_error_hook

    install_error_hook()
    main()
