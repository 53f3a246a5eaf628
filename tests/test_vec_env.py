"""The vec-env contract: `envs.make`, autoreset/final_obs through the gymnasium fallback, and
clear errors on bad input."""

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
from gymnasium.vector import AutoresetMode

from envs.base import TorchVecEnv


@pytest.mark.parametrize("env_id", sorted(envs.NATIVE))
def test_native_contract(env_id):
    env = envs.make(env_id, num_envs=16, seed=0)
    assert isinstance(env, TorchVecEnv) and isinstance(env, gym.vector.VectorEnv)
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    obs, info = env.reset(seed=0)
    assert obs.shape == (16, *env.single_observation_space.shape) and obs.dtype == torch.float32
    assert env.observation_space.shape == (16, *env.single_observation_space.shape)
    space = env.single_action_space
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        a = torch.as_tensor(env.action_space.sample())
    else:
        a = torch.rand(16, *space.shape) * 2 - 1
    obs, reward, term, trunc, info = env.step(a)
    assert reward.shape == (16,) and reward.dtype == torch.float32
    assert term.dtype == torch.bool and trunc.dtype == torch.bool
    assert info["final_obs"].shape == obs.shape and info["_final_obs"].shape == (16,)


def test_gymnasium_fallback_autoreset_and_final_obs():
    # CartPole-v0 is not torch-native here: it goes through gymnasium.make_vec (200-step limit).
    env = envs.make("CartPole-v0", num_envs=3, seed=0, vectorization_mode="sync")
    assert type(env).__name__ == "GymnasiumVecEnv"
    assert env.metadata["autoreset_mode"] == AutoresetMode.SAME_STEP
    ref = gym.make_vec(
        "CartPole-v0",
        num_envs=3,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
    )
    obs, _ = env.reset(seed=0)
    ref_obs, _ = ref.reset(seed=0)
    np.testing.assert_array_equal(obs.numpy(), ref_obs)
    rng = np.random.default_rng(0)
    ends = 0
    for _ in range(300):
        a = rng.integers(0, 2, 3)
        obs, r, term, trunc, info = env.step(torch.as_tensor(a))
        ref_obs, ref_r, ref_term, ref_trunc, ref_info = ref.step(a)
        np.testing.assert_array_equal(obs.numpy(), ref_obs)
        np.testing.assert_array_equal(term.numpy(), ref_term)
        done = term | trunc
        for i in np.flatnonzero(done.numpy()):
            np.testing.assert_array_equal(info["final_obs"][i].numpy(), ref_info["final_obs"][i])
            ends += 1
        assert torch.equal(info["_final_obs"], done)
    assert ends > 5


def test_gymnasium_fallback_truncation_flags():
    env = envs.make("CartPole-v0", num_envs=2, seed=0, vectorization_mode="sync")
    env.reset(seed=0)
    # a balancing rule keeps the pole up until the 200-step limit of v0
    obs, _ = env.reset(seed=0)
    truncated_at = None
    for t in range(1, 201):
        a = (obs[:, 2] + 0.5 * obs[:, 3] > 0).long()
        obs, r, term, trunc, info = env.step(a)
        assert not term.any(), "the balancing rule should not drop the pole"
        if trunc.any():
            truncated_at = t
            break
    assert truncated_at == 200 and trunc.all()


def test_async_fallback_matches_sync():
    a_env = envs.make("CartPole-v0", num_envs=2, seed=3, vectorization_mode="async")
    s_env = envs.make("CartPole-v0", num_envs=2, seed=3, vectorization_mode="sync")
    oa, _ = a_env.reset()
    os_, _ = s_env.reset()
    assert torch.equal(oa, os_)
    for _ in range(30):
        act = torch.tensor([0, 1])
        assert torch.equal(a_env.step(act)[0], s_env.step(act)[0])
    a_env.close()


@pytest.mark.parametrize("threads, n, mode", [(2, 32, "sync"), (4, 32, "async"), (4, 4, "sync")])
def test_host_sub_envs_in_workers_only_with_cores_for_them(monkeypatch, threads, n, mode):
    # a worker process a sub-env costs a pipe round trip a step: in-process on a run of a few
    # threads (a 2-core host, or runs side by side at one thread each), workers from 4
    import envs.gym_adapter as adapter

    monkeypatch.setattr(adapter, "simulator_threads", lambda: threads)
    env = envs.make("CartPole-v0", num_envs=n, seed=0)
    kind = gym.vector.AsyncVectorEnv if mode == "async" else gym.vector.SyncVectorEnv
    assert isinstance(env.env, kind), type(env.env)
    env.close()


# ---- bad input -----------------------------------------------------------------------------------
def test_unknown_id_suggests():
    with pytest.raises(ValueError, match="unknown env id 'CartPol-v1'.*Did you mean 'CartPole-v1'"):
        envs.make("CartPol-v1")


def test_unknown_id_suggests_the_newest_version():
    # gymnasium still registers Walker2d-v2/-v3, which need mujoco-py: not offered
    with pytest.raises(ValueError, match=r"Did you mean 'Walker2d-v5'[^?]*\?") as e:
        envs.make("Walker-v5")
    assert "Walker2d-v3" not in str(e.value) and "Walker2d-v4" not in str(e.value)


def test_an_id_whose_simulator_is_gone_names_the_newer_one():
    with pytest.raises(ValueError, match="HalfCheetah-v2 cannot be made.*; use HalfCheetah-v5$"):
        envs.make("HalfCheetah-v2")


@pytest.mark.parametrize("n", [0, -3, 2.5, True])
def test_bad_num_envs(n):
    with pytest.raises(ValueError, match="num_envs must be a positive integer"):
        envs.make("CartPole-v1", num_envs=n)


def test_wrong_action_shape_dtype_device_type():
    env = envs.make("CartPole-v1", num_envs=4)
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"expects shape \(4,\)"):
        env.step(torch.zeros(4, 1, dtype=torch.long))
    with pytest.raises(TypeError, match="integer tensor"):
        env.step(torch.zeros(4))
    with pytest.raises(TypeError, match="torch.Tensor"):
        env.step(np.zeros(4, dtype=np.int64))
    with pytest.raises(ValueError, match=r"integers in \[0, 2\)"):
        env.step(torch.tensor([0, 1, 2, 0]))
    cont = envs.make("Pendulum-v1", num_envs=4)
    cont.reset(seed=0)
    with pytest.raises(ValueError, match=r"expects shape \(4, 1\)"):
        cont.step(torch.zeros(4))
    with pytest.raises(TypeError, match="floating-point"):
        cont.step(torch.zeros(4, 1, dtype=torch.long))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_an_env_made_on_cpu_0_takes_cpu_tensors(env_id):
    """A CPU tensor's device has no index, so an env made on "cpu:0" (found by tests/test_fuzz.py)
    must take the tensors made on its own `env.device`."""
    env = envs.make(env_id, num_envs=2, device="cpu:0")
    env.reset(seed=0)
    assert env.device == torch.device("cpu")
    env.step(torch.as_tensor(np.stack([env.single_action_space.sample()] * 2), device="cpu:0"))


def test_nan_action_raises():
    env = envs.make("Pendulum-v1", num_envs=3)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="NaN"):
        env.step(torch.tensor([[0.0], [float("nan")], [1.0]]))
    # NaN survives RescaleAction's clipping and is still reported
    from common.wrappers import wrap_env

    wrapped = wrap_env(envs.make("Pendulum-v1", num_envs=2))
    wrapped.reset(seed=0)
    with pytest.raises(ValueError, match="NaN"):
        wrapped.step(torch.tensor([[float("nan")], [0.0]]))


def test_evaluate_runs_on_native_and_gymnasium_ids():
    from common.evaluate import evaluate

    def upright(obs):  # a hand-made balancing rule
        return (obs[:, 2] + 0.5 * obs[:, 3] > 0).long()

    native = evaluate(upright, "CartPole-v1", episodes=3, seed=0)
    host = evaluate(upright, "CartPole-v0", episodes=3, seed=0)  # gymnasium adapter, 200-step limit
    assert native["eval_length"] == 500 and host["eval_length"] == 200
    assert native["returns"] == [500.0] * 3 and host["returns"] == [200.0] * 3


# ---- torch.inference_mode: rsl_rl steps envs inside it; training code steps them outside ---------
INFERENCE_IDS = [
    *envs.NATIVE,
    *(f"MinAtar/{g}-v1" for g in ("Breakout", "Seaquest")),
    *envs.VARIANTS,
    *envs.MULTI_AGENT,
    *envs.MUJOCO_IDS,
    "InvertedPendulum-v5",
]


def _tensors(obs) -> list:
    """An observation's tensors: its groups (a dict), or itself."""
    return list(obs.values()) if isinstance(obs, dict) else [obs]


def _random_actions(env):
    return torch.as_tensor(env.action_space.sample())


@pytest.mark.parametrize("env_id", INFERENCE_IDS)
def test_stepping_inside_then_outside_inference_mode(env_id):
    """Made, reset and stepped in `torch.inference_mode()`, then stepped, reset, checkpointed and
    used in autograd outside it, then inside again: no `Inplace update to inference tensor` (the
    in-place `elapsed += 1` used to raise it), and what the env returns is a normal tensor."""
    from common.wrappers import wrap_env

    with torch.inference_mode():
        env = envs.make(env_id, num_envs=3, seed=0)
        if env_id not in envs.MULTI_AGENT:  # (an image is not normalized: scaled in the model)
            env = wrap_env(env, norm_obs=env_id not in envs.MINATAR, norm_reward=True)
        env.reset(seed=0)
        for _ in range(3):
            env.step(_random_actions(env))
    for _ in range(3):
        obs, reward, *_ = env.step(_random_actions(env))
    assert not any(x.is_inference() for x in _tensors(obs)) and not reward.is_inference()
    obs, _ = env.reset(seed=1)
    env.load_state_dict(env.state_dict())
    obs, reward, *_ = env.step(_random_actions(env))
    # the observation groups of envs.VARIANTS side by side
    obs = torch.cat([x.flatten(1) for x in _tensors(obs)], -1)
    weight = torch.ones(obs[0].numel(), requires_grad=True)
    # an inference tensor cannot be saved for backward
    (obs.flatten(1).float() @ weight).sum().backward()
    assert weight.grad is not None
    with torch.inference_mode():
        env.step(_random_actions(env))
    env.step(_random_actions(env))
    env.close()


def test_a_users_env_subclass_gets_the_same_guarantee():
    class Counter(TorchVecEnv):  # a user's task that overrides `step` with in-place state updates
        env_id = "Counter-v0"

        def __init__(self, num_envs=2, device="cpu", seed=None):
            box = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
            super().__init__(num_envs, box, box, device, seed=seed)

        def _sample_initial_state(self, n):
            return torch.zeros(n, 1)

        def _observe(self, state):
            return state.clone()

        def step(self, actions):
            self.state += actions
            zeros = torch.zeros(self.num_envs, dtype=torch.bool)
            return (
                self.state.clone(),
                self.state[:, 0],
                zeros,
                zeros,
                {"final_obs": self.state.clone(), "_final_obs": zeros},
            )

    with torch.inference_mode():
        env = Counter()
        env.step(torch.ones(2, 1))
    obs, *_ = env.step(torch.ones(2, 1))
    assert obs.tolist() == [[2.0], [2.0]] and not obs.is_inference()
