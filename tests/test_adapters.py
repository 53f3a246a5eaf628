"""Adapters between our vec-env contract and the interfaces other libraries train on.

* `envs.from_rsl_rl.FromRslRl` (rsl_rl's `VecEnv` -> ours) round-trips with
  `envs.rsl_rl.RslRlVecEnv` (ours -> rsl_rl's): our Hopper and Pendulum wrapped both ways give the
  same observations, rewards, termination/truncation flags and final observations as the env itself,
  step for step; without a `final_obs` in `extras` (IsaacLab's case) `final_obs` is the observation
  before the last step, and the flags are unchanged; a `critic` group becomes a dict observation.
* ppo_vec learns Pendulum through both adapters (the PPO learning test's setting and threshold), the
  env named on the command line as `module:factory`.
* `envs.sb3.Sb3VecEnv`: SB3's `VecEnv` steps are our env's steps (terminal observation, time-limit
  flag, episode info), and SB3's PPO learns CartPole on our batched env.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import envs
from conftest import ROOT
from envs.from_rsl_rl import FromRslRl

rsl = pytest.importorskip("rsl_rl", reason="test-only requirement: pip install rsl-rl-lib")
from envs.rsl_rl import RslRlVecEnv  # noqa: E402


def _actions(env, n, gen):
    space = env.single_action_space
    low, high = torch.as_tensor(space.low), torch.as_tensor(space.high)
    return low + (high - low) * torch.rand((n, *space.shape), generator=gen)


@pytest.mark.parametrize("env_id,steps", [("Hopper-v5", 300), ("Pendulum-v1", 420)])
def test_rsl_rl_adapters_round_trip(env_id, steps):
    """ours -> RslRlVecEnv -> FromRslRl is ours: same trajectories (Hopper: terminations; Pendulum:
    time limits)."""
    n, seed = 8, 5
    plain = envs.make(env_id, num_envs=n, seed=seed)
    obs0, _ = plain.reset(seed=seed)
    trip = FromRslRl(
        RslRlVecEnv(envs.make(env_id, num_envs=n, seed=seed), seed=seed),
        env_id=env_id,
        action_limit=float(plain.single_action_space.high.max()),
    )
    assert torch.equal(trip.reset()[0], obs0.float())
    assert (
        trip.max_episode_steps == plain.max_episode_steps
        and trip.single_observation_space.shape == obs0.shape[1:]
    )
    gen = torch.Generator().manual_seed(0)
    ends = {"terminated": 0, "truncated": 0}
    for _ in range(steps):
        a = _actions(plain, n, gen)
        want = plain.step(a)
        got = trip.step(a)
        for w, g in zip(want[:4], got[:4]):
            assert torch.equal(g, w.float() if w.dtype.is_floating_point else w)
        assert torch.equal(got[4]["final_obs"], want[4]["final_obs"].float())
        assert torch.equal(got[4]["_final_obs"], want[2] | want[3])
        ends["terminated"] += int(want[2].sum())
        ends["truncated"] += int(want[3].sum())
    key = "terminated" if env_id == "Hopper-v5" else "truncated"
    assert ends[key] > 0, ends


class _NoFinalObs:
    """An rsl_rl-interface env as IsaacLab's wrapper is: no final observation in `extras`, and
    groups."""

    def __init__(self, env):
        self.inner = env
        self.num_envs, self.num_actions, self.device = env.num_envs, env.num_actions, env.device
        self.max_episode_length = env.max_episode_length

    def get_observations(self):
        obs = self.inner.get_observations()
        return {
            "policy": obs["policy"][:, :2],
            "critic": obs["policy"],
            "extra": obs["policy"][:, :1],
        }

    def step(self, actions):
        _, rew, dones, extras = self.inner.step(actions)
        return self.get_observations(), rew, dones, {"time_outs": extras["time_outs"]}


def test_without_final_obs_the_previous_observation_stands_in():
    n = 4
    plain = envs.make("Pendulum-v1", num_envs=n, seed=2)
    plain.reset(seed=2)
    env = FromRslRl(_NoFinalObs(RslRlVecEnv(envs.make("Pendulum-v1", num_envs=n, seed=2), seed=2)))
    assert set(env.single_observation_space.spaces) == {"policy", "critic"}  # other groups dropped
    prev, _ = env.reset()
    gen = torch.Generator().manual_seed(1)
    for _ in range(205):
        a = 2 * torch.rand(n, 1, generator=gen) - 1
        _, _, term, trunc, _ = plain.step(a)
        obs, _, term2, trunc2, info = env.step(a)
        assert torch.equal(term2, term) and torch.equal(trunc2, trunc)
        assert torch.equal(info["final_obs"]["critic"], prev["critic"]) and obs["policy"].shape == (
            n,
            2,
        )
        prev = obs
    assert FromRslRl(
        _NoFinalObs(RslRlVecEnv(envs.make("Pendulum-v1", num_envs=n))), critic_group=None
    ).reset()[0].shape == (n, 2)
    with pytest.raises(ValueError, match="policy_group"):
        FromRslRl(
            _NoFinalObs(RslRlVecEnv(envs.make("Pendulum-v1", num_envs=n))), policy_group="actor"
        )
    with pytest.raises(TypeError, match="rsl_rl's VecEnv interface"):
        FromRslRl(object())


FACTORY = '''
import envs
from envs.from_rsl_rl import FromRslRl
from envs.rsl_rl import RslRlVecEnv


def make(num_envs, device="cpu", seed=None, **kw):
    """Pendulum through rsl_rl's interface and back, as an IsaacLab task would come in."""
    return FromRslRl(RslRlVecEnv(envs.make("Pendulum-v1", num_envs=num_envs, device=device, \
seed=seed), seed=seed),
                     action_limit=2.0, env_id="rsl_pendulum")
'''


@pytest.mark.slow
def test_ppo_vec_learns_through_the_adapters_named_on_the_command_line(tmp_path):
    from conftest import PPO_PENDULUM

    (tmp_path / "rsl_pendulum.py").write_text(FACTORY)
    flags = [
        f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}")
        for k, v in PPO_PENDULUM.items()
        if k not in ("env", "quiet")
    ]
    cmd = [
        sys.executable,
        str(ROOT / "algos" / "ppo_vec.py"),
        "--env",
        "rsl_pendulum:make",
        "--quiet",
        "--out-dir",
        str(tmp_path / "runs"),
        *" ".join(flags).split(),
    ]
    out = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    import json

    rows = [
        json.loads(line)
        for line in next((tmp_path / "runs").glob("*/metrics.jsonl")).read_text().splitlines()
    ]
    final = [r["eval_return"] for r in rows if "eval_return" in r][-1]
    print("ppo_vec on Pendulum through FromRslRl(RslRlVecEnv(.)):", final)
    assert final >= -300  # test_learning's threshold for the same setting on the env itself


def test_a_wrong_module_factory_is_one_line(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "algos" / "ppo_vec.py"), "--env", "no_such_module:make"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "no_such_module" in out.stderr and "Traceback" not in out.stderr


# ---- Stable-Baselines3 ---------------------------------------------------------------------------
def test_sb3_vec_env_steps_are_the_env_steps():
    pytest.importorskip(
        "stable_baselines3", reason="test-only requirement: pip install stable-baselines3"
    )
    import numpy as np

    from envs.sb3 import Sb3VecEnv

    n = 6
    plain = envs.make("Pendulum-v1", num_envs=n, seed=4)
    obs0, _ = plain.reset(seed=4)
    venv = Sb3VecEnv(envs.make("Pendulum-v1", num_envs=n))
    venv.seed(4)
    assert np.array_equal(venv.reset(), obs0.numpy())
    gen = torch.Generator().manual_seed(3)
    episodes = 0
    for _ in range(410):
        a = 4 * torch.rand(n, 1, generator=gen) - 2
        obs, reward, term, trunc, info = plain.step(a)
        got, rew, dones, infos = venv.step(a.numpy())
        assert np.array_equal(got, obs.numpy()) and np.array_equal(rew, reward.numpy())
        assert np.array_equal(dones, (term | trunc).numpy())
        for i in np.flatnonzero(dones):
            assert np.array_equal(infos[i]["terminal_observation"], info["final_obs"][i].numpy())
            assert infos[i]["TimeLimit.truncated"] is True and infos[i]["episode"]["l"] == 200
            episodes += 1
    assert episodes == 2 * n
    assert venv.get_attr("num_envs") == [n] * n and venv.env_is_wrapped(object) == [False] * n


@pytest.mark.slow
def test_sb3_ppo_learns_cartpole_on_our_batched_env():
    pytest.importorskip(
        "stable_baselines3", reason="test-only requirement: pip install stable-baselines3"
    )
    from stable_baselines3 import PPO

    from common.evaluate import evaluate
    from envs.sb3 import Sb3VecEnv

    venv = Sb3VecEnv(envs.make("CartPole-v1", num_envs=8, seed=1))
    model = PPO("MlpPolicy", venv, n_steps=128, batch_size=256, seed=1, device="cpu", verbose=0)
    model.learn(40_000)
    policy = lambda obs: torch.as_tensor(  # noqa: E731
        model.predict(obs.numpy(), deterministic=True)[0]
    )
    result = evaluate(policy, "CartPole-v1", episodes=10, seed=0)
    print("SB3 PPO on our CartPole (40k steps):", result["eval_return"])
    # learned, not solved: SB3's PPO at 40k steps is a draw (seeds 1, 2, 3: 268, 437, 359 on
    # 2026-11-26's CI machine, where seed 1 had scored >= 300 on an earlier one; 500, 304, 500 at
    # 60k); an untrained policy scores ~20
    assert result["eval_return"] >= 200
