"""A2C learns on fixed seeds: >= 400 on CartPole-v1 and >= -600 on Pendulum-v1, each with the file's row for the
task (Pendulum-v1: 16 envs x 8 steps, gamma 0.9, scaled rewards; A2C is weak there: the row's held-out seeds 1-5
ended at -357, -280, -558, -125, -400 after 400k steps, a uniform-random policy scores about -1200). Floating-point
differences between CPUs move A2C's final policy by ~100 (an AMD EPYC host against this Intel one), hence the
margin."""

from dataclasses import replace

import pytest

from algos import a2c

pytestmark = pytest.mark.slow  # trains to a threshold

CASES = {
    # the row to 200k of its 300k steps (seed 1, evaluated every 25k on 2026-11-27: 500 at 25k, 10-206 at 50k-125k,
    # 500 from 150k to 300k)
    "cartpole": (dict(env="CartPole-v1", total_steps=200_000), 400),
    # the row (400k steps; was an lr-1e-3 setting for 600k steps)
    "pendulum": (dict(env="Pendulum-v1"), -600),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a2c_learns(case, tmp_path):
    kw, threshold = CASES[case]
    # the task's defaults (its TASK_DEFAULTS row) with the case's settings over them
    args = replace(a2c.default_args(kw["env"], device="cpu"), out_dir=str(tmp_path), seed=1, eval_every=0,
                   save_every=0, quiet=True, **kw)
    result = a2c.main(args)
    print(case, result)
    assert result["eval_return"] >= threshold
