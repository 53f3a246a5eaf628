"""Chasing-v0 (`envs/chasing.py`): spaces, seeding, vectorization, the dynamics on hand-computed
examples, action cost, capture, truncation/autoreset, checkpointable state, the scripted baseline,
and one PPO learning run."""

import math
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

import envs
from envs.base import TorchVecEnv
from envs.chasing import Chasing, clip_norm, pursuit_policy

# ppo_vec settings that learn Chasing-v0 (eval return ~11.1-11.4 against the scripted pursuit's
# ~11.45) on seeds 1-6 in ~4-6 s of one CPU thread; benchmarks import them.
CHASING_PPO = dict(
    env="Chasing-v0",
    num_envs=256,
    num_steps=32,
    num_minibatches=4,
    total_steps=200_000,
    eval_every=0,
    save_every=0,
    quiet=True,
)


def rollout_returns(policy, n=64, seed=0, **kw):
    """Undiscounted return of the first episode of each of `n` sub-envs (and whether it
    captured)."""
    env = envs.make("Chasing-v0", num_envs=n, seed=seed, **kw)
    obs, _ = env.reset(seed=seed)
    ret = torch.zeros(n, dtype=torch.float64)
    running = torch.ones(n, dtype=torch.bool)
    captured = torch.zeros(n, dtype=torch.bool)
    for _ in range(env.max_episode_steps):
        obs, r, term, trunc, _ = env.step(policy(obs))
        ret += r * running
        captured |= term & running
        running &= ~(term | trunc)
    assert not running.any()
    return ret, captured


def set_target_action(env, a0):
    """Make the target's raw action a known constant (the test's stand-in for the random draw)."""
    env._target_action = lambda n: torch.as_tensor(a0, dtype=env.dtype).expand(n, env.dim).clone()


@pytest.mark.parametrize("dim", [2, 3])
def test_spaces_shapes_dtypes(dim):
    env = envs.make("Chasing-v0", num_envs=8, seed=0, dim=dim)
    assert isinstance(env, Chasing) and isinstance(env, TorchVecEnv) and env.dim == dim
    assert env.single_observation_space.shape == (3 * dim + 1,)
    assert env.single_observation_space.dtype == np.float32
    space = env.single_action_space
    assert isinstance(space, gym.spaces.Box) and space.shape == (dim,)
    assert np.all(space.low == -1) and np.all(space.high == 1)
    assert env.observation_space.shape == (8, 3 * dim + 1) and env.action_space.shape == (8, dim)
    assert env.state.shape == (8, 4 * dim + 1)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (8, 3 * dim + 1) and obs.dtype == torch.float32
    # initial state: agent at rest at the origin, target at rest at distance 8 in a random direction
    rel, v0, v1, dist = obs[:, :dim], obs[:, dim : 2 * dim], obs[:, 2 * dim : 3 * dim], obs[:, -1]
    torch.testing.assert_close(rel.norm(dim=-1), torch.full((8,), 8.0))
    torch.testing.assert_close(dist, torch.full((8,), 8.0))
    assert (v0 == 0).all() and (v1 == 0).all() and (env.state[:, 2 * dim : 3 * dim] == 0).all()
    assert len({tuple(r) for r in (rel / 8).round(decimals=3).tolist()}) == 8  # directions differ
    obs, reward, term, trunc, info = env.step(torch.zeros(8, dim))
    assert obs.shape == (8, 3 * dim + 1) and obs.dtype == torch.float32
    assert reward.shape == (8,) and reward.dtype == torch.float32
    assert term.dtype == torch.bool and trunc.dtype == torch.bool
    assert info["final_obs"].shape == obs.shape and info["_final_obs"].shape == (8,)
    assert pursuit_policy(obs).shape == (8, dim)


def test_bad_arguments():
    with pytest.raises(ValueError, match="dim"):
        envs.make("Chasing-v0", num_envs=2, dim=0)
    with pytest.raises(ValueError, match="init_distance"):
        envs.make("Chasing-v0", num_envs=2, init_distance=0.5)
    env = envs.make("Chasing-v0", num_envs=2, dim=3)
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(2, 2))


def test_reset_seed_reproducible():
    env = envs.make("Chasing-v0", num_envs=32, seed=0)
    a = torch.rand(32, 2) * 2 - 1
    obs1, _ = env.reset(seed=7)
    step1 = env.step(a)
    obs2, _ = env.reset(seed=7)
    step2 = env.step(a)
    assert torch.equal(obs1, obs2)
    for x, y in zip(step1[:4], step2[:4]):
        assert torch.equal(x, y)
    assert torch.equal(step1[4]["final_obs"], step2[4]["final_obs"])
    other, _ = env.reset(seed=8)
    assert not torch.equal(obs1, other)
    # another construction seed, same reset seed
    fresh = envs.make("Chasing-v0", num_envs=32, seed=123)
    assert torch.equal(fresh.reset(seed=7)[0], obs1)


def test_step_is_vectorized():
    """One batched step of 100k sub-envs costs a small fraction of 100k steps of a one-sub-env
    instance (what a Python loop over sub-envs would cost). A ratio of timings taken interleaved in
    this test, so a busy machine slows both sides alike."""
    n = 100_000

    def make(k):
        env = envs.make("Chasing-v0", num_envs=k, seed=0)
        obs, _ = env.reset(seed=0)
        env.step(pursuit_policy(obs))  # warm-up
        return env, obs

    (one, obs_1), (big, obs_n) = make(1), make(n)
    t_one, t_big = [], []
    for _ in range(5):
        for env, obs, times in ((one, obs_1, t_one), (big, obs_n, t_big)):
            a = pursuit_policy(obs)
            t = time.perf_counter()
            env.step(a)
            times.append(time.perf_counter() - t)
    assert min(t_big) < 0.02 * n * min(t_one), (t_one, t_big)  # measured: 0.001-0.002, idle or busy


def test_dynamics_hand_computed():
    env = Chasing(num_envs=2, dtype=torch.float64, seed=0)
    env.reset(seed=0)
    # state = (p0, v0, p1, v1, previous distance)
    env.state = torch.tensor(
        [
            [3.0, 4.0, 0.2, 0.0, 0.0, 0.0, 1.0, 0.0, 5.0],  # far: no capture
            [1.01, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 1.01],  # about to be caught
        ],
        dtype=torch.float64,
    )
    # the target's raw actions: row 0 norm 5 -> clipped to (0.6, 0.8); row 1 stays put
    env._target_action = lambda n: torch.tensor([[3.0, 4.0], [0.0, 0.0]], dtype=torch.float64)
    action = torch.tensor([[0.0, 1.0], [2.0, 0.0]], dtype=torch.float64)  # row 1: norm 2 -> (1, 0)
    obs, reward, term, trunc, info = env.step(action)
    # row 0: v0 = 0.5 * (0.2, 0) + (0.6, 0.8) = (0.7, 0.8); p0 = (3, 4) + 0.01 * v0 = (3.007, 4.008)
    #        v1 = 0.75 * (1, 0) + (0, 1) = (0.75, 1); p1 = 0.01 * v1 = (0.0075, 0.01)
    #        rel = (2.9995, 3.998); d = hypot(2.9995, 3.998); r = 5 - d - 0.02 * 1
    d0 = math.hypot(2.9995, 3.998)
    expected0 = torch.tensor([2.9995, 3.998, 0.7, 0.8, 0.75, 1.0, d0], dtype=torch.float64)
    torch.testing.assert_close(info["final_obs"][0], expected0, rtol=0, atol=1e-12)
    torch.testing.assert_close(obs[0], expected0, rtol=0, atol=1e-12)  # not done: obs = final_obs
    assert abs(d0 - 4.998100064) < 1e-9  # sqrt(8.99700025 + 15.984004)
    # (rewards are float32 whatever the physics' dtype)
    assert reward[0].item() == pytest.approx(5.0 - d0 - 0.02, abs=1e-6)
    # row 1: the target stays (zero action); v1 = 0.75 * (4, 0) + (1, 0) = (4, 0); p1 = (0.04, 0)
    #        rel = (0.97, 0), d = 0.97 < 1: captured, r = 1.01 - 0.97 - 0.02 + 8 = 8.02
    expected1 = torch.tensor([0.97, 0.0, 0.0, 0.0, 4.0, 0.0, 0.97], dtype=torch.float64)
    torch.testing.assert_close(info["final_obs"][1], expected1, rtol=0, atol=1e-12)
    assert reward[1].item() == pytest.approx(8.02, abs=1e-6)
    assert term.tolist() == [False, True] and trunc.tolist() == [False, False]
    assert info["_final_obs"].tolist() == [False, True]
    # the captured row restarts: at rest, target at distance 8
    assert obs[1, -1].item() == pytest.approx(8.0) and (obs[1, 2:6] == 0).all()
    # the internal state of row 0 holds the new positions
    torch.testing.assert_close(
        env.state[0],
        torch.tensor([3.007, 4.008, 0.7, 0.8, 0.0075, 0.01, 0.75, 1.0, d0], dtype=torch.float64),
        rtol=0,
        atol=1e-12,
    )


def test_target_action_is_drawn_from_the_env_generator():
    for low in (-1.0, 0.0):
        env = Chasing(num_envs=4096, dtype=torch.float64, seed=0, target_low=low)
        env.reset(seed=3)
        env.state[:, 2:4] = 0.0  # target at rest: its new velocity is its clipped action
        g = torch.Generator()
        g.set_state(env.rng.get_state())
        u = low + (1.0 - low) * torch.rand(4096, 2, generator=g, dtype=torch.float64)
        _, _, _, _, info = env.step(torch.zeros(4096, 2, dtype=torch.float64))
        v0 = info["final_obs"][:, 2:4]
        torch.testing.assert_close(v0, clip_norm(u), rtol=0, atol=1e-12)
        assert v0.norm(dim=-1).max() <= 1 + 1e-12
        if low == 0.0:
            assert (v0 >= 0).all()  # the tutorial's target: drifts towards +
        else:
            assert (v0 < 0).any() and v0.mean(0).abs().max() < 0.05  # isotropic


def test_action_cost():
    env = Chasing(num_envs=16, dtype=torch.float64, seed=0)
    env.reset(seed=1)
    for _ in range(20):  # somewhere mid-chase, with moving agent and target
        env.step(pursuit_policy(env._observe(env.state)))
    sd = env.state_dict()
    prev_dist = env.state[:, -1].clone()

    def cost(action):
        env.load_state_dict(sd)  # same state, same generator: the same target motion
        _, reward, _, _, info = env.step(action)
        new_dist = info["final_obs"][:, -1]
        return prev_dist - new_dist - reward, info["final_obs"][:, 2:4]

    zero, v0_zero = cost(torch.zeros(16, 2, dtype=torch.float64))
    unit, v0_unit = cost(torch.tensor([[0.6, -0.8]], dtype=torch.float64).expand(16, 2))
    corner, _ = cost(torch.ones(16, 2, dtype=torch.float64))  # norm sqrt(2) -> clipped to 1
    half, _ = cost(torch.full((16, 2), 0.3, dtype=torch.float64))  # norm 0.3 sqrt(2), inside
    assert torch.equal(v0_zero, v0_unit)
    # rewards are float32 (the physics here float64): equal up to float32 rounding
    tol = dict(rtol=0, atol=2e-6)
    torch.testing.assert_close(zero, torch.zeros(16, dtype=torch.float64), **tol)
    torch.testing.assert_close(unit - zero, torch.full((16,), 0.02, dtype=torch.float64), **tol)
    torch.testing.assert_close(corner, torch.full((16,), 0.02, dtype=torch.float64), **tol)
    torch.testing.assert_close(
        half, torch.full((16,), 0.02 * 0.3 * math.sqrt(2), dtype=torch.float64), **tol
    )


def test_capture_terminates_with_bonus():
    env = envs.make("Chasing-v0", num_envs=64, seed=0)
    obs, _ = env.reset(seed=0)
    captured = torch.zeros(64, dtype=torch.bool)
    for _ in range(300):
        obs, reward, term, trunc, info = env.step(pursuit_policy(obs))
        assert not trunc.any()
        if term.any():
            assert (info["final_obs"][term, -1] < 1.0).all()
            assert (reward[term] > 8.0 - 0.02).all()  # the bonus, plus a small distance gain
            assert (reward[~term] < 0.1).all()  # no bonus without a capture
            assert torch.equal(obs[term, -1], torch.full((int(term.sum()),), 8.0))  # fresh starts
        captured |= term
    assert captured.all()


def test_truncation_final_obs_and_fresh_start():
    assert Chasing.max_episode_steps == 512 and envs.make("Chasing-v0").max_episode_steps == 512
    limit = 20
    env = envs.make("Chasing-v0", num_envs=4, seed=0, max_episode_steps=limit)
    # the same env without limit
    ref = envs.make("Chasing-v0", num_envs=4, seed=0, max_episode_steps=None)
    env.reset(seed=5)
    ref.reset(seed=5)
    a = torch.zeros(4, 2)
    for t in range(1, limit + 1):
        obs, reward, term, trunc, info = env.step(a)
        ref_obs, ref_reward, *_ = ref.step(a)
        assert not term.any()
        assert trunc.all() == (t == limit) and trunc.any() == (t == limit)
        assert torch.equal(info["final_obs"], ref_obs) and torch.equal(reward, ref_reward)
    # the returned obs is a fresh start, info["final_obs"] the true last one
    assert torch.equal(info["_final_obs"], torch.ones(4, dtype=torch.bool))
    torch.testing.assert_close(obs[:, -1], torch.full((4,), 8.0))
    assert (obs[:, 2:6] == 0).all()
    assert not torch.equal(obs, info["final_obs"])
    assert (env.elapsed == 0).all()


def test_autoreset_only_finished_rows():
    env = Chasing(num_envs=3, seed=0)
    env.reset(seed=0)
    state = env.state.clone()
    # row 1 is caught next step
    state[1] = torch.tensor([1.01, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0, 0.0, 1.01])
    env.state = state.clone()  # a copy: `step` writes the env's state in place
    env.elapsed = torch.tensor([7, 3, env.max_episode_steps - 1])  # row 2 hits the time limit
    set_target_action(env, [0.0, 0.0])
    a = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.0, 0.0]])
    obs, reward, term, trunc, info = env.step(a)
    assert term.tolist() == [False, True, False] and trunc.tolist() == [False, False, True]
    assert info["_final_obs"].tolist() == [False, True, True]
    assert torch.equal(obs[0], info["final_obs"][0])  # row 0 continues
    assert env.elapsed.tolist() == [8, 0, 0]
    for i in (1, 2):
        assert obs[i, -1].item() == pytest.approx(8.0) and not torch.equal(
            obs[i], info["final_obs"][i]
        )
    # row 0's state is the plain continuation
    expected = Chasing(num_envs=1, seed=0)
    set_target_action(expected, [0.0, 0.0])
    expected.state = state[:1].clone()
    ref_obs, *_ = expected.step(a[:1])
    torch.testing.assert_close(obs[0], ref_obs[0], rtol=0, atol=0)


def test_state_dict_roundtrip():
    # resets inside the replay
    env = envs.make("Chasing-v0", num_envs=16, seed=0, max_episode_steps=100)
    obs, _ = env.reset(seed=2)
    for _ in range(30):
        obs, *_ = env.step(pursuit_policy(obs))
    sd = env.state_dict()
    actions = [
        torch.rand(16, 2, generator=torch.Generator().manual_seed(i)) * 2 - 1 for i in range(250)
    ]

    def run(e):
        out = []
        for a in actions:
            o, r, te, tr, info = e.step(a)
            out.append((o, r, te, tr, info["final_obs"]))
        return out

    first = run(env)
    # autoresets (fresh draws) were replayed too
    assert sum(int(step[3].sum()) for step in first) >= 16
    env.load_state_dict(sd)
    second = run(env)
    # a fresh env restored from the checkpoint
    other = envs.make("Chasing-v0", num_envs=16, seed=99, max_episode_steps=100)
    other.load_state_dict(sd)
    third = run(other)
    for s1, s2, s3 in zip(first, second, third):
        for x, y, z in zip(s1, s2, s3):
            assert torch.equal(x, y) and torch.equal(x, z)


def test_pursuit_beats_random_and_zero():
    g = torch.Generator().manual_seed(0)
    pursuit, captured = rollout_returns(pursuit_policy)
    random, random_cap = rollout_returns(lambda o: torch.rand(o.shape[0], 2, generator=g) * 2 - 1)
    zero, zero_cap = rollout_returns(lambda o: torch.zeros(o.shape[0], 2))
    assert captured.all() and not random_cap.any() and not zero_cap.any()
    # measured: pursuit ~11.45 (capture in ~180 steps), zero ~0.0, random ~-7.6
    assert pursuit.mean() > 11.0 and pursuit.min() > 10.5
    assert zero.mean().abs() < 1.0 and random.mean() < -5.0
    p3, c3 = rollout_returns(pursuit_policy, dim=3)
    assert c3.all() and p3.mean() > 11.0


@pytest.mark.slow
def test_ppo_learns_chasing(tmp_path):
    from algos import ppo_vec

    out = ppo_vec.main(ppo_vec.Args(seed=1, out_dir=str(tmp_path), **CHASING_PPO))
    # scripted pursuit ~11.45, zero action ~0, random ~-7.6; measured 11.1-11.4 on seeds 1-6
    assert out["eval_return"] > 10.0, out
