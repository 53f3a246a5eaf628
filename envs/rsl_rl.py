"""Our batched envs as an rsl_rl `VecEnv`, so rsl_rl's `OnPolicyRunner` trains on them unchanged.

    import envs
    from envs.rsl_rl import RslRlVecEnv
    from rsl_rl.runners import OnPolicyRunner

    env = RslRlVecEnv(envs.make("Hopper-v5", num_envs=64, seed=1))
    OnPolicyRunner(env, train_cfg, log_dir=None, device="cpu").learn(100)

What rsl_rl (>= 3, the TensorDict interface; tested with rsl-rl-lib 5.5) sees:

* `get_observations()` and the first item of `step` are a `TensorDict` with one group, `policy`
  (`[num_envs, obs_dim]`); rsl_rl's default `obs_groups` feed it to the actor and the critic.
* `step(actions)` clips the actions to the action space's bounds (rsl_rl samples an unbounded
  Gaussian; IsaacLab's wrapper does the same with its `clip_actions`), steps the env and returns
  `(obs, rewards [N] float, dones [N] long, extras)` with `extras["time_outs"]` = truncated and not
  terminated, the flag rsl_rl bootstraps on. `obs` is already the next episode's first observation
  where `dones` is set (our same-step autoreset, which is rsl_rl's convention too);
  `extras["final_obs"]` keeps the true last observation for code that wants it (rsl_rl does not use
  it: it bootstraps a time-out from the value of the observation before the step).
* `num_envs`, `num_actions`, `max_episode_length` (the env's time limit), `episode_length_buf`
  (steps since each sub-env's reset; read-only here: our envs do not start episodes mid-way, so
  `learn(init_at_random_ep_len=True)` is refused), `device`, `cfg`.

rsl_rl is not a project dependency: this module needs `pip install rsl-rl-lib` (which brings
tensordict). `bench/peers/rsl_rl.py` uses it to run rsl_rl beside `algos/ppo_vec.py` on the same env
objects.
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch

from common.errors import MissingPackage, UserError

try:
    from rsl_rl.env import VecEnv
    from tensordict import TensorDict
except ImportError as e:  # pragma: no cover - depends on the environment
    raise MissingPackage(
        f"envs.rsl_rl needs rsl_rl and tensordict ({e}): pip install rsl-rl-lib"
    ) from None


class RslRlVecEnv(VecEnv):
    """`env` (our vec-env contract: torch tensors, same-step autoreset, continuous actions) behind
    rsl_rl's `VecEnv` interface."""

    def __init__(self, env, seed: int | None = None):
        space = env.single_action_space
        if not isinstance(space, gym.spaces.Box):
            raise UserError(f"rsl_rl's PPO needs continuous (Box) actions; this env has {space}")
        if len(env.single_observation_space.shape) != 1:
            raise UserError(
                f"rsl_rl's MLP models need flat observations, got "
                f"{env.single_observation_space.shape}"
            )
        self.env = env
        self.num_envs = env.num_envs
        self.num_actions = int(math.prod(space.shape))
        self.device = torch.device(env.device)
        self.max_episode_length = int(getattr(env, "max_episode_steps", 0) or 0)
        self.cfg = {"env": getattr(getattr(env, "spec", None), "id", type(env).__name__)}
        self.low = torch.as_tensor(space.low, dtype=torch.float32, device=self.device)
        self.high = torch.as_tensor(space.high, dtype=torch.float32, device=self.device)
        self._length = torch.zeros(self.num_envs, dtype=torch.long, device=self.device)
        obs, _ = env.reset(seed=seed)
        self._obs = self._group(obs)

    @property
    def episode_length_buf(self) -> torch.Tensor:
        return self._length

    @episode_length_buf.setter
    def episode_length_buf(self, value: torch.Tensor) -> None:
        raise UserError(
            "RslRlVecEnv cannot start episodes mid-way: call OnPolicyRunner.learn without "
            "init_at_random_ep_len=True"
        )

    def _group(self, obs: torch.Tensor) -> TensorDict:
        return TensorDict({"policy": obs.float()}, batch_size=[self.num_envs], device=self.device)

    def get_observations(self) -> TensorDict:
        return self._obs

    def step(self, actions: torch.Tensor):
        actions = torch.clamp(actions.to(self.device, torch.float32), self.low, self.high)
        obs, reward, terminated, truncated, info = self.env.step(actions)
        done = terminated | truncated
        self._length = torch.where(done, torch.zeros_like(self._length), self._length + 1)
        self._obs = self._group(obs)
        extras = {"time_outs": truncated & ~terminated, "final_obs": info["final_obs"], "log": {}}
        return self._obs, reward.float(), done.long(), extras

    def close(self) -> None:
        if hasattr(self.env, "close"):
            self.env.close()
