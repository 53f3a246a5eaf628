"""Differential tests of the torch-native classic-control envs against `gymnasium.make(id)`.

Our env runs in float64 with N sub-envs next to N gymnasium envs; both start from the same
states and get the same (seeded, partly out-of-bound) actions. Every step compares the next
physical state, the reward, the flags and the observation; where our env autoresets a row, the
gymnasium env of that row is reset and re-synced to our fresh start state.
"""

from __future__ import annotations

import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from envs import NATIVE, make

IDS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0", "Pendulum-v1"]
N = 8
STEPS = 200
TOL = 1e-12  # state / reward tolerance in float64
# gymnasium stores MountainCarContinuous's state as float32 and, through NumPy 2's promotion of
# Python-float vs NumPy scalars, does some of its arithmetic in float32 depending on the action's
# dtype and on whether it was clipped. Parity there is 1 float32 ulp (at the scale of the state
# box) per step, so that task is compared one step at a time (gymnasium re-synced to our state
# before every step).
ULP_TASKS = {"MountainCarContinuous-v0"}

# initial-state box of each task (gymnasium's reset ranges), per state component
INIT_BOUNDS = {
    "CartPole-v1": ([-0.05] * 4, [0.05] * 4),
    "Acrobot-v1": ([-0.1] * 4, [0.1] * 4),
    "MountainCar-v0": ([-0.6, 0.0], [-0.4, 0.0]),
    "MountainCarContinuous-v0": ([-0.6, 0.0], [-0.4, 0.0]),
    "Pendulum-v1": ([-math.pi, -1.0], [math.pi, 1.0]),
}


@pytest.fixture(autouse=True)
def _quiet_gym():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium's passive checker on hand-set states
        yield


def _gym_envs(env_id: str, n: int = N):
    envs = [gym.make(env_id) for _ in range(n)]
    for i, e in enumerate(envs):
        e.reset(seed=1000 + i)
    return envs


def _set_gym_state(env, env_id: str, row: np.ndarray) -> None:
    if env_id == "MountainCarContinuous-v0":
        # gymnasium keeps this state in float32
        env.unwrapped.state = np.array(row, dtype=np.float32)
    else:
        env.unwrapped.state = np.array(row, dtype=np.float64)


def _start_states(env_id: str, ours, rng: np.random.Generator) -> np.ndarray:
    """Half fresh initial states, half states chosen to reach the interesting branches."""
    s = ours.state.numpy().copy()
    h = N // 2
    if env_id == "CartPole-v1":
        s[h:] = rng.uniform(-0.15, 0.15, (N - h, 4))
    elif env_id == "Acrobot-v1":  # anywhere: terminations, angle wrapping, velocity bounds
        s[h:, :2] = rng.uniform(-math.pi, math.pi, (N - h, 2))
        s[h:, 2] = rng.uniform(-4 * math.pi, 4 * math.pi, N - h)
        s[h:, 3] = rng.uniform(-9 * math.pi, 9 * math.pi, N - h)
    elif env_id.startswith("MountainCar"):
        s[h] = (0.40, 0.05)  # about to reach the goal
        s[h + 1] = (-1.15, -0.065)  # about to hit the left wall
        s[h + 2 :, 0] = rng.uniform(-1.2, 0.5, N - h - 2)
        s[h + 2 :, 1] = rng.uniform(-0.07, 0.07, N - h - 2)
        if env_id == "MountainCarContinuous-v0":
            s = s.astype(np.float32).astype(np.float64)
    elif env_id == "Pendulum-v1":  # unwrapped angles test the normalization in the reward
        s[h:, 0] = rng.uniform(-4 * math.pi, 4 * math.pi, N - h)
        s[h:, 1] = rng.uniform(-8.0, 8.0, N - h)
    return s


def _actions(env_id: str, ours, rng: np.random.Generator, t: int) -> np.ndarray:
    space = ours.single_action_space
    if isinstance(space, gym.spaces.Discrete):
        if env_id.startswith("MountainCar") and t < 100:  # push in the direction of motion
            v = ours.state[:, 1].numpy()
            return np.where(v >= 0, 2, 0).astype(np.int64)
        return rng.integers(0, space.n, N).astype(np.int64)
    high = float(space.high[0])
    a = rng.uniform(-2.5 * high, 2.5 * high, (N, 1))  # about 60% out of bounds: tests clipping
    if env_id == "MountainCarContinuous-v0" and t < 100:
        v = ours.state[:, 1:2].numpy()
        a = np.where(v >= 0, 1.0, -1.0) * np.abs(a)
    return a


@pytest.mark.parametrize("env_id", IDS)
def test_parity_with_gymnasium(env_id):
    rng = np.random.default_rng(0)
    ours = NATIVE[env_id](num_envs=N, dtype=torch.float64, seed=0)
    ours.reset(seed=0)
    start = _start_states(env_id, ours, rng)
    ours.state = torch.tensor(start, dtype=torch.float64)
    gyms = _gym_envs(env_id)
    for g, row in zip(gyms, start):
        _set_gym_state(g, env_id, row)
    discrete = isinstance(ours.single_action_space, gym.spaces.Discrete)

    n_term = n_trunc = 0
    for t in range(STEPS):
        a = _actions(env_id, ours, rng, t)
        a_t = torch.as_tensor(a)
        if env_id in ULP_TASKS:
            for g, row in zip(gyms, ours.state.numpy()):
                _set_gym_state(g, env_id, row)
        # the pure transition (float64 reward before the contract's float32 cast)
        ns, r64, term64 = ours._transition(ours.state.clone(), a_t)
        obs, rew, term, trunc, info = ours.step(a_t)

        g_state = np.zeros_like(start)
        g_obs = np.zeros((N, *ours.single_observation_space.shape), np.float32)
        g_rew, g_term, g_trunc = np.zeros(N), np.zeros(N, bool), np.zeros(N, bool)
        for i, g in enumerate(gyms):
            g_a = int(a[i]) if discrete else a[i].astype(np.float64)
            o, r, te, tr, _ = g.step(g_a)
            g_state[i] = np.asarray(g.unwrapped.state, dtype=np.float64)
            g_obs[i], g_rew[i], g_term[i], g_trunc[i] = o, r, te, tr

        msg = f"{env_id} step {t}"
        if env_id in ULP_TASKS:
            # one float32 ulp at the scale of the state box (|position| <= 1.2, |velocity| <= 0.07)
            ulp = np.spacing(np.abs(ours.single_observation_space.low)).astype(np.float64)
            assert (np.abs(ns.numpy() - g_state) <= ulp).all(), (msg, ns.numpy() - g_state)
            # float32 state
            np.testing.assert_array_equal(ns.numpy(), ns.numpy().astype(np.float32))
        else:
            np.testing.assert_allclose(ns.numpy(), g_state, rtol=0, atol=TOL, err_msg=msg)
        np.testing.assert_allclose(r64.numpy(), g_rew, rtol=0, atol=TOL, err_msg=msg)
        np.testing.assert_array_equal(term64.numpy(), g_term, err_msg=msg)
        np.testing.assert_array_equal(term.numpy(), g_term, err_msg=msg)
        np.testing.assert_array_equal(trunc.numpy(), g_trunc, err_msg=msg)  # TimeLimit vs ours
        assert rew.dtype == torch.float32
        np.testing.assert_allclose(rew.numpy(), g_rew, rtol=1e-6, atol=1e-6, err_msg=msg)
        # observations: the true last obs, and obs == final_obs where nothing finished
        done = (term | trunc).numpy()
        np.testing.assert_array_equal(info["_final_obs"].numpy(), done)
        torch.testing.assert_close(info["final_obs"], ours._observe(ns), rtol=0, atol=0)
        np.testing.assert_allclose(
            info["final_obs"].numpy(), g_obs, rtol=1e-6, atol=1e-6, err_msg=msg
        )
        np.testing.assert_array_equal(obs.numpy()[~done], info["final_obs"].numpy()[~done])
        np.testing.assert_array_equal(ours.state.numpy()[~done], ns.numpy()[~done])
        torch.testing.assert_close(obs, ours._observe(ours.state), rtol=0, atol=0)
        assert (ours.elapsed.numpy()[done] == 0).all()
        # re-sync the finished gymnasium envs to our fresh start states
        for i in np.flatnonzero(done):
            gyms[i].reset(seed=int(rng.integers(1 << 30)))
            _set_gym_state(gyms[i], env_id, ours.state[i].numpy())
        n_term += int(g_term.sum())
        n_trunc += int(g_trunc.sum())

    if env_id != "Pendulum-v1":
        assert n_term > 0, f"{env_id}: the parity run never reached a termination"
    if env_id in ("Pendulum-v1", "MountainCar-v0"):
        assert n_trunc > 0, f"{env_id}: the parity run never reached the time limit"


@pytest.mark.parametrize(
    "env_id,action",
    [
        ("Pendulum-v1", [0.0]),
        ("MountainCar-v0", 1),
        ("Acrobot-v1", 1),
        ("MountainCarContinuous-v0", [0.0]),
    ],
)
def test_truncation_at_time_limit(env_id, action):
    env = make(env_id, num_envs=4, seed=3)  # default float32
    assert env.max_episode_steps == gym.spec(env_id).max_episode_steps
    obs, _ = env.reset(seed=3)
    assert obs.dtype == torch.float32
    dtype = torch.long if isinstance(action, int) else torch.float32
    a = torch.tensor([action] * 4, dtype=dtype)
    for t in range(1, env.max_episode_steps + 1):
        before = env.state.clone()
        ns, _, _ = env._transition(before, a)
        obs, rew, term, trunc, info = env.step(a)
        assert obs.dtype == torch.float32 and rew.dtype == torch.float32
        assert term.dtype == torch.bool and trunc.dtype == torch.bool
        assert not term.any(), f"{env_id} terminated at step {t}"
        if t < env.max_episode_steps:
            assert not trunc.any() and not info["_final_obs"].any()
    assert trunc.all() and not term.any() and info["_final_obs"].all()
    torch.testing.assert_close(info["final_obs"], env._observe(ns), rtol=0, atol=0)
    torch.testing.assert_close(obs, env._observe(env.state), rtol=0, atol=0)
    assert not torch.equal(obs, info["final_obs"])
    low, high = (torch.tensor(b, dtype=torch.float32) for b in INIT_BOUNDS[env_id])
    assert ((env.state >= low) & (env.state <= high)).all(), (
        "obs after truncation is not a fresh start"
    )
    assert (env.elapsed == 0).all()
    # the next step continues the new episode
    _, _, _, trunc, _ = env.step(a)
    assert not trunc.any()


@pytest.mark.parametrize("env_id", IDS)
def test_initial_state_distribution(env_id):
    n = 10_000
    env = NATIVE[env_id](num_envs=n, dtype=torch.float64, seed=0)
    low, high = np.array(INIT_BOUNDS[env_id][0]), np.array(INIT_BOUNDS[env_id][1])
    s = env.state.numpy()
    smin, smax = s.min(0), s.max(0)
    width = high - low
    assert (smin >= low).all() and (smax <= high).all(), (smin, smax)
    spread = width > 0
    assert (smin[spread] < low[spread] + 0.01 * width[spread]).all(), smin
    assert (smax[spread] > high[spread] - 0.01 * width[spread]).all(), smax
    assert (s[:, ~spread] == low[~spread]).all()
    np.testing.assert_allclose(
        s[:, spread].mean(0), ((low + high) / 2)[spread], atol=0.02 * width.max()
    )
    # gymnasium's own resets fall in the same box
    g = gym.make(env_id)
    for k in range(200):
        g.reset(seed=k)
        gs = np.asarray(g.unwrapped.state, dtype=np.float64)
        assert ((gs >= low - 1e-7) & (gs <= high + 1e-7)).all(), gs


def _rollout(env_id, seed, steps=60, reset_seed=None):
    env = make(env_id, num_envs=16, seed=seed)
    obs, _ = env.reset(seed=reset_seed)
    rng = np.random.default_rng(7)
    out = [obs]
    space = env.single_action_space
    for _ in range(steps):
        if isinstance(space, gym.spaces.Discrete):
            a = torch.as_tensor(rng.integers(0, space.n, 16))
        else:
            a = torch.as_tensor(
                rng.uniform(-1.5, 1.5, (16, 1)) * space.high[0], dtype=torch.float32
            )
        obs, rew, term, trunc, info = env.step(a)
        out += [obs, rew, term, trunc, info["final_obs"]]
    return out


@pytest.mark.parametrize("env_id", IDS)
def test_same_seed_same_trajectory(env_id):
    a, b = _rollout(env_id, seed=11), _rollout(env_id, seed=11)
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    c = _rollout(env_id, seed=12, steps=0)
    assert not torch.equal(a[0], c[0])


@pytest.mark.parametrize("env_id", IDS)
def test_reset_seed_reproducible(env_id):
    env = make(env_id, num_envs=16, seed=0)
    obs1, _ = env.reset(seed=5)
    a = (
        torch.zeros(16, dtype=torch.long)
        if env_id in ("CartPole-v1", "MountainCar-v0", "Acrobot-v1")
        else torch.zeros(16, 1)
    )
    traj1 = [env.step(a)[0] for _ in range(30)]
    obs2, _ = env.reset(seed=5)
    traj2 = [env.step(a)[0] for _ in range(30)]
    assert torch.equal(obs1, obs2)
    for x, y in zip(traj1, traj2):
        assert torch.equal(x, y)
    obs3, _ = env.reset(seed=6)
    assert not torch.equal(obs1, obs3)
    # a different construction seed does not matter once reset is seeded
    other = make(env_id, num_envs=16, seed=99)
    assert torch.equal(other.reset(seed=5)[0], obs1)


@pytest.mark.parametrize("env_id", IDS)
def test_spaces_match_gymnasium(env_id):
    g = gym.make(env_id)
    env = make(env_id, num_envs=3)
    for ours, theirs in (
        (env.single_observation_space, g.observation_space),
        (env.single_action_space, g.action_space),
    ):
        assert type(ours) is type(theirs)
        if isinstance(theirs, gym.spaces.Discrete):
            assert ours.n == theirs.n and ours.start == theirs.start
        else:
            assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
            np.testing.assert_array_equal(ours.low, theirs.low)
            np.testing.assert_array_equal(ours.high, theirs.high)
        assert ours == theirs
    assert env.observation_space.shape == (3, *g.observation_space.shape)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (3, *g.observation_space.shape) and obs.dtype == torch.float32
    assert all(g.observation_space.contains(o) for o in obs.numpy())
    assert env.max_episode_steps == g.spec.max_episode_steps
