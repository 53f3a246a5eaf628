"""The multi-agent vec-env contract (N worlds x A agents acting at once, PettingZoo's parallel
API batched), in full in docs/environments.md#multi-agent-envs: observations `[N, A, obs_dim]`,
rewards `[N, A]` float32, `terminated`/`truncated` `[N]` shared by a world's agents,
`info["state"]` for centralized critics, same-step autoreset with `final_obs`/`final_state`.
"""

from __future__ import annotations

import torch

from common.wrappers import EpisodeStatistics


class MAEpisodeStatistics(EpisodeStatistics):
    """`EpisodeStatistics` for a multi-agent env: an episode's return is the sum over its steps of
    the mean reward over the agents; `pop()` gives nan when no episode finished."""

    hold_last = False

    def _step_reward(self, reward: torch.Tensor) -> torch.Tensor:
        return reward.mean(-1)
