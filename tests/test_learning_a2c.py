"""A2C learns on fixed seeds: >= 400 on CartPole-v1 and >= -600 on Pendulum-v1, each with the file's
row for the task (Pendulum-v1: 16 envs x 8 steps, gamma 0.9, scaled rewards, here at lr 1e-3 for
600k steps; A2C is weak there: the row's held-out seeds 1-5 ended at -357, -280, -558, -125, -400
after 400k steps on an Intel host, a uniform-random policy scores about -1200). Floating-point
differences between CPUs move A2C's final policy a lot (seed 1 of the row: -357 on an Intel Xeon
host, -886 on an AMD EPYC one), hence the slower setting and the margin."""

from dataclasses import replace

import pytest

from algos import a2c

pytestmark = pytest.mark.slow  # trains to a threshold

CASES = {
    # the row to 200k of its 300k steps (seed 1, evaluated every 25k on 2026-11-27: 500 at 25k,
    # 10-206 at 50k-125k, 500 from 150k to 300k)
    "cartpole": (dict(env="CartPole-v1", total_steps=200_000), 400),
    # the row at lr 1e-3 for 600k steps (the row is lr 3e-3 for 400k: seed 1 ended at -357 on an
    # Intel Xeon host and at -886 on an AMD EPYC one, 2026-11-27; at lr 1e-3 seeds 1, 2, 3 ended at
    # -504, -360, -422 on the AMD host)
    "pendulum": (dict(env="Pendulum-v1", learning_rate=1e-3, total_steps=600_000), -600),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a2c_learns(case, tmp_path):
    kw, threshold = CASES[case]
    # the task's defaults (its TASK_DEFAULTS row) with the case's settings over them
    args = replace(
        a2c.default_args(kw["env"], device="cpu"),
        out_dir=str(tmp_path),
        seed=1,
        eval_every=0,
        save_every=0,
        quiet=True,
        **kw,
    )
    result = a2c.main(args)
    print(case, result)
    assert result["eval_return"] >= threshold
