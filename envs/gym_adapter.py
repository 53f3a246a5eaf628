"""Any gymnasium id behind the torch vec-env contract, via `gymnasium.make_vec`.

Sub-envs run on the host (in-process `sync` or subprocess `async` workers); observations,
rewards and flags come back as torch tensors on `device`, with same-step autoreset and a dense
`info["final_obs"]` (rows valid where `info["_final_obs"]`).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode

from common.device import canonical, simulator_threads
from common.errors import MissingPackage, UserError
from common.vec_env import NormalTensors
from envs.base import check_actions


# host sub-envs run in worker processes (`async`) from 8 sub-envs when the run has this many
# simulator threads (`--threads`, else the cores: common.device.simulator_threads), else in-process
ASYNC_MIN_THREADS = 4


def _name_version(env_id: str) -> tuple[str, int]:
    name, sep, v = env_id.rpartition("-v")
    return (name, int(v)) if sep and v.isdigit() else (env_id, -1)


def newest_versions(ids) -> list[str]:
    """`ids` less those with a newer version listed (`Walker2d-v3` where `Walker2d-v5` is): old
    versions are gymnasium's registrations for simulators this install may not have (mujoco-py)."""
    newest: dict[str, int] = {}
    for name, v in map(_name_version, ids):
        newest[name] = max(newest.get(name, -1), v)
    return [i for i in ids if _name_version(i)[1] == newest[_name_version(i)[0]]]


class GymnasiumVecEnv(NormalTensors, gym.vector.VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        vectorization_mode: str | None = None,
        dtype: torch.dtype = torch.float32,
        **env_kwargs,
    ):
        if vectorization_mode is None:
            # a worker process per sub-env only where there are cores to run them: each step
            # is a pipe round trip a sub-env, which on a few cores costs more than a Box2D step
            # (bench/NOTES.md#host-sub-envs-in-process-or-in-workers); the trajectories are the same
            async_ = num_envs >= 8 and simulator_threads() >= ASYNC_MIN_THREADS
            vectorization_mode = "async" if async_ else "sync"
        if vectorization_mode not in ("sync", "async"):
            raise UserError(
                f"vectorization_mode must be 'sync' or 'async', got {vectorization_mode!r}"
            )
        self.env_id = env_id
        try:
            self.env = gym.make_vec(
                env_id,
                num_envs=num_envs,
                vectorization_mode=vectorization_mode,
                vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
                **env_kwargs,
            )
        # gymnasium's extras (box2d, atari, ...): the user's to add
        except gym.error.DependencyNotInstalled as e:
            raise MissingPackage(f"{env_id} needs a package that is not installed: {e}") from None
        # an old id whose simulator gymnasium no longer ships (MuJoCo's -v2/-v3: mujoco-py)
        except ImportError as e:
            name = _name_version(env_id)[0]
            same = [i for i in gym.registry if _name_version(i)[0] == name]
            newest = max(same, key=lambda i: _name_version(i)[1], default=env_id)
            use = f"; use {newest}" if newest != env_id else ""
            raise MissingPackage(
                f"{env_id} cannot be made on this install: {str(e).rstrip('.')}{use}"
            ) from None
        self.num_envs = num_envs
        self.device = canonical(device)
        self.dtype = dtype
        self.single_observation_space = self.env.single_observation_space
        self.single_action_space = self.env.single_action_space
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space
        if not isinstance(self.single_observation_space, gym.spaces.Box):
            raise UserError(
                f"{env_id}: only Box observation spaces are supported, got "
                f"{self.single_observation_space}; "
                f"flatten it with a gymnasium wrapper (e.g. FlattenObservation) in a custom env"
            )
        self.max_episode_steps = self.env.spec.max_episode_steps if self.env.spec else None
        self._seed = seed
        self._first_reset = True

    def _obs(self, obs: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(obs), dtype=self.dtype).to(self.device)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is None and self._first_reset:
            seed = self._seed
        self._first_reset = False
        obs, info = self.env.reset(seed=seed, options=options)
        return self._obs(obs), info

    def step(self, actions):
        actions = check_actions(actions, self.single_action_space, self.num_envs, self.device)
        a = actions.detach().cpu().numpy()
        if isinstance(self.single_action_space, gym.spaces.Discrete):
            a = a.astype(self.single_action_space.dtype)
            if ((a < 0) | (a >= self.single_action_space.n)).any():
                raise UserError(
                    f"{self.env_id}: actions must be integers in [0, "
                    f"{self.single_action_space.n}), got {a[:8]}"
                )
        elif not np.isfinite(a).all():
            raise UserError(f"{self.env_id}: actions contain NaN/Inf: {a[:4]}")
        obs, reward, terminated, truncated, info = self.env.step(a)
        done = np.logical_or(terminated, truncated)
        final = np.array(obs, copy=True)
        if done.any():
            rows = np.flatnonzero(done)
            final[rows] = np.stack([info["final_obs"][i] for i in rows])
        out = {
            k: v
            for k, v in info.items()
            if k not in ("final_obs", "_final_obs", "final_info", "_final_info")
        }
        out["final_obs"] = self._obs(final)
        out["_final_obs"] = torch.as_tensor(done, device=self.device)
        return (
            self._obs(obs),
            torch.as_tensor(np.asarray(reward), dtype=torch.float32).to(self.device),
            torch.as_tensor(np.asarray(terminated, dtype=bool)).to(self.device),
            torch.as_tensor(np.asarray(truncated, dtype=bool)).to(self.device),
            out,
        )

    def raise_deferred_errors(self) -> None:
        pass

    def state_dict(self) -> dict:
        # Host simulators cannot be snapshotted in general; a resumed run starts fresh episodes.
        return {}

    def load_state_dict(self, sd: dict) -> None:
        pass

    def close_extras(self, **kwargs):
        self.env.close()

    def __repr__(self) -> str:
        return f"GymnasiumVecEnv({self.env_id}, num_envs={self.num_envs}, device={self.device})"
