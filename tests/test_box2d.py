"""The seed documents' first-run tasks, LunarLanderContinuous-v3 and BipedalWalker-v3 (gymnasium's
Box2D envs, host sub-envs through `envs.gym_adapter`), train with every single-agent file that takes
continuous actions: a few updates each, the final policy evaluated on the env and loadable."""

import importlib

import pytest

from conftest import FAMILIES, SMALL_RUNS, declaration

pytest.importorskip("Box2D", reason="gymnasium[box2d] (requirements.txt)")

# the single-agent files with continuous actions: the PPO family and the DDPG/TD3/SAC family
CONTINUOUS = [n for n in SMALL_RUNS if declaration(n)[1] in (FAMILIES[0], FAMILIES[2])]


@pytest.mark.slow
@pytest.mark.parametrize("algo", CONTINUOUS)
def test_box2d_tasks_train(algo, tmp_path):
    module = importlib.import_module(f"algos.{algo}")
    for env_id in ("LunarLanderContinuous-v3", "BipedalWalker-v3"):
        kw = dict(SMALL_RUNS[algo], env=env_id, out_dir=str(tmp_path), eval_episodes=2)
        kw.update(eval_every=0, save_every=0, tensorboard=False, plots=False)
        out = module.main(module.Args(**kw))
        assert out["steps"] == kw["total_steps"] // kw["num_envs"] * kw["num_envs"], env_id
        assert out["eval_return"] == out["eval_return"], env_id  # a number, not NaN
        policy = module.load_policy(out["checkpoint"])
        assert policy.env_id == env_id
