"""`envs.rsl_rl.RslRlVecEnv`: our batched envs behind rsl_rl's `VecEnv` interface (the adapter the
locomotion benchmark runs rsl_rl through). rsl-rl-lib is a test-only requirement, like mpe2.

* the adapter's steps are the wrapped env's steps: same seed and actions give the same observations,
  rewards and done flags; `time_outs` is set exactly on the time-limit steps; actions are clipped to
  the bounds as rsl_rl's IsaacLab wrapper does; `episode_length_buf` counts from each reset;
* rsl_rl's own `OnPolicyRunner` with the benchmark's config (IsaacLab's classic PPO) runs iterations
  on our Hopper, fills its rollout storage from the adapter and moves the policy: a few iterations
  raise the deterministic return of the policy on Pendulum, the task where a few iterations are
  enough to tell.
"""

from __future__ import annotations

import sys

import pytest
import torch

import envs
from common.evaluate import evaluate
from conftest import ROOT

pytest.importorskip("rsl_rl", reason="test-only requirement: pip install rsl-rl-lib")
from envs.rsl_rl import RslRlVecEnv  # noqa: E402
from rsl_rl.runners import OnPolicyRunner  # noqa: E402
from tensordict import TensorDict  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from run import peer_module  # noqa: E402

isaaclab_classic_cfg = peer_module("rsl_rl").isaaclab_classic_cfg


def test_adapter_steps_are_the_env_steps():
    n = 8
    plain = envs.make("Pendulum-v1", num_envs=n, seed=3)
    obs, _ = plain.reset(seed=3)
    wrapped = RslRlVecEnv(envs.make("Pendulum-v1", num_envs=n, seed=3), seed=3)
    td = wrapped.get_observations()
    assert (
        isinstance(td, TensorDict)
        and list(td.keys()) == ["policy"]
        and td.batch_size == torch.Size([n])
    )
    assert torch.equal(td["policy"], obs.float())
    assert (wrapped.num_envs, wrapped.num_actions, wrapped.max_episode_length) == (n, 1, 200)
    gen = torch.Generator().manual_seed(0)
    timeouts = 0
    for t in range(450):
        # outside Pendulum's [-2, 2]: the adapter clips
        actions = 3 * torch.randn(n, 1, generator=gen)
        obs, reward, term, trunc, _ = plain.step(actions.clamp(-2, 2))
        with torch.inference_mode():  # as rsl_rl's runner steps
            td, rew, dones, extras = wrapped.step(actions)
        assert torch.equal(td["policy"], obs.float()) and torch.equal(rew, reward.float())
        assert dones.dtype == torch.long and torch.equal(dones.bool(), term | trunc)
        assert torch.equal(extras["time_outs"], trunc & ~term)
        assert torch.equal(wrapped.episode_length_buf, torch.full((n,), (t + 1) % 200))
        timeouts += int(extras["time_outs"].sum())
    assert timeouts == 2 * n  # steps 200 and 400 of every sub-env
    with pytest.raises(ValueError, match="init_at_random_ep_len"):
        wrapped.episode_length_buf = torch.zeros(n, dtype=torch.long)
    with pytest.raises(ValueError, match="Box"):
        RslRlVecEnv(envs.make("CartPole-v1", num_envs=2))


def _runner(env_id: str, num_envs: int, seed: int) -> OnPolicyRunner:
    torch.manual_seed(seed)
    env = RslRlVecEnv(envs.make(env_id, num_envs=num_envs, seed=seed), seed=seed)
    return OnPolicyRunner(env, isaaclab_classic_cfg(obs_norm=True), log_dir=None, device="cpu")


def _deterministic(runner: OnPolicyRunner):
    env = runner.env

    @torch.no_grad()
    def policy(obs):
        out = runner.alg.get_policy()(
            TensorDict({"policy": obs.float()}, batch_size=[obs.shape[0]])
        )
        return out.clamp(env.low, env.high)

    return policy


def test_rsl_rl_runner_trains_on_our_hopper():
    runner = _runner("Hopper-v5", num_envs=16, seed=1)
    before = {k: v.clone() for k, v in runner.alg.get_policy().state_dict().items()}
    runner.learn(3)
    assert runner.env.episode_length_buf.max() > 0
    after = runner.alg.get_policy().state_dict()
    moved = [
        k
        for k in before
        if before[k].shape == after[k].shape and not torch.equal(before[k], after[k])
    ]
    assert moved and all(torch.isfinite(v).all() for v in after.values())
    storage = runner.alg.storage
    assert (
        storage.observations["policy"].shape == (32, 16, 11)
        and torch.isfinite(storage.rewards).all()
    )


@pytest.mark.slow  # trains to a threshold
def test_rsl_rl_learns_pendulum_through_the_adapter():
    runner = _runner("Pendulum-v1", num_envs=64, seed=0)
    runner.alg.eval_mode()
    start = evaluate(_deterministic(runner), "Pendulum-v1", 10, seed=123)["eval_return"]
    runner.learn(150)  # 150 x 64 envs x 32 steps = 307k env steps
    runner.alg.eval_mode()
    end = evaluate(_deterministic(runner), "Pendulum-v1", 10, seed=123)["eval_return"]
    # learned, by a margin a machine's rounding does not erase: rsl_rl's PPO (IsaacLab's classic
    # config) on Pendulum is a draw past that. 2026-11-26's CI machine, seeds 0, 1, 2: -1382 ->
    # -541, -1419 -> -963, -1277 -> -389 at 150 iterations (seed 0 had ended above -400 on an
    # earlier machine, and falls to -1228 at 200 here)
    assert end > start + 400 and end > -1000, (start, end)
