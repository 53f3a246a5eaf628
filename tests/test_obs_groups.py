"""Observation groups (`{"policy": ..., "critic": ...}`, IsaacLab's convention) and the asymmetric
critic of the PPO files: the contract check, per-group normalization, the critic reading the
`critic` group and the actor the `policy` group, exact resume, a deployed policy (load_policy,
export) taking the policy group only, and files without an asymmetric critic refusing such an
env."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from conftest import ROOT

import envs
import envs.partial
from common.encoders import group_dims
from envs.base import check_env
from common.wrappers import NormalizeObservation, wrap_env

PRIV = "CartPoleNoVel-Privileged-v0"
SMALL = dict(
    env=PRIV,
    num_envs=8,
    num_steps=8,
    num_minibatches=2,
    total_steps=8 * 8 * 6,
    eval_every=8 * 8 * 3,
    save_every=8 * 8 * 2,
    eval_episodes=2,
    quiet=True,
    norm_obs=True,
    tensorboard=False,
)


def test_partially_observed_envs_keep_the_contract_and_the_full_dynamics():
    full = envs.make("CartPole-v1", num_envs=6, seed=3)
    priv = envs.make(PRIV, num_envs=6, seed=3)
    plain = envs.make("CartPoleNoVel-v0", num_envs=6, seed=3)
    check_env(envs.make(PRIV, num_envs=6, seed=3), 6, "cpu")
    assert group_dims(priv.single_observation_space) == (2, 4) and group_dims(
        plain.single_observation_space
    ) == (2, 0)
    o, _ = full.reset(seed=3)
    p, _ = priv.reset(seed=3)
    q, _ = plain.reset(seed=3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(60):
        a = torch.randint(0, 2, (6,), generator=gen)
        o, r, term, trunc, info = full.step(a)
        p, r2, term2, _, info2 = priv.step(a)
        q, *_ = plain.step(a)
        assert (
            torch.equal(p["critic"], o)
            and torch.equal(p["policy"], o[:, [0, 2]])
            and torch.equal(q, p["policy"])
        )
        assert torch.equal(r2, r) and torch.equal(term2, term)
        assert torch.equal(info2["final_obs"]["critic"], info["final_obs"])


def test_noisy_variant_adds_noise_to_the_policy_group_only():
    full = envs.make("CartPole-v1", num_envs=256, seed=2)
    noisy = envs.make("CartPoleNoisy-Privileged-v0", num_envs=256, seed=2)
    o, _ = full.reset(seed=2)
    p, _ = noisy.reset(seed=2)
    assert torch.equal(p["critic"], o)
    std = (p["policy"] - o).std(0)
    assert torch.allclose(std, torch.tensor(envs.partial.CARTPOLE_NOISE), rtol=0.15), std
    again = envs.make("CartPoleNoisy-Privileged-v0", num_envs=256, seed=2)
    assert torch.equal(again.reset(seed=2)[0]["policy"], p["policy"])  # the noise is seeded


def test_normalization_keeps_one_set_of_statistics_per_group():
    env = wrap_env(envs.make(PRIV, num_envs=16, seed=1), norm_obs=True)
    norm = (
        env.env
        if isinstance(env.env, NormalizeObservation)
        else next(e for e in [env, env.env, env.env.env] if isinstance(e, NormalizeObservation))
    )
    obs, _ = env.reset(seed=1)
    for _ in range(50):
        obs, *_ = env.step(torch.randint(0, 2, (16,)))
    assert norm.rms is norm.group_rms["policy"] and norm.group_rms["critic"].mean.shape == (4,)
    assert torch.allclose(
        norm.group_rms["critic"].mean[[0, 2]].float(), norm.rms.mean.float(), atol=1e-6
    )
    sd = env.state_dict()
    other = wrap_env(envs.make(PRIV, num_envs=16, seed=1), norm_obs=True)
    other.load_state_dict(sd)
    other_norm = next(
        e for e in [other, other.env, other.env.env] if isinstance(e, NormalizeObservation)
    )
    assert torch.equal(other_norm.group_rms["critic"].var, norm.group_rms["critic"].var)


@pytest.mark.parametrize("name", ["ppo_vec", "a2c", "ppo_h", "ppo_rnn"])
def test_ppo_files_feed_the_critic_group_to_the_value_function(name, tmp_path, monkeypatch):
    from conftest import checkpoint_params, run_with_snapshots

    module = importlib.import_module(f"algos.{name}")
    # a2c: no minibatches
    small = {k: v for k, v in SMALL.items() if k in module.Args.__dataclass_fields__}
    args = module.Args(out_dir=str(tmp_path / "a"), **small)
    result, snaps = run_with_snapshots(module, args, monkeypatch)
    ckpt = torch.load(result["checkpoint"], weights_only=False)
    critic, actor = (
        ("critic_rnn.weight_ih", "actor_rnn.weight_ih")
        if name == "ppo_rnn"
        else ("critic.0.weight", "actor.0.weight")
    )
    assert ckpt["model"][critic].shape[1] == 4 and ckpt["model"][actor].shape[1] == 2
    assert ckpt["policy_spec"]["obs_shape"] == [2]  # the deployed policy reads the policy group
    resumed = module.main(
        module.Args(resume=str(snaps[0]), **{**small, "out_dir": str(tmp_path / "b")})
    )
    for k, v in checkpoint_params(result["checkpoint"]).items():  # exact resume with groups
        assert torch.equal(v, checkpoint_params(resumed["checkpoint"])[k]), k
    policy = module.load_policy(result["checkpoint"])
    # the deployed policy takes the policy group only
    assert policy(torch.zeros(5, 2)).shape == (5,)


def test_a_privileged_checkpoint_exports_with_the_policy_group_only(tmp_path):
    pytest.importorskip("onnxruntime")
    from algos import ppo_vec
    from tools import export

    ckpt = ppo_vec.main(ppo_vec.Args(out_dir=str(tmp_path), **SMALL))["checkpoint"]
    out = export.main(
        export.Args(
            checkpoint=ckpt, torchscript=str(tmp_path / "p.pt"), onnx=str(tmp_path / "p.onnx")
        )
    )
    assert out["torchscript"]["max_abs_diff"] <= 1e-5 and out["onnx"]["max_abs_diff"] <= 1e-5
    assert torch.jit.load(str(tmp_path / "p.pt"))(torch.zeros(3, 2)).shape == (3,)


@pytest.mark.parametrize("name", ["sac", "dqn"])
def test_files_without_an_asymmetric_critic_refuse_groups(name, tmp_path):
    from envs.classic_control import Pendulum
    from envs.partial import factory

    module = importlib.import_module(f"algos.{name}")
    if "PendulumNoVel-Privileged-test" not in envs.CUSTOM:
        envs.register(
            "PendulumNoVel-Privileged-test",
            factory(Pendulum, (0, 1), True, "PendulumNoVel-Privileged-test"),
        )
    env = PRIV if name == "dqn" else "PendulumNoVel-Privileged-test"
    with pytest.raises(ValueError, match="observation groups .*ppo_vec"):
        module.main(module.Args(env=env, out_dir=str(tmp_path), total_steps=1000, quiet=True))
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_the_privileged_critic_measurably_helps_on_noisy_cartpole(tmp_path):
    """The benchmark's asymmetric rows (bench/experiments.py), seed 1: the noise-free critic group
    lifts the final return of the same noisy-observation policy (measured 446.5 vs 191.9; seeds
    1-3: bench/results/asymmetric/asymmetric.md)."""
    import dataclasses

    from algos import ppo_vec

    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    from experiments import ASYMMETRIC

    row = ASYMMETRIC[0]
    settings = dict(row.flags, total_steps=row.steps, eval_every=row.eval_every, quiet=True)

    final = {}
    for env_id in ("CartPoleNoisy-v0", "CartPoleNoisy-Privileged-v0"):
        args = dataclasses.replace(
            ppo_vec.default_args(env_id), env=env_id, seed=1, out_dir=str(tmp_path), **settings
        )
        final[env_id] = ppo_vec.main(args)["eval_return"]
    print(final)
    assert final["CartPoleNoisy-Privileged-v0"] >= 420
    assert final["CartPoleNoisy-Privileged-v0"] >= final["CartPoleNoisy-v0"] + 40


@pytest.mark.parametrize("name", ["ppo_vec", "ppo_rnn", "dqn", "pqn"])
def test_check_args_takes_the_env_as_made_or_as_the_file_wraps_it(name):
    """A file's `check_args` runs on its own wrapped env (named groups: `ObsGroups`) and on a plain
    `envs.make` env (population/ checks a member's settings that way), and refuses a critic group it
    cannot use."""
    module = __import__(f"algos.{name}", fromlist=["x"])
    args = module.Args(env="MaskedWalk-v0", total_steps=1_000_000)
    module.check_args(args, envs.make("MaskedWalk-v0", num_envs=2))
    module.check_args(args, module.make_env(args, "cpu", 0))
    if name in ("dqn", "pqn"):
        with pytest.raises(ValueError, match="observation groups"):
            module.check_args(
                module.Args(env="CartPoleNoVel-Privileged-v0"),
                envs.make("CartPoleNoVel-Privileged-v0"),
            )


def _camera_with_state(num_envs, device, seed, **kw):
    """MinAtar Breakout split as a robot task often is: the policy sees the camera (the uint8
    planes), the critic the simulator's state (ball, trail and paddle coordinates, flat float)."""
    import gymnasium as gym
    import numpy as np

    from common.vec_env import VecEnvWrapper
    from envs.minatar import Breakout

    keys = ("ball_x", "ball_y", "ball_dir", "pos", "last_x", "last_y")

    class CameraWithState(VecEnvWrapper):
        def __init__(self, env):
            super().__init__(env)
            critic = gym.spaces.Box(0.0, 1.0, (6,), np.float32)
            self.single_observation_space = gym.spaces.Dict(
                {"policy": env.single_observation_space, "critic": critic}
            )
            self.observation_space = gym.vector.utils.batch_space(
                self.single_observation_space, env.num_envs
            )

        def _groups(self, image, state):
            s = self.env.layout.unpack(state)
            return {"policy": image, "critic": torch.stack([s[k] for k in keys], 1).float() / 9}

        def reset(self, **kw):
            obs, info = self.env.reset(**kw)
            return self._groups(obs, self.env.state), info

        def step(self, actions):
            before = self.env.state.clone()
            obs, r, term, trunc, info = self.env.step(actions)
            # (the state before the last step stands in for the final one: enough for this test)
            final = torch.where((term | trunc)[:, None], before, self.env.state)
            info = {**info, "final_obs": self._groups(info["final_obs"], final)}
            return self._groups(obs, self.env.state), r, term, trunc, info

    return CameraWithState(Breakout(num_envs=num_envs, device=device, seed=seed))


def test_a_camera_policy_group_beside_a_flat_critic_group(tmp_path):
    """The policy's group is an image (its conv encoder), the critic's a flat vector (its own
    MLP); the deployed policy takes the image alone."""
    from algos import ppo_vec

    envs.register("CameraBreakout-v0", _camera_with_state)  # fmt: skip
    args = ppo_vec.Args(env="CameraBreakout-v0", num_envs=8, num_steps=16, num_minibatches=2,
                        total_steps=256, eval_every=0, out_dir=str(tmp_path))  # fmt: skip
    env = ppo_vec.make_env(args, torch.device("cpu"), 0)
    assert group_dims(env.single_observation_space) == (env.single_observation_space["policy"], 6)
    agent = ppo_vec.Agent(*group_dims(env.single_observation_space)[:1], env.single_action_space,
                          critic_dim=6)  # fmt: skip
    assert agent.image and agent.critic[0].in_features == 6
    assert agent.actor[0].in_features == agent.encoder[0].out_dim
    ckpt = ppo_vec.main(args)["checkpoint"]
    policy = ppo_vec.load_policy(ckpt)
    assert policy(torch.zeros(3, 4, 10, 10, dtype=torch.uint8)).shape == (3,)
