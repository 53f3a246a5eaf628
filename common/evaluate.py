"""Deterministic evaluation on fresh envs, during and after training (`python -m tools.evaluate`);
the one module of `common/` that imports `envs`."""

from __future__ import annotations

import time
from typing import Callable

import torch

from common.vec_env import policy_obs


@torch.no_grad()
def evaluate(
    policy: Callable[[torch.Tensor], torch.Tensor],
    env_id: str,
    episodes: int = 10,
    seed: int = 12345,
    device="cpu",
    max_steps: int = 100_000,
) -> dict:
    """Run `episodes` episodes of a deterministic `policy` (obs -> env-native action) in parallel,
    one per sub-env of a fresh `envs.make(env_id)`, and return their mean/std return and length (and
    `eval_seconds`, its wall time, so that a curve can leave evaluation out of training time)."""
    import envs

    t0 = time.perf_counter()
    # in-process sub-envs for host simulators: no worker processes spawned per evaluation
    env = envs.make(env_id, num_envs=episodes, device=device, seed=seed, vectorization_mode="sync")
    obs, info = env.reset(seed=seed)
    if hasattr(policy, "reset"):  # a recurrent policy starts its episodes with a blank memory
        policy.reset()
    ret = torch.zeros(episodes, dtype=torch.float64, device=env.device)
    length = torch.zeros(episodes, dtype=torch.long, device=env.device)
    running = torch.ones(episodes, dtype=torch.bool, device=env.device)
    for t in range(max_steps):
        mask = info.get("action_mask")  # a masked env: the policy takes the mask too
        act = policy(policy_obs(obs)) if mask is None else policy(policy_obs(obs), action_mask=mask)
        obs, reward, term, trunc, info = env.step(act)  # the policy group only
        # the game's own score and episodes where the env reports them (Atari: unclipped, all lives)
        ret += info.get("score", reward) * running
        length += running
        running &= ~info.get("episode_over", term | trunc)
        if t % 32 == 31 and not bool(running.any()):
            break
    env.close()
    r = ret.cpu().numpy()
    return {
        "eval_return": float(r.mean()),
        "eval_return_std": float(r.std()),
        "eval_length": float(length.double().mean()),
        "eval_seconds": time.perf_counter() - t0,
        "returns": r.tolist(),
    }


def ma_evaluate(
    policy: Callable[[torch.Tensor, dict], torch.Tensor],
    env_id: str,
    episodes: int = 10,
    seed: int = 12345,
    device="cpu",
    max_steps: int = 100_000,
    **env_kwargs,
) -> dict:
    """`evaluate` for a multi-agent env and a deterministic `policy(obs [N, A, obs_dim], info)`;
    an episode's return sums the agents' mean reward over its steps."""
    import envs

    env = envs.make(env_id, num_envs=episodes, device=device, seed=seed, **env_kwargs)
    obs, info = env.reset(seed=seed)
    ret = torch.zeros(episodes, dtype=torch.float64, device=env.device)
    length = torch.zeros(episodes, dtype=torch.long, device=env.device)
    running = torch.ones(episodes, dtype=torch.bool, device=env.device)
    for t in range(max_steps):
        with torch.no_grad():
            actions = policy(obs, info)
        obs, rewards, term, trunc, info = env.step(actions)
        ret += rewards.double().mean(-1) * running
        length += running
        running &= ~(term | trunc)
        if t % 8 == 7 and not bool(running.any()):
            break
    env.raise_deferred_errors()
    env.close()
    r = ret.cpu().numpy()
    return {
        "eval_return": float(r.mean()),
        "eval_return_std": float(r.std()),
        "eval_length": float(length.double().mean()),
        "returns": r.tolist(),
    }
