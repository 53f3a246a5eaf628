"""Wrappers: episode statistics, normalizers (statistics and save/restore), action rescaling."""

import numpy as np
import pytest
import torch

import envs
from common.wrappers import (
    EpisodeStatistics,
    NormalizeObservation,
    NormalizeReward,
    RescaleAction,
    RunningMeanStd,
    find_wrapper,
    wrap_env,
)


def test_episode_statistics_match_manual_bookkeeping():
    env = EpisodeStatistics(envs.make("CartPole-v1", num_envs=5, seed=1))
    env.reset(seed=1)
    g = torch.Generator().manual_seed(0)
    ret, length = np.zeros(5), np.zeros(5, dtype=int)
    finished = []
    for _ in range(300):
        obs, r, term, trunc, info = env.step(torch.randint(0, 2, (5,), generator=g))
        ret += r.numpy()
        length += 1
        done = (term | trunc).numpy()
        assert torch.equal(info["_episode"], term | trunc)
        for i in np.flatnonzero(done):
            assert info["episode"]["r"][i].item() == pytest.approx(ret[i])
            assert info["episode"]["l"][i].item() == length[i]
            finished.append((ret[i], length[i]))
        ret[done], length[done] = 0, 0
    stats = env.pop()
    assert stats["episodes"] == len(finished) > 20
    assert stats["return"] == pytest.approx(np.mean([f[0] for f in finished]))
    assert stats["length"] == pytest.approx(np.mean([f[1] for f in finished]))
    again = env.pop()  # nothing new finished: the last means are kept, count is 0
    assert again["episodes"] == 0 and again["return"] == stats["return"]


@pytest.mark.parametrize("host", [False, True])
def test_a_resumed_episode_sums_on_only_where_its_env_resumes_it(host):
    """A torch env's checkpoint restores its episodes, so the return sums carry on; a host
    simulator's games restart on resume (its state_dict is empty), so the sums start again: a
    resumed Pong run once logged -34, a partial game plus a whole one."""
    from envs.gym_adapter import GymnasiumVecEnv

    def make():
        base = GymnasiumVecEnv("CartPole-v1", num_envs=3) if host else envs.make("CartPole-v1", 3)
        return wrap_env(base, norm_obs=False, norm_reward=True)

    env = make()
    env.reset(seed=0)
    for _ in range(5):
        env.step(torch.ones(3, dtype=torch.long))
    fresh = make()
    fresh.reset(seed=1)
    fresh.load_state_dict(env.state_dict())
    sums = find_wrapper(env, EpisodeStatistics), find_wrapper(fresh, EpisodeStatistics)
    rets = find_wrapper(env, NormalizeReward).ret, find_wrapper(fresh, NormalizeReward).ret
    assert torch.equal(sums[0].ep_length, torch.full((3,), 5))
    if host:
        assert not sums[1].ep_length.any() and not sums[1].ep_return.any() and not rets[1].any()
    else:
        assert torch.equal(sums[0].ep_return, sums[1].ep_return) and torch.equal(*rets)


def test_running_mean_std_matches_numpy():
    rms = RunningMeanStd((3,))
    data = [torch.randn(n, 3, dtype=torch.float64) * 3 + 1 for n in (1, 7, 100, 33)]
    for x in data:
        rms.update(x)
    allx = torch.cat(data).numpy()
    np.testing.assert_allclose(rms.mean.numpy(), allx.mean(0), rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(rms.var.numpy(), allx.var(0), rtol=1e-3)


def test_normalize_observation_statistics_and_final_obs():
    raw = envs.make("Pendulum-v1", num_envs=8, seed=0)
    env = NormalizeObservation(raw)
    seen = []
    obs, _ = env.reset(seed=0)
    seen.append(raw._observe(raw.state).clone())
    for _ in range(50):
        obs, r, term, trunc, info = env.step(torch.zeros(8, 1))
        seen.append(raw._observe(raw.state).clone())
    allx = torch.cat(seen).double()
    np.testing.assert_allclose(env.rms.mean.numpy(), allx.mean(0).numpy(), atol=1e-5)
    np.testing.assert_allclose(env.rms.var.numpy(), allx.var(0, unbiased=False).numpy(), rtol=1e-3)
    expected = ((seen[-1].double() - env.rms.mean) / torch.sqrt(env.rms.var + 1e-8)).clamp(-10, 10)
    np.testing.assert_allclose(obs.numpy(), expected.numpy(), atol=1e-5)
    # final_obs is normalized with the same statistics (no update)
    assert info["final_obs"].abs().max() <= 10


def test_normalized_obs_and_final_obs_are_each_the_normalizers_output_bit_for_bit():
    """`step` normalizes the observations and the final observations in one pass (one tensor, rows
    [:n] and [n:]): each equals `rms.normalize` of its own raw tensor exactly, on an env whose
    episodes end (final_obs differs)."""
    raw = envs.make("CartPole-v1", num_envs=16, seed=3)
    env = NormalizeObservation(raw)
    env.reset(seed=3)
    g, ended = torch.Generator().manual_seed(0), 0
    for _ in range(60):
        step = raw.step
        got = {}

        def spy(actions):  # the raw step's output, before the wrapper normalizes it
            out = step(actions)
            got["obs"], got["final"] = out[0].clone(), out[4]["final_obs"].clone()
            return out

        raw.step = spy
        obs, _, term, trunc, info = env.step(torch.randint(0, 2, (16,), generator=g))
        del raw.step
        assert torch.equal(obs, env.rms.normalize(got["obs"]).to(obs.dtype))
        assert torch.equal(info["final_obs"], env.rms.normalize(got["final"]).to(obs.dtype))
        ended += int((term | trunc).sum())
    assert ended > 0


def test_normalizer_state_round_trip():
    env = wrap_env(envs.make("Pendulum-v1", num_envs=4, seed=0), norm_obs=True, norm_reward=True)
    env.reset(seed=0)
    for _ in range(30):
        env.step(torch.rand(4, 1) * 2 - 1)
    sd = env.state_dict()
    fresh = wrap_env(envs.make("Pendulum-v1", num_envs=4, seed=5), norm_obs=True, norm_reward=True)
    fresh.load_state_dict(sd)
    for a, b in (
        (find_wrapper(env, NormalizeObservation), find_wrapper(fresh, NormalizeObservation)),
        (find_wrapper(env, NormalizeReward), find_wrapper(fresh, NormalizeReward)),
    ):
        assert torch.equal(a.rms.mean, b.rms.mean) and torch.equal(a.rms.var, b.rms.var)
    # identical continuation: same physical state, RNG, normalizers
    for _ in range(20):
        act = torch.rand(4, 1) * 2 - 1
        o1, r1, *_ = env.step(act)
        o2, r2, *_ = fresh.step(act)
        assert torch.equal(o1, o2) and torch.equal(r1, r2)
    # a stack with other wrappers refuses the state with a clear message
    other = wrap_env(envs.make("Pendulum-v1", num_envs=4), norm_obs=False, norm_reward=True)
    with pytest.raises(ValueError, match="wrapper stacks differ"):
        other.load_state_dict(sd)


def test_normalize_reward_scales_by_return_std():
    env = NormalizeReward(envs.make("CartPole-v1", num_envs=64, seed=0), gamma=0.99)
    env.reset(seed=0)
    for _ in range(200):
        _, r, *_ = env.step(torch.randint(0, 2, (64,)))
    # CartPole's reward is 1: scaled reward is 1 / std(discounted return)
    assert r[0].item() == pytest.approx(1 / float(torch.sqrt(env.rms.var + 1e-8)), rel=1e-5)
    assert 0.01 < r[0].item() < 1.0


def test_rescale_action_maps_unit_box_to_bounds():
    raw = envs.make("Pendulum-v1", num_envs=3, dtype=torch.float64, seed=0)
    env = RescaleAction(raw)
    assert env.single_action_space.low.tolist() == [
        -1.0
    ] and env.single_action_space.high.tolist() == [1.0]
    env.reset(seed=0)
    state = raw.state.clone()
    env.step(torch.tensor([[-1.0], [0.5], [3.0]]))  # 3.0 is clipped to 1 -> torque 2
    ref = envs.make("Pendulum-v1", num_envs=3, dtype=torch.float64)
    ref.state = state
    ref.step(torch.tensor([[-2.0], [1.0], [2.0]]))
    assert torch.allclose(raw.state, ref.state)
    with pytest.raises(TypeError, match="Box"):
        RescaleAction(envs.make("CartPole-v1"))
