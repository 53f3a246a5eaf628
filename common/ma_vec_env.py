"""The multi-agent vectorized-environment contract (N parallel worlds x A agents).

The multi-agent counterpart of `common/vec_env.py`, for cooperative / mixed tasks where every
world has the same fixed set of A agents acting simultaneously (PettingZoo's parallel API, batched):

    obs, info = env.reset(seed=0)
        # obs [N, A, obs_dim]; info["state"] [N, state_dim];
        # info["avail_actions"] [N, A, n_actions] bool (discrete envs only)
    obs, rewards, terminated, truncated, info = env.step(actions)
        # actions: [N, A] integer (discrete) or [N, A, act_dim] float (continuous)
        # rewards [N, A] float32; terminated / truncated [N] bool, shared by the agents of a world

* Attributes: `num_envs` (N), `n_agents` (A), `device`, `dtype`, `env_id`, `max_episode_steps`,
  `single_observation_space` (one agent's `Box((obs_dim,))`), `single_action_space` (one agent's
  space), `state_dim`, `discrete`, `n_actions` (int for discrete actions, else None),
  `agent_names` (the reference env's agent ids, in agent order).
* Agents whose own observations are shorter than `obs_dim` (heterogeneous teams) get theirs
  zero-padded at the end; `obs_dims[i]` is agent i's true length.
* `info["state"]` is the global state of the returned `obs` (for centralized critics).
* Same-step autoreset (`metadata["autoreset_mode"] == AutoresetMode.SAME_STEP`): a world that
  finished is reset inside the same `step`; `obs` / `info["state"]` are then its fresh start and
  `info["final_obs"]` [N, A, obs_dim] / `info["final_state"]` [N, state_dim] the true last ones.
  Rows are valid where `info["_final_obs"]` [N] (= terminated | truncated) is set; every key is
  present on every step. Bootstrap from `final_obs` / `final_state` on truncation only.
  A world that reaches `max_episode_steps` is reported truncated, not terminated, even if it
  also reached a terminal state on that step (PettingZoo's MPE checks the time limit first).
* No Python loop over worlds, no host sync inside `step`. Invalid action values (out-of-range
  discrete actions, NaN/Inf) raise at once on CPU and at the next logging tick elsewhere
  (`raise_deferred_errors`, called by `MAEpisodeStatistics.pop`).
* `state_dict()` / `load_state_dict()` restore the worlds, step counters and RNG exactly.
* Observations and the global state are in `env.dtype` (float32 unless the env was made with
  `dtype=torch.float64`, as the parity tests do); rewards are always float32.

`MultiAgentTorchVecEnv` is the base for torch-native batched multi-agent tasks: a subclass writes
pure tensor functions over a batched world state and gets time limits, autoreset, final
obs/state, action validation, seeding and checkpointable state from here. `MAEpisodeStatistics`
logs episode returns (per world: the sum over steps of the mean reward over agents);
`common.evaluate.ma_evaluate` runs a deterministic policy for a number of episodes.
"""

from __future__ import annotations

import gymnasium as gym
import torch
from gymnasium.vector.utils import batch_space

from common.errors import UserError
from common.vec_env import TorchVecEnv
from common.wrappers import EpisodeStatistics

__all__ = ["MultiAgentTorchVecEnv", "MAEpisodeStatistics"]


class MultiAgentTorchVecEnv(TorchVecEnv):
    """Base class of torch-native batched multi-agent environments (see the module docstring).

    A subclass sets `env_id`, `max_episode_steps`, `agent_names` and implements:

    * `_sample_initial_state(n) -> state` with leading dim n, using `self.rng` (a
      `torch.Generator`);
    * `_transition(state, actions) -> (next_state, rewards [n, A], terminated [n])`, where
      `actions` have passed validation (discrete: integer [n, A], continuous: float [n, A,
      act_dim]);
    * `_observe(state) -> obs [n, A, obs_dim]` in `self.dtype`;
    * optionally `_global_state(state, obs) -> [n, state_dim]` (default: the agents' observations
      concatenated) and `_avail_actions(state) -> [n, A, n_actions]` bool (default: all True).
    """

    env_id: str = "MultiAgentTorchVecEnv"

    def __init__(
        self,
        num_envs: int,
        n_agents: int,
        single_observation_space: gym.spaces.Box,
        single_action_space: gym.Space,
        state_dim: int,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int | None = None,
        validate_actions: bool = True,
        agent_names: list[str] | None = None,
        obs_dims: list[int] | None = None,
    ):
        if dtype not in (torch.float32, torch.float64):
            raise UserError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        self.n_agents = self._batch_agents = int(n_agents)
        self.state_dim = int(state_dim)
        self.discrete = isinstance(single_action_space, gym.spaces.Discrete)
        self.n_actions = int(single_action_space.n) if self.discrete else None
        self.agent_names = (
            list(agent_names)
            if agent_names is not None
            else [f"agent_{i}" for i in range(n_agents)]
        )
        obs_dim = int(single_observation_space.shape[0])
        self.obs_dims = list(obs_dims) if obs_dims is not None else [obs_dim] * n_agents
        # seeding, validation flags, the first state, elapsed steps, state_dict: as TorchVecEnv
        super().__init__(
            num_envs,
            single_observation_space,
            single_action_space,
            device,
            dtype,
            seed,
            validate_actions,
        )
        # batched spaces: one per agent inside each sub-env
        self.observation_space = batch_space(
            batch_space(single_observation_space, n_agents), num_envs
        )
        self.action_space = batch_space(batch_space(single_action_space, n_agents), num_envs)

    def _global_state(self, state: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return obs.reshape(obs.shape[0], -1)

    def _avail_actions(self, state: torch.Tensor) -> torch.Tensor:
        return torch.ones(
            state.shape[0], self.n_agents, self.n_actions, dtype=torch.bool, device=self.device
        )

    # ---- helpers for subclasses ----------------------------------------------------------------
    def _uniform(self, *shape: int, low=0.0, high=1.0) -> torch.Tensor:
        u = torch.rand(*shape, generator=self.rng, device=self.device, dtype=self.dtype)
        return low + (high - low) * u

    def _info(
        self, state: torch.Tensor, obs: torch.Tensor, global_state: torch.Tensor | None = None
    ) -> dict:
        info = {"state": self._global_state(state, obs) if global_state is None else global_state}
        if self.discrete:
            info["avail_actions"] = self._avail_actions(state)
        return info

    # ---- API -------------------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.rng.manual_seed(int(seed))
        self.state = self._sample_initial_state(self.num_envs)
        self.elapsed.zero_()
        self._invalid_action.zero_()
        obs = self._observe(self.state)
        return obs, self._info(self.state, obs)

    def step(self, actions):
        if self.validate_actions:
            actions = self._validate(actions)
        next_state, rewards, terminated = self._transition(self.state, actions)
        self.elapsed += 1
        if self.max_episode_steps is not None:
            truncated = self.elapsed >= self.max_episode_steps
            # the time limit is checked first (as PettingZoo's MPE)
            terminated = terminated & ~truncated
        else:
            truncated = torch.zeros_like(terminated)
        done = terminated | truncated
        final_obs = self._observe(next_state)
        final_state = self._global_state(next_state, final_obs)
        fresh = self._sample_initial_state(self.num_envs)
        fresh_obs = self._observe(fresh)
        d = done.view(-1, *([1] * (next_state.dim() - 1)))
        self.state = torch.where(d, fresh, next_state)
        self.elapsed = torch.where(done, torch.zeros_like(self.elapsed), self.elapsed)
        obs = torch.where(done[:, None, None], fresh_obs, final_obs)
        global_state = torch.where(done[:, None], self._global_state(fresh, fresh_obs), final_state)
        info = self._info(self.state, obs, global_state)
        info.update(final_obs=final_obs, final_state=final_state, _final_obs=done)
        return obs, rewards.to(torch.float32), terminated, truncated, info

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.env_id}, num_envs={self.num_envs}, "
            f"n_agents={self.n_agents}, device={self.device})"
        )


class MAEpisodeStatistics(EpisodeStatistics):
    """Records the return and length of finished multi-agent episodes, as tensors on the device.

    The return of an episode is the sum over its steps of the mean reward over the agents.
    `info["episode"] = {"r": returns [N], "l": lengths [N]}` with rows valid where
    `info["_episode"]`. `pop()` (logging ticks only: it syncs with the host and raises deferred
    invalid-action errors) returns the mean return/length of the episodes finished since the last
    call (nan if none) and their count, and resets the accumulators.
    """

    hold_last = False

    def _step_reward(self, reward: torch.Tensor) -> torch.Tensor:
        return reward.mean(-1)
