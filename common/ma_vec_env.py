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

`envs.base.MultiAgentTorchVecEnv` is the base of the batched multi-agent tasks (envs/mpe.py).
`MAEpisodeStatistics`
logs episode returns (per world: the sum over steps of the mean reward over agents);
`common.evaluate.ma_evaluate` runs a deterministic policy for a number of episodes.
"""

from __future__ import annotations

import torch

from common.wrappers import EpisodeStatistics


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
