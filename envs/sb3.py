"""Our batched envs as a Stable-Baselines3 `VecEnv`, so SB3's algorithms (and RL Zoo) train on them:

    import envs
    from envs.sb3 import Sb3VecEnv
    from stable_baselines3 import PPO

    venv = Sb3VecEnv(envs.make("Hopper-v5", num_envs=16, seed=1))
    PPO("MlpPolicy", venv, n_steps=128).learn(100_000)

What SB3 sees (its `VecEnv` API, numpy on the host):

* `reset()` -> observations `[N, *obs_shape]` (the seed given with `venv.seed(s)` before it, else
  the one the env was made with); `step_async(actions)` + `step_wait()` ->
  `(obs, rewards, dones, infos)`.
* same-step autoreset, SB3's convention too: where `dones[i]`, `obs[i]` is the next episode's first
  observation, `infos[i]["terminal_observation"]` the last one of the episode that ended, and
  `infos[i]["TimeLimit.truncated"]` is True when it ended on the time limit (not a termination), the
  flag SB3 bootstraps on; every `info` also has `"episode": {"r", "l"}` at an episode's end, as
  SB3's `Monitor` would add (so SB3's logger reports returns without a Monitor wrapper).
* actions: numpy from SB3 -> a torch tensor on the env's device (Box actions are clipped to the
  bounds, as SB3's own `VecEnv`s receive them clipped from its policies anyway).
* `get_attr`/`set_attr`/`env_method` reach the one batched env (the same value for every index);
  `env_is_wrapped` is False (there are no per-sub-env gymnasium wrappers).

Each `step_wait` copies `[N, obs_dim]` to the host (SB3 works in numpy): the price of the interface,
fine on a CPU, a transfer per step on a GPU. stable-baselines3 is not a project dependency: this
module needs `pip install stable-baselines3`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from common.errors import MissingPackage, UserError

try:
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv
except ImportError as e:  # pragma: no cover - depends on the environment
    raise MissingPackage(
        f"envs.sb3 needs stable-baselines3 ({e}): pip install stable-baselines3"
    ) from None


class Sb3VecEnv(VecEnv):
    """`env` (our vec-env contract: torch tensors, same-step autoreset, `info["final_obs"]`) behind
    SB3's `VecEnv`."""

    def __init__(self, env):
        if isinstance(env.single_observation_space, gym.spaces.Dict):
            raise UserError(
                "Sb3VecEnv passes flat observations; this env has observation groups: make it "
                "without them (SB3's policies have no asymmetric critic)"
            )
        super().__init__(env.num_envs, env.single_observation_space, env.single_action_space)
        self.env = env
        self.device = torch.device(env.device)
        self._actions = None
        self._ret = np.zeros(self.num_envs)
        self._len = np.zeros(self.num_envs, dtype=np.int64)

    def reset(self) -> np.ndarray:
        seed = self._seeds[0] if self._seeds and self._seeds[0] is not None else None
        obs, _ = self.env.reset(seed=seed)
        self._reset_seeds()
        self._ret[:], self._len[:] = 0.0, 0
        return obs.cpu().numpy()

    def step_async(self, actions: np.ndarray) -> None:
        space = self.action_space
        if isinstance(space, gym.spaces.Box):
            actions = np.clip(np.asarray(actions, dtype=np.float32), space.low, space.high)
            self._actions = torch.as_tensor(actions, dtype=torch.float32, device=self.device)
        else:
            self._actions = torch.as_tensor(
                np.asarray(actions), dtype=torch.long, device=self.device
            ).reshape(-1)

    def step_wait(self):
        obs, reward, terminated, truncated, info = self.env.step(self._actions)
        obs, reward = obs.cpu().numpy(), reward.cpu().numpy()
        terminated, truncated = terminated.cpu().numpy(), truncated.cpu().numpy()
        done = terminated | truncated
        self._ret += reward
        self._len += 1
        infos = [{} for _ in range(self.num_envs)]
        if done.any():
            final = info["final_obs"].cpu().numpy()
            for i in np.flatnonzero(done):
                infos[i] = {
                    "terminal_observation": final[i],
                    "TimeLimit.truncated": bool(truncated[i] and not terminated[i]),
                    "episode": {"r": float(self._ret[i]), "l": int(self._len[i])},
                }
            self._ret[done], self._len[done] = 0.0, 0
        return obs, reward.astype(np.float32), done, infos

    def close(self) -> None:
        if hasattr(self.env, "close"):
            self.env.close()

    def get_attr(self, attr_name: str, indices=None) -> list:
        value = (
            getattr(self.env, attr_name, None)
            if attr_name == "render_mode"
            else getattr(self.env, attr_name)
        )
        return [value] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value, indices=None) -> None:
        setattr(self.env, attr_name, value)

    def env_method(self, method_name: str, *method_args, indices=None, **method_kwargs) -> list:
        return [getattr(self.env, method_name)(*method_args, **method_kwargs)] * len(
            self._get_indices(indices)
        )

    def env_is_wrapped(self, wrapper_class, indices=None) -> list[bool]:
        return [False] * len(self._get_indices(indices))
