"""Chasing-v0: an agent chases a randomly moving target in `dim` dimensions (default 2).

The task of the chasing demo in ElegantRL's VecEnv tutorial, written here from its description as
a `TorchVecEnv` (pure tensor functions over `[N, state_dim]`, so N copies step in one batched call
on any device, with same-step autoreset, `final_obs`, time limit, seeding and `state_dict` from
`common.vec_env`).

Dynamics of one step (every vector has `dim` components, `clip(x) = x / max(1, ||x||)`):

    a0 = clip(U[target_low, 1)^dim)      the target's random action, drawn from `env.rng`
    v0 = 0.5 * v0 + a0;   p0 = p0 + 0.01 * v0
    a1 = clip(action)                     the agent's action, Box(-1, 1, (dim,))
    v1 = 0.75 * v1 + a1;  p1 = p1 + 0.01 * v1
    d  = ||p0 - p1||
    reward     = d_prev - d - 0.02 * ||a1||  (+ capture_bonus when d < capture_radius)
    terminated = d < capture_radius          (capture)

Design choices:

* Target motion: by default `target_low = -1`, i.e. the target's action is uniform in [-1, 1)^dim,
  an isotropic random walk with no preferred direction (the mean velocity is zero, so the chase
  looks the same in every direction). `target_low = 0` gives the tutorial's target, whose action
  is uniform in [0, 1)^dim and which therefore drifts steadily towards (+1, ..., +1) (a mean speed
  of about 1.4 in 2-D, a third of the agent's top speed).
* Initial state: the agent at the origin at rest; the target at rest at distance `init_distance`
  (8.0) in a direction drawn uniformly on the unit sphere (a normalized Gaussian vector).
* Observation (float32, `3 * dim + 1` values): the relative position `p0 - p1`, the target's
  velocity `v0`, the agent's velocity `v1` and the distance `||p0 - p1||`. It is translation
  invariant (absolute positions never matter: the dynamics and reward only see `p0 - p1`) and
  Markov (the state's remembered previous distance equals the observed distance).
* Time limit: `max_episode_steps = 512` (the tutorial uses 1024). Under unit throttle the agent's
  top speed is 1 / (1 - 0.75) = 4, i.e. 0.04 per step, so it needs about 175 steps to close the 7
  units between the start and the capture radius; `pursuit_policy` captures in 179 steps on
  average (at most ~191 over 1000 episodes) against the isotropic target, in 200 (at most ~280)
  against the drifting one, which a 256-step limit would cut. 512 leaves a learner a few times the
  scripted time to capture, while an episode that never captures costs half the steps of the
  tutorial's 1024.
* Return scale: the distance terms telescope to `init_distance - final distance`, so a capture
  is worth about 7 + 8 (bonus) minus the action cost. The action cost per unit of distance
  travelled at constant throttle is 0.02 / 0.04 = 0.5 whatever the throttle, so about 3.5 for a
  direct chase: `pursuit_policy` scores about 11.45, a zero action about 0.0, a uniformly random
  action about -7.6 (it wanders and pays ~0.015 per step). tests/test_chasing.py holds what ppo_vec
  learns (`CHASING_PPO`).

`pursuit_policy(obs)` is a scripted baseline: full throttle towards the target with the
agent's own velocity damped towards the direct line (a velocity controller), for benchmarks to
print beside learned agents.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from common.errors import UserError
from envs.base import TorchVecEnv

__all__ = ["Chasing", "pursuit_policy"]

TARGET_DAMPING, AGENT_DAMPING, DT = 0.5, 0.75, 0.01
ACTION_COST = 0.02


def clip_norm(x: torch.Tensor) -> torch.Tensor:
    """Scale each row of `x` (last axis) down to an L2 norm of at most 1 (rows inside stay as they
    are)."""
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp(min=1.0)


class Chasing(TorchVecEnv):
    """Chasing-v0: chase a randomly moving target in `dim` dimensions (see the module docstring).

    State `[N, 4 * dim + 1]` = (p0, v0, p1, v1, distance): target position and velocity, agent
    position and velocity, the current (after the next step: previous) distance.
    Observation `[N, 3 * dim + 1]` = (p0 - p1, v0, v1, distance). Action `[N, dim]` in [-1, 1].
    """

    env_id = "Chasing-v0"
    max_episode_steps = 512

    def __init__(
        self,
        num_envs: int = 1,
        device="cpu",
        dtype=torch.float32,
        seed=None,
        dim: int = 2,
        init_distance: float = 8.0,
        capture_radius: float = 1.0,
        capture_bonus: float | None = None,
        target_low: float = -1.0,
        max_episode_steps: int | None = 512,
        **kw,
    ):
        if not isinstance(dim, int) or isinstance(dim, bool) or dim <= 0:
            raise UserError(f"Chasing-v0: dim must be a positive integer, got {dim!r}")
        if not init_distance > capture_radius > 0:
            raise UserError(
                f"Chasing-v0: need init_distance > capture_radius > 0, got {init_distance}, "
                f"{capture_radius}"
            )
        if not -1.0 <= target_low < 1.0:
            raise UserError(f"Chasing-v0: target_low must lie in [-1, 1), got {target_low}")
        self.dim = dim
        self.init_distance = float(init_distance)
        self.capture_radius = float(capture_radius)
        self.capture_bonus = float(init_distance if capture_bonus is None else capture_bonus)
        self.target_low = float(target_low)
        self.max_episode_steps = max_episode_steps
        obs_space = gym.spaces.Box(-np.inf, np.inf, shape=(3 * dim + 1,), dtype=np.float32)
        act_space = gym.spaces.Box(-1.0, 1.0, shape=(dim,), dtype=np.float32)
        super().__init__(num_envs, obs_space, act_space, device, dtype, seed, **kw)

    def _split(self, state):
        d = self.dim
        return (
            state[:, :d],
            state[:, d : 2 * d],
            state[:, 2 * d : 3 * d],
            state[:, 3 * d : 4 * d],
            state[:, 4 * d],
        )

    def _sample_initial_state(self, n):
        direction = torch.randn(
            n, self.dim, generator=self.rng, device=self.device, dtype=self.dtype
        )
        norm = torch.linalg.vector_norm(direction, dim=-1, keepdim=True)
        # a zero draw (probability ~0) falls back to the first axis
        first_axis = torch.zeros_like(direction)
        first_axis[:, 0] = 1.0
        direction = torch.where(norm > 0, direction / norm.clamp(min=1e-30), first_axis)
        p0 = self.init_distance * direction
        zeros = torch.zeros_like(p0)
        dist = torch.full((n, 1), self.init_distance, device=self.device, dtype=self.dtype)
        return torch.cat((p0, zeros, zeros, zeros, dist), dim=-1)

    def _target_action(self, n: int) -> torch.Tensor:
        """The target's raw action `[n, dim]`, uniform in [target_low, 1)^dim (norm-clipped by the
        caller)."""
        return self._uniform(n, self.dim, self.target_low, 1.0)

    def _transition(self, state, action):
        p0, v0, p1, v1, prev_dist = self._split(state)
        a0 = clip_norm(self._target_action(state.shape[0]))
        v0 = TARGET_DAMPING * v0 + a0
        p0 = p0 + DT * v0
        a1 = clip_norm(action.to(state.dtype))
        v1 = AGENT_DAMPING * v1 + a1
        p1 = p1 + DT * v1
        dist = torch.linalg.vector_norm(p0 - p1, dim=-1)
        terminated = dist < self.capture_radius
        reward = prev_dist - dist - ACTION_COST * torch.linalg.vector_norm(a1, dim=-1)
        reward = reward + self.capture_bonus * terminated.to(state.dtype)
        return torch.cat((p0, v0, p1, v1, dist[:, None]), dim=-1), reward, terminated

    def _observe(self, state):
        p0, v0, p1, v1, dist = self._split(state)
        obs = torch.cat((p0 - p1, v0, v1, dist[:, None]), dim=-1)
        return obs.to(torch.float32) if self.dtype == torch.float32 else obs


def pursuit_policy(obs: torch.Tensor) -> torch.Tensor:
    """Scripted chaser: obs `[..., 3 * dim + 1]` -> action `[..., dim]` of norm 1.

    A velocity controller: the wanted velocity is the top speed (4 = 1 / (1 - 0.75)) along the line
    to the target; the action is the one that would reach it in one step, `v_want - 0.75 * v1`,
    scaled to unit norm (full throttle), so sideways velocity left from earlier steps is damped.
    """
    dim = (obs.shape[-1] - 1) // 3
    rel, v1 = obs[..., :dim], obs[..., 2 * dim : 3 * dim]
    top_speed = 1.0 / (1.0 - AGENT_DAMPING)
    unit = rel / torch.linalg.vector_norm(rel, dim=-1, keepdim=True).clamp(min=1e-6)
    a = top_speed * unit - AGENT_DAMPING * v1
    return a / torch.linalg.vector_norm(a, dim=-1, keepdim=True).clamp(min=1e-6)
