"""Batched MuJoCo tasks against gymnasium's `<Task>-v5` from identical states and actions.

* `batch` backend (float64, like gymnasium): whole trajectories of 120 steps, with the states
  re-synchronised only when gymnasium's episode ends; observations (contact forces included),
  rewards and terminations agree to float64 round-off.
* `warp` backend on Warp's CPU device (float32 physics): each step starts from gymnasium's state
  (teacher forcing, since float32 and float64 contact dynamics drift apart within a few steps) and
  must agree to float32-level tolerances.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("mujoco")
gym = pytest.importorskip("gymnasium")

import envs  # noqa: E402
from envs.mujoco_locomotion import MUJOCO_TASKS  # noqa: E402

# slices of the observation that hold contact forces (cfrc_ext of bodies 1..)
CONTACT_SLICE = {"Ant-v5": slice(27, 105), "Humanoid-v5": slice(270, 348)}


def gym_env(env_id):
    return gym.make(env_id).unwrapped


def random_actions(space, n, rng):
    return rng.uniform(space.low, space.high, size=(n, *space.shape)).astype(np.float64)


def sync(env, world_states, mask=None):
    """Put the worlds of `env` in `mask` (default: all) into the (qpos, qvel) of the matching
    gymnasium env, as a reset does."""
    qpos = torch.as_tensor(np.stack([q for q, _ in world_states]))
    qvel = torch.as_tensor(np.stack([v for _, v in world_states]))
    mask = torch.ones(env.num_envs, dtype=torch.bool) if mask is None else mask
    # `_observe` takes the simulator's device (Warp on a GPU: CUDA)
    mask = mask.to(env.sim.sim_device)
    env.set_worlds(mask, qpos, qvel)
    return env._out(env._observe(fresh=mask))


@pytest.mark.parametrize("env_id", list(MUJOCO_TASKS))
def test_batch_backend_matches_gymnasium(env_id):
    n, steps = 3, 120
    refs = [gym_env(env_id) for _ in range(n)]
    ref_obs = [g.reset(seed=10 + i)[0] for i, g in enumerate(refs)]
    env = envs.make(env_id, num_envs=n, seed=0, backend="batch", nthread=1, dtype=torch.float64)
    obs = sync(env, [(g.data.qpos.copy(), g.data.qvel.copy()) for g in refs])
    np.testing.assert_allclose(obs.numpy(), np.stack(ref_obs), rtol=0, atol=1e-12)
    rng = np.random.default_rng(0)
    terminations = 0
    for t in range(steps):
        actions = random_actions(env.single_action_space, n, rng)
        obs, reward, term, trunc, info = env.step(torch.as_tensor(actions))
        resync = []
        for i, g in enumerate(refs):
            o, r, te, tr, _ = g.step(actions[i])
            final = info["final_obs"][i].numpy()
            np.testing.assert_allclose(
                final, o, rtol=1e-9, atol=1e-9, err_msg=f"obs, step {t}, world {i}"
            )
            np.testing.assert_allclose(
                reward[i].item(), r, rtol=1e-9, atol=1e-9, err_msg=f"reward, step {t}"
            )
            assert bool(term[i]) == te, f"terminated differs at step {t}, world {i}"
            assert not bool(trunc[i]) and not tr
            if te:
                terminations += 1
                g.reset(seed=1000 * i + t)
            resync.append((g.data.qpos.copy(), g.data.qvel.copy()))
        if bool(term.any()):  # gymnasium reset the finished ones its own way: copy them over
            sync(env, resync, mask=term)
    if env_id in ("Hopper-v5", "Walker2d-v5", "Ant-v5"):
        assert terminations > 0, "random actions should topple these within 120 steps"


@pytest.mark.parametrize("env_id", ["Ant-v5", "Humanoid-v5"])
def test_contact_forces_are_exercised(env_id):
    """The parity above covers contact forces only if there are some: check the run has them."""
    env = envs.make(env_id, num_envs=4, seed=0, backend="batch", nthread=1, dtype=torch.float64)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    seen = 0
    for _ in range(60):
        _, _, _, _, info = env.step(
            torch.as_tensor(random_actions(env.single_action_space, 4, rng))
        )
        seen += int((info["final_obs"][:, CONTACT_SLICE[env_id]].abs() > 1e-3).any(1).sum())
    assert seen > 20


@pytest.mark.parametrize("env_id", list(MUJOCO_TASKS))
def test_autoreset_on_termination_and_truncation(env_id):
    env = envs.make(env_id, num_envs=4, seed=3, backend="batch", nthread=1)
    obs, _ = env.reset(seed=3)
    zero = torch.zeros(4, *env.single_action_space.shape)
    # world 0 is put in an unhealthy pose (except HalfCheetah, which never terminates)
    g = gym_env(env_id)
    g.reset(seed=0)
    qpos = torch.as_tensor(np.tile(g.data.qpos, (4, 1)))
    qvel = torch.as_tensor(np.tile(g.data.qvel, (4, 1)))
    height = 1 if env_id in ("Hopper-v5", "Walker2d-v5", "HalfCheetah-v5") else 2
    qpos[0, height] = -5.0
    env.set_worlds(torch.ones(4, dtype=torch.bool), qpos, qvel)
    env.elapsed[1] = env.max_episode_steps - 1  # world 1 reaches the time limit on this step
    obs, reward, term, trunc, info = env.step(zero)
    assert info["_final_obs"].tolist() == (term | trunc).tolist()
    assert bool(trunc[1]) and not bool(term[1])
    assert not bool(trunc[2]) and not bool(trunc[3])
    if env_id != "HalfCheetah-v5":
        assert bool(term[0])
        # final_obs holds the fallen pose, obs the fresh one
        h = height - env.exclude_qpos
        assert info["final_obs"][0, h] < obs[0, h] - 0.5
        assert obs[0, h] > 0.5
    else:
        assert not bool(term.any())
    # the truncated world restarted near the initial pose, from elapsed 0
    assert env.elapsed[1] == 0 and env.elapsed[2] == 1
    init = torch.as_tensor(env.model.qpos0[env.exclude_qpos :], dtype=torch.float32)
    assert (obs[1, : init.numel()] - init).abs().max() < 0.11
    assert not torch.equal(info["final_obs"][1], obs[1])
    assert torch.equal(info["final_obs"][2:], obs[2:])


def test_reset_noise_distribution_and_seeding():
    a = envs.make("Ant", num_envs=2000, seed=5, nthread=1)
    o1, _ = a.reset(seed=7)
    o2, _ = a.reset(seed=7)
    assert torch.equal(o1, o2)
    qpos0 = torch.as_tensor(a.model.qpos0[2:], dtype=torch.float32)
    dq = o1[:, :13] - qpos0
    assert dq.abs().max() <= 0.1 + 1e-6 and dq.abs().max() > 0.09  # uniform(-0.1, 0.1)
    qvel = o1[:, 13:27]
    assert abs(qvel.std().item() - 0.1) < 0.01  # 0.1 * N(0, 1)
    h = envs.make("Hopper", num_envs=2000, seed=5, nthread=1)
    o, _ = h.reset(seed=1)
    assert o[:, 5:].abs().max() <= 5e-3 + 1e-7  # uniform(-5e-3, 5e-3) velocities


def test_spaces_match_gymnasium():
    for env_id in MUJOCO_TASKS:
        g = gym_env(env_id)
        env = envs.make(env_id, num_envs=2, nthread=1)
        assert env.single_observation_space.shape == g.observation_space.shape
        np.testing.assert_array_equal(env.single_action_space.low, g.action_space.low)
        np.testing.assert_array_equal(env.single_action_space.high, g.action_space.high)
        assert envs.make(env_id.split("-")[0], num_envs=1, nthread=1).env_id == env_id


def test_bad_input_errors():
    with pytest.raises(ValueError, match="backend"):
        envs.make("Ant", num_envs=1, backend="gpu")
    with pytest.raises(ValueError, match="did you mean|Did you mean"):
        envs.make("Antt", num_envs=1)
    env = envs.make("Hopper", num_envs=2, nthread=1)
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="finite"):
        env.step(torch.full((2, 3), float("nan")))
    with pytest.raises(MemoryError, match="--num-envs"):
        envs.make("Ant", num_envs=10**7, nthread=1)
    with pytest.raises(ValueError, match="more sub-envs than one process holds"):
        envs.make("Ant", num_envs=10**12, nthread=1)


def test_state_dict_round_trip_is_exact():
    env = envs.make("Ant", num_envs=4, seed=0, nthread=1)
    env.reset(seed=0)
    rng = torch.Generator().manual_seed(0)
    for _ in range(30):
        env.step(torch.rand(4, 8, generator=rng) * 2 - 1)
    sd = env.state_dict()
    acts = [torch.rand(4, 8, generator=rng) * 2 - 1 for _ in range(40)]
    ref = [env.step(a) for a in acts]
    other = envs.make("Ant", num_envs=4, seed=99, nthread=2)
    other.load_state_dict(sd)
    for a, (o, r, te, tr, _) in zip(acts, ref):
        o2, r2, te2, tr2, _ = other.step(a)
        assert torch.equal(o, o2) and torch.equal(r, r2) and torch.equal(te, te2)


CUDA = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA (pytest -m cuda on a GPU machine)"
)


@pytest.mark.slow  # MuJoCo Warp compiles its kernels on first use (~40 s a task on a fresh cache)
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[pytest.mark.cuda, CUDA])])
@pytest.mark.parametrize("env_id", ["Ant-v5", "Hopper-v5", "HalfCheetah-v5", "Humanoid-v5"])
def test_warp_backend_matches_gymnasium_per_step(env_id, device):
    """MuJoCo Warp (float32) against gymnasium (float64), one step at a time from gymnasium's state.

    Measured: without contacts the two agree to ~1e-6; a substep with a contact changes velocities
    by up to ~0.4 (MuJoCo Warp's float32 contact solve differs from MuJoCo C's), and the difference
    then grows chaotically, so this compares the steps in which no contact occurs: the bodies
    start lifted 1 m into the air. That covers the backend's code path (state in/out, frame skip,
    observation assembly, rewards, health checks, masked resets) to float32 tolerance. On CUDA the
    frame-skip loop runs as a captured CUDA graph from the second step on (the first launches
    eagerly)."""
    pytest.importorskip("mujoco_warp")
    n = 2
    refs = [gym_env(env_id) for _ in range(n)]
    # (Humanoid: Newton on Warp, PGS in its XML; no contact, no constraint for either solver to
    # solve)
    height = 2 if env_id in ("Ant-v5", "Humanoid-v5") else 1
    for i, g in enumerate(refs):
        g.reset(seed=20 + i)
        qpos = g.data.qpos.copy()
        qpos[height] += 1.0
        g.set_state(qpos, g.data.qvel.copy())
    env = envs.make(env_id, num_envs=n, seed=0, backend="warp", dtype=torch.float64, device=device)
    assert env.backend == "warp"
    rng = np.random.default_rng(2)
    compared = 0
    for t in range(8):
        for g in refs:  # derived fields at the state itself, as after our reset
            g.set_state(g.data.qpos.copy(), g.data.qvel.copy())
        sync(env, [(g.data.qpos.copy(), g.data.qvel.copy()) for g in refs])
        actions = random_actions(env.single_action_space, n, rng)
        _, reward, term, _, info = env.step(torch.as_tensor(actions, device=env.device))
        reward, term, final_obs = reward.cpu(), term.cpu(), info["final_obs"].cpu()
        for i, g in enumerate(refs):
            o, r, te, *_ = g.step(actions[i])
            if g.data.ncon > 0:
                continue
            compared += 1
            ours = final_obs[i].numpy()
            np.testing.assert_allclose(
                ours, o, rtol=1e-4, atol=1e-4, err_msg=f"obs, step {t}, world {i}"
            )
            np.testing.assert_allclose(
                reward[i].item(), r, rtol=1e-4, atol=1e-4, err_msg=f"reward, step {t}"
            )
            assert bool(term[i]) == te
    assert compared >= 6, f"only {compared} contact-free steps compared"


def test_missing_mujoco_warp_names_the_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "mujoco_warp", None)  # as if not installed
    with pytest.raises(ImportError, match="pip install mujoco-warp"):
        envs.make("Hopper", num_envs=1, backend="warp")
