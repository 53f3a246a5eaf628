"""Learning tests of the off-policy family on fixed seeds (10-60 s each on one CPU thread):
DDPG, TD3, SAC, ModSAC and REDQ solve Pendulum-v1 (a deterministic 10-episode eval >= -200) for
good by 6k steps (every evaluation from there on), FastTD3 reaches >= -250; Double DQN and D3QN
solve CartPole-v1 (>= 475) within 50k and 40k steps; Double DQN and D3QN with advantage learning
(opt-in) hold >= 400 (the median of the late evaluations); TD3 with pink exploration noise reaches
>= 90 on MountainCarContinuous-v0; prioritized replay learns for one DQN-family and one
actor-critic algorithm. The Pendulum-v1 cases run each file's Pendulum-v1 row
(64x64 nets; FastTD3: 128x128) for 8k steps: on one CPU thread the update cost is what bounds these
tests."""

import importlib
import json
from pathlib import Path

import pytest

from algos import double_dqn, td3
from conftest import OFFPOLICY_PENDULUM, assert_solved_and_stays, pendulum_row

pytestmark = pytest.mark.slow  # trains to a threshold
CARTPOLE = dict(env="CartPole-v1", seed=1, eval_every=0, save_every=0, quiet=True)

CASES = {
    # each file's Pendulum-v1 row (tests/conftest.py), 8k steps, evaluated every 2k: solved (-200)
    # for good by 6k: at every evaluation from one at or before 6k on (STAYS)
    "ddpg": ("ddpg", pendulum_row("ddpg", eval_every=2_000), -200),
    "td3": ("td3", pendulum_row("td3", eval_every=2_000), -200),
    "sac": ("sac", pendulum_row("sac", eval_every=2_000), -200),
    # the row's evaluations swing on seed 1 (-643 at 12k, -147 at 14k-18k, -186 at 20k): the file's
    # MuJoCo-sized defaults scaled to Pendulum instead, 4 envs, 128x128, batch 256, lr 1e-3 (td3's),
    # 2k random steps
    "fast_td3": (
        "fast_td3",
        {
            **OFFPOLICY_PENDULUM,
            "num_envs": 4,
            "hidden": (128, 128),
            "total_steps": 10_000,
            "batch_size": 256,
            "actor_lr": 1e-3,
            "critic_lr": 1e-3,
            "learning_starts": 2_000,
            "norm_obs": False,
        },
        -250,
    ),
    "modsac": ("modsac", pendulum_row("modsac", eval_every=2_000), -200),
    "redq": ("redq", pendulum_row("redq", eval_every=2_000), -200),
    "sac-per": ("sac", pendulum_row("sac", per=True, eval_every=2_000), -200),
    # td3's MountainCarContinuous-v0 row (pink exploration noise), to 40k of its 50k steps (every
    # held-out seed of the sweep behind it was >= 90 from 35k on); white noise never left the valley
    # there
    "td3-mcc-pink": (
        "td3",
        {
            **td3.TASK_DEFAULTS["MountainCarContinuous-v0"],
            "env": "MountainCarContinuous-v0",
            "seed": 1,
            "eval_every": 0,
            "save_every": 0,
            "quiet": True,
            "total_steps": 40_000,
        },
        90,
    ),
    # CartPole-v1, evaluated every 5k: the paper's algorithms (double_dqn's row, d3qn's defaults),
    # and d3qn with advantage learning (`--action-gap 0.9`, opt-in), which holds a solved CartPole
    # where plain d3qn dips on seed 1 (see HOLDS below; measured runs: bench/NOTES.md, "advantage
    # learning")
    "double_dqn": (
        "double_dqn",
        {
            **double_dqn.TASK_DEFAULTS["CartPole-v1"],
            **CARTPOLE,
            "total_steps": 50_000,
            "eval_every": 5_000,
        },
        400,
    ),
    "d3qn": ("d3qn", {**CARTPOLE, "total_steps": 40_000, "eval_every": 5_000}, 400),
    "d3qn-al": (
        "d3qn",
        {**CARTPOLE, "total_steps": 40_000, "eval_every": 5_000, "action_gap": 0.9},
        400,
    ),
    # PER with the paper's Q-learning, 4 updates of batch 256 per vector step, 50k steps (dqn's
    # CartPole-v1 row before issue 57's: the row now anneals its rate over a 100k-step budget)
    "dqn-per": (
        "dqn",
        {"gradient_steps": 4, "batch_size": 256, **CARTPOLE, "per": True, "total_steps": 50_000},
        400,
    ),
}


# The DQN family's greedy policy on CartPole-v1 swings between solved and not after it first solves
# it, so whether the one evaluation at the end lands in a dip is a draw (the last bit of the
# optimizer's rounding, or another CPU, moves it; bench/NOTES.md, "advantage learning", has the
# measured curves). These cases assert what held on every seed measured instead: 475 reached within
# the run, and the median of the evaluations from the step given here on (the lower one of an even
# count) >= the threshold. Plain d3qn (the paper's) reaches 475 but does not hold it on seed 1;
# REACH asserts only the first.
HOLDS = {"double_dqn": 30_000, "d3qn-al": 20_000}
# the stable solve (issue 57) on Pendulum-v1: -200 for good by 6k, every evaluation from there on
STAYS = {"ddpg", "td3", "sac", "modsac", "redq", "sac-per"}
REACH = {"d3qn"}


@pytest.mark.parametrize("case", list(CASES))
def test_learns(case, tmp_path, monkeypatch):
    name, kw, threshold = CASES[case]
    module = importlib.import_module(f"algos.{name}")
    # log at every iteration (not once a second of wall time): the delay's whole course
    if name == "modsac":
        import common.logger

        monkeypatch.setattr(common.logger.Ticks.__init__, "__defaults__", (0.0,))
    result = module.main(module.Args(out_dir=str(tmp_path), **kw))
    print(case, result)
    if case in STAYS:
        assert_solved_and_stays(result, threshold, by=6_000)
    if case in HOLDS or case in REACH:
        rows = [json.loads(line) for line in open(Path(result["run_dir"]) / "metrics.jsonl")]
        evals = [(r["step"], r["eval_return"]) for r in rows if "eval_return" in r]
        print(case, evals)
        assert any(ret >= 475 for step, ret in evals), f"{case}: never 475: {evals}"
        if case in REACH:
            return
        late = sorted(ret for step, ret in evals if step >= HOLDS[case])
        assert len(late) >= 4 and late[(len(late) - 1) // 2] >= threshold, (
            f"{case}: the median of the evaluations from {HOLDS[case]} on < {threshold}: {evals}"
        )
        return
    assert result["eval_return"] >= threshold, (
        f"{case}: eval {result['eval_return']:.1f} < {threshold}"
    )
    if name == "modsac":  # the policy delay really adapted (logged at every iteration here)
        delays = [
            r["policy_delay"]
            for r in map(json.loads, open(Path(result["run_dir"]) / "metrics.jsonl"))
        ]
        assert min(delays) == 1 and max(delays) > 1, delays
