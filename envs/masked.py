"""Two small tasks for the discrete-action features of the PPO and DQN files (not gymnasium tasks):

MaskedWalk-v0   walk from cell 0 to cell 9 of a corridor with 12 actions of which 2 are valid at
                each step (which two changes every step): `info["action_mask"]` says which. Forward
                earns nothing until the goal (+1, the episode ends); back moves one cell back (not
                below 0); an invalid action leaves the agent where it is and costs 0.1. The
                observation shows the position and, one-hot, which action is forward and which is
                back, so an unmasked policy can learn the task too: it has to learn which 10 actions
                to avoid first. 50 steps.
GridReach-v0    reach a goal cell on a 5 x 5 grid with a MultiDiscrete([3, 3]) action (x move and y
                move, each -1, 0 or +1; moves off the grid are clipped): -0.05 per step, +1 on the
                goal (the episode ends there). Observation: goal - position and position, scaled to
                [-1, 1]. An optimal policy earns 1 - 0.05 (d - 1) for a start at Chebyshev distance
                d. 20 steps.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from envs.base import TorchVecEnv


class MaskedWalk(TorchVecEnv):
    env_id = "MaskedWalk-v0"
    max_episode_steps = 50
    n_actions, length, invalid_cost = 12, 10, 0.1

    def __init__(self, num_envs: int = 1, device="cpu", dtype=torch.float32, seed=None, **kw):
        obs_space = gym.spaces.Box(0.0, 1.0, (1 + 2 * self.n_actions,), np.float32)
        super().__init__(
            num_envs, obs_space, gym.spaces.Discrete(self.n_actions), device, dtype, seed, **kw
        )

    def _draw_actions(self, n):
        """(forward, back): two distinct action indices per sub-env, drawn afresh every step."""
        fwd = torch.randint(0, self.n_actions, (n,), generator=self.rng, device=self.device)
        back = (
            fwd
            + 1
            + torch.randint(0, self.n_actions - 1, (n,), generator=self.rng, device=self.device)
        ) % self.n_actions
        return fwd.to(self.dtype), back.to(self.dtype)

    def _sample_initial_state(self, n):  # [position, forward action, back action]
        return torch.stack(
            [torch.zeros(n, device=self.device, dtype=self.dtype), *self._draw_actions(n)], -1
        )

    def _transition(self, state, action):
        pos, fwd, back = state.unbind(-1)
        a = action.to(self.dtype)
        forward, backward = a == fwd, a == back
        pos = torch.where(forward, pos + 1, torch.where(backward, (pos - 1).clamp(min=0), pos))
        terminated = pos >= self.length - 1
        reward = terminated.to(self.dtype) - self.invalid_cost * (~(forward | backward)).to(
            self.dtype
        )
        return torch.stack([pos, *self._draw_actions(len(pos))], -1), reward, terminated

    def _one_hot(self, idx):
        return torch.nn.functional.one_hot(idx.long(), self.n_actions).to(torch.float32)

    def _observe(self, state):
        pos, fwd, back = state.unbind(-1)
        return torch.cat(
            [
                (pos / (self.length - 1)).unsqueeze(-1).float(),
                self._one_hot(fwd),
                self._one_hot(back),
            ],
            -1,
        )

    def _action_mask(self, state):
        return (self._one_hot(state[:, 1]) + self._one_hot(state[:, 2])) > 0


class UnmaskedWalk(MaskedWalk):
    """MaskedWalk-NoMask-v0: the same task without `info["action_mask"]` (for comparison: the
    invalid actions are still invalid, only no longer announced)."""

    env_id = "MaskedWalk-NoMask-v0"
    _action_mask = TorchVecEnv._action_mask


class GridReach(TorchVecEnv):
    env_id = "GridReach-v0"
    max_episode_steps = 20
    size, step_cost = 5, 0.05

    def __init__(self, num_envs: int = 1, device="cpu", dtype=torch.float32, seed=None, **kw):
        obs_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        super().__init__(
            num_envs, obs_space, gym.spaces.MultiDiscrete([3, 3]), device, dtype, seed, **kw
        )

    def _sample_initial_state(self, n):  # [x, y, goal x, goal y], the goal elsewhere than the start
        pos = torch.randint(0, self.size, (n, 2), generator=self.rng, device=self.device)
        shift = torch.randint(
            1, self.size * self.size, (n,), generator=self.rng, device=self.device
        )
        cell = (pos[:, 0] * self.size + pos[:, 1] + shift) % (self.size * self.size)
        return torch.cat([pos, torch.stack([cell // self.size, cell % self.size], -1)], -1).to(
            self.dtype
        )

    def _transition(self, state, action):
        pos = (state[:, :2] + action.to(self.dtype) - 1).clamp(0, self.size - 1)
        terminated = (pos == state[:, 2:]).all(-1)
        reward = torch.where(terminated, 1.0, -self.step_cost).to(self.dtype)
        return torch.cat([pos, state[:, 2:]], -1), reward, terminated

    def _observe(self, state):
        scale = self.size - 1
        return torch.cat(
            [(state[:, 2:] - state[:, :2]) / scale, state[:, :2] / scale * 2 - 1], -1
        ).float()
