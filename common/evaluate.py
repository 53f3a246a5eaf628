"""Evaluation during training: the deterministic policy object (`PolicyFn`), and deterministic
evaluation of a policy on fresh envs (`evaluate`, and `ma_evaluate` for multi-agent envs). The
command line that evaluates a saved checkpoint is `python -m tools.evaluate`.

This is the one module of `common/` that imports `envs` (to build evaluation envs).
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch

from common.vec_env import policy_obs


class PolicyFn:
    """A deterministic policy for deployment: `policy(obs) -> action`.

    Takes a torch tensor or a numpy array, batched `[B, *obs_shape]` or single `[*obs_shape]`, and
    answers in kind (numpy in, numpy out), so the same object drives our vec envs and a plain
    `gymnasium.make(env_id)` env. `core` maps raw observations to env-native actions on `device`.
    """

    def __init__(
        self,
        core: Callable[[torch.Tensor], torch.Tensor],
        device="cpu",
        env_id: str | None = None,
        obs_shape: tuple | None = None,
    ):
        self.core, self.device, self.env_id, self.obs_shape = (
            core,
            torch.device(device),
            env_id,
            obs_shape,
        )
        # a common.policy.Policy: exportable
        self.module = core if isinstance(core, torch.nn.Module) else None

    @torch.no_grad()
    def __call__(self, obs, action_mask=None):
        """`action_mask` (bool, True = allowed; an env's `info["action_mask"]`): for a policy of a
        masked env."""
        as_numpy = not isinstance(obs, torch.Tensor)
        x = torch.as_tensor(
            np.asarray(obs) if as_numpy else obs, dtype=torch.float32, device=self.device
        )
        single = self.obs_shape is not None and x.dim() == len(self.obs_shape)
        if single:
            x = x.unsqueeze(0)
        if action_mask is not None:
            m = torch.as_tensor(
                np.asarray(action_mask)
                if not isinstance(action_mask, torch.Tensor)
                else action_mask,
                dtype=torch.bool,
                device=self.device,
            )
            a = self.core(x, action_mask=m.unsqueeze(0) if single else m)
        else:
            a = self.core(x)
        if single:
            a = a.squeeze(0)
        return a.cpu().numpy() if as_numpy else a


class RecurrentPolicyFn(PolicyFn):
    """A `PolicyFn` with memory (a recurrent policy, `algos/ppo_rnn.py`):
    `core(obs, state) -> (action, state)`, the state batch first, one row per observation of the
    batch, kept from call to call.

        policy.reset()         forget everything: call it before new episodes (`evaluate` does)
        policy.reset(done)     forget the rows where `done` (bool [B]) is true: with a vec env that
        resets
                               its sub-envs itself, pass `terminated | truncated` after each step

    The first call, and a call with another batch size, start from `initial_state(batch)`
    (zeros)."""

    def __init__(
        self,
        core: Callable,
        initial_state: Callable[[int], torch.Tensor],
        device="cpu",
        env_id: str | None = None,
        obs_shape: tuple | None = None,
    ):
        self.recurrent_core, self.initial_state, self.state = core, initial_state, None

        def step(x, **kw):
            if self.state is None or self.state.shape[0] != x.shape[0]:
                self.state = initial_state(x.shape[0])
            action, self.state = core(x, self.state, **kw)
            return action

        super().__init__(step, device, env_id, obs_shape)
        self.module = core if isinstance(core, torch.nn.Module) else None

    def reset(self, done=None) -> None:
        if done is None or self.state is None:
            self.state = None
            return
        keep = ~torch.as_tensor(
            np.asarray(done) if not isinstance(done, torch.Tensor) else done,
            dtype=torch.bool,
            device=self.state.device,
        )
        self.state = self.state * keep.view(-1, *([1] * (self.state.dim() - 1))).to(
            self.state.dtype
        )


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
    """Run one episode in each of `episodes` parallel worlds of a fresh
    `envs.make(env_id, **env_kwargs)` with a deterministic
    `policy(obs [N, A, obs_dim], info) -> actions` and return the mean/std of the episode returns
    (sum over steps of the mean reward over agents) and the mean length."""
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
