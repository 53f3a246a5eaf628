"""Learning tests of the off-policy family on fixed seeds (10-60 s each on one CPU thread):
DDPG, TD3, FastTD3, SAC, ModSAC and REDQ reach a deterministic 10-episode eval >= -250 on Pendulum-v1;
Double DQN and D3QN solve CartPole-v1 (>= 475) within 50k and 30k steps and hold >= 400 (the median of the
late evaluations); TD3 with pink exploration noise reaches >= 90 on
MountainCarContinuous-v0; prioritized replay learns for one DQN-family
and one actor-critic algorithm. The Pendulum-v1 cases run each file's Pendulum-v1 row (64x64 nets; FastTD3: 128x128)
for 8k steps: on one CPU thread the update cost is what bounds these tests."""

import importlib
import json
from pathlib import Path

import pytest

from algos import double_dqn, dqn, td3
from conftest import OFFPOLICY_PENDULUM, pendulum_row

pytestmark = pytest.mark.slow  # trains to a threshold
CARTPOLE = dict(env="CartPole-v1", seed=1, eval_every=0, save_every=0, quiet=True)

CASES = {
    # each file's Pendulum-v1 row (tests/conftest.py), 8k steps
    "ddpg": ("ddpg", pendulum_row("ddpg"), -250),
    "td3": ("td3", pendulum_row("td3"), -250),
    "sac": ("sac", pendulum_row("sac"), -250),
    # the row's evaluations swing on seed 1 (-643 at 12k, -147 at 14k-18k, -186 at 20k): the file's MuJoCo-sized
    # defaults scaled to Pendulum instead, 4 envs, 128x128, batch 256, lr 1e-3 (td3's), 2k random steps
    "fast_td3": ("fast_td3", {**OFFPOLICY_PENDULUM, "num_envs": 4, "hidden": (128, 128), "total_steps": 10_000,
                              "batch_size": 256, "actor_lr": 1e-3, "critic_lr": 1e-3, "learning_starts": 2_000,
                              "norm_obs": False}, -250),
    "modsac": ("modsac", pendulum_row("modsac"), -250),
    "redq": ("redq", pendulum_row("redq"), -250),
    "sac-per": ("sac", pendulum_row("sac", per=True), -250),
    # td3's MountainCarContinuous-v0 row (pink exploration noise), to 40k of its 50k steps (every held-out seed of the
    # sweep behind it was >= 90 from 35k on); white noise never left the valley there
    "td3-mcc-pink": ("td3", {**td3.TASK_DEFAULTS["MountainCarContinuous-v0"], "env": "MountainCarContinuous-v0", "seed": 1,
                             "eval_every": 0, "save_every": 0, "quiet": True, "total_steps": 40_000}, 90),
    # 50k (double_dqn's CartPole-v1 row: 4 updates per vector step, advantage learning) and 40k (d3qn's defaults) of
    # the 100k steps, evaluated every 5k: see HOLDS below. double_dqn's row on seeds 1-5 (2026-11-27, ~40 s each):
    # 215, 171, 215, 276, then 500 x6; 386, 242, 242, 177, 267, 396, 500 x4; 262, 242, 300, 245, 318, 500 x4, 480;
    # 361, 320, 334, 443, 385, 475, 495, 464, 500, 484; 204, 229, 212, 285, 409, 500 x5
    "double_dqn": ("double_dqn", {**double_dqn.TASK_DEFAULTS["CartPole-v1"], **CARTPOLE, "total_steps": 50_000,
                                  "eval_every": 5_000}, 400),
    "d3qn": ("d3qn", {**CARTPOLE, "total_steps": 40_000, "eval_every": 5_000}, 400),
    # PER with dqn's CartPole-v1 row (advantage learning, 4 updates of batch 256 per vector step) for 50k of its 100k
    # steps. Seeds 1-5 (2026-11-27, evaluations every 5k from 30k): 500 x5; 477, 500, 467, 465, 472; 434, 474, 500 x3;
    # 459, 384, 378, 434, 418; 478, 495, 483, 446, 500 (~60 s each). Plain Q-learning with the 8 x 128 updates ended in
    # a dip (97 at 100k on seed 1) and needed a slow setting here (200k steps, lr 2.5e-4, 1 update per vector step)
    "dqn-per": ("dqn", {**dqn.TASK_DEFAULTS["CartPole-v1"], **CARTPOLE, "per": True, "total_steps": 50_000}, 400),
}


# The DQN family's greedy policy on CartPole-v1 swings between solved and not after it first solves it: in
# evaluations every 5k steps of d3qn's seeds 1-5, most seeds dip to 99-352 between stretches at 500, so whether the
# one evaluation at the end lands in a dip is a draw (3/5 seeds >= 400 at 50k, with the fused Adam kernel and without:
# the last-bit rounding of the optimizer alone moves seed 1 from 500 to 193). These cases assert what held on every
# seed measured instead: 475 reached within the run, and the median of the evaluations from the step given here on
# (the lower one of an even count) >= the threshold. Seed 1, 2026-11-27: d3qn's 30k run evaluated 170, 128, 500,
# 286, 500, 500 every 5k with plain Q-learning and 157, 300, 427, 500, 367, 422 with advantage learning (its
# default since; the median from 15k is 422); double_dqn's 50k run with its dataclass defaults (8 updates, plain Q;
# evaluated every 2.5k) was 500 from 10k to 47.5k and 226 at 50k, while a 30k run of it dipped to 311 and 102 at
# 20k-25k (exploration anneals over 10% of the run, so a shorter run is another run); it runs its CartPole-v1 row
# since (~40 s, was ~75-90 s in the suite), whose 50k run is at 500 from 25k on seed 1.
# d3qn ran 30k steps with the median from 15k until a CI host with an AMD EPYC CPU evaluated seed 1 at 155, 213, 322,
# 455, 325, 500 (median 325; floating-point differences between CPUs act like another seed); its 40k run there:
# 160, 204, 392, 484, then 500 x4 (2026-11-27).
HOLDS = {"double_dqn": 30_000, "d3qn": 20_000}


@pytest.mark.parametrize("case", list(CASES))
def test_learns(case, tmp_path):
    name, kw, threshold = CASES[case]
    module = importlib.import_module(f"algos.{name}")
    result = module.main(module.Args(out_dir=str(tmp_path), **kw))
    print(case, result)
    if case in HOLDS:
        rows = [json.loads(line) for line in open(Path(result["run_dir"]) / "metrics.jsonl")]
        evals = [(r["step"], r["eval_return"]) for r in rows if "eval_return" in r]
        print(case, evals)
        assert any(ret >= 475 for step, ret in evals), f"{case}: never 475: {evals}"
        late = sorted(ret for step, ret in evals if step >= HOLDS[case])
        assert len(late) >= 4 and late[(len(late) - 1) // 2] >= threshold, \
            f"{case}: the median of the evaluations from {HOLDS[case]} on < {threshold}: {evals}"
        return
    assert result["eval_return"] >= threshold, f"{case}: eval {result['eval_return']:.1f} < {threshold}"
    if name == "modsac":  # the policy delay really adapted (it is logged at every logging tick)
        delays = [r["policy_delay"] for r in map(json.loads, open(Path(result["run_dir"]) / "metrics.jsonl"))]
        assert min(delays) == 1 and max(delays) > 1, delays
