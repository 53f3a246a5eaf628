"""Partially observed variants of fully observed tasks, for the asymmetric critic (observation
groups, `common/vec_env.py`): the policy sees some of the state, the critic may see all of it.

    CartPoleNoisy-v0             CartPole-v1 seen through sensor noise (CARTPOLE_NOISE, std per
                                 coordinate)
    CartPoleNoisy-Privileged-v0  the same, and a `critic` group with the noise-free state
                                 (IsaacLab's usual split: noise on the policy's observations, none
                                 on the critic's)
    CartPoleNoVel-v0             CartPole-v1, the policy sees cart position and pole angle (no
                                 velocities)
    CartPoleNoVel-Privileged-v0  the same, and a `critic` group with the full state

The dynamics, rewards, time limits and seeding are those of the full task (`envs.classic_control`);
only what is observed changes. A memoryless policy cannot recover the hidden velocities exactly, so
these are POMDPs; what the privileged critic buys is a value baseline that is a function of the true
state: lower variance advantages for the same policy class. The deployed policy needs the policy
group only.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from common.vec_env import VecEnvWrapper


# std of the noise on CartPole's (x, x_dot, theta, theta_dot) in CartPoleNoisy: about half a typical
# magnitude
CARTPOLE_NOISE = (0.4, 0.8, 0.08, 0.8)


class PartiallyObserved(VecEnvWrapper):
    """`env`'s observation columns `keep` as the observation; with `privileged`, the observation is
    the group dict `{"policy": obs[:, keep], "critic": obs}` (`info["final_obs"]` likewise)."""

    def __init__(
        self,
        env,
        keep: tuple[int, ...] | None,
        privileged: bool,
        env_id: str,
        noise: tuple[float, ...] | None = None,
        seed: int | None = None,
    ):
        super().__init__(env)
        full = env.single_observation_space
        self.keep = list(range(full.shape[0])) if keep is None else list(keep)
        self.privileged, self.env_id = privileged, env_id
        self.noise = (
            None if noise is None else torch.tensor(noise, dtype=torch.float32, device=env.device)
        )
        self.rng = torch.Generator(device=env.device)
        self.rng.manual_seed(0 if seed is None else seed + 7919)
        policy = gym.spaces.Box(full.low[self.keep], full.high[self.keep], dtype=np.float32)
        self.single_observation_space = (
            gym.spaces.Dict({"policy": policy, "critic": full}) if privileged else policy
        )
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, env.num_envs
        )

    def _obs(self, full):
        policy = full[:, self.keep]
        # sensor noise on what the policy sees, none on the critic's copy (IsaacLab's way)
        if self.noise is not None:
            policy = policy + self.noise * torch.randn(
                policy.shape, generator=self.rng, device=policy.device
            )
        return {"policy": policy, "critic": full} if self.privileged else policy

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._obs(obs), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        info = {**info, "final_obs": self._obs(info["final_obs"])}
        return self._obs(obs), reward, terminated, truncated, info

    def own_state_dict(self):
        return {"rng": self.rng.get_state()}

    def load_own_state_dict(self, sd):
        self.rng.set_state(sd["rng"].cpu())  # a state loaded onto the GPU comes back to the host

    def __repr__(self) -> str:
        return f"PartiallyObserved({self.env_id}, num_envs={self.num_envs}, device={self.device})"


def factory(
    cls,
    keep: tuple[int, ...] | None,
    privileged: bool,
    env_id: str,
    noise: tuple[float, ...] | None = None,
):
    """An `envs.make` factory for `cls` (a full task) seen through `PartiallyObserved`."""

    def make(num_envs: int, device="cpu", seed: int | None = None, **kwargs):
        return PartiallyObserved(
            cls(num_envs=num_envs, device=device, seed=seed, **kwargs),
            keep,
            privileged,
            env_id,
            noise,
            seed,
        )

    return make
