"""Environment entry point: `envs.make(env_id, num_envs=..., device=..., seed=...)`.

Torch-native batched implementations are used for the ids in `NATIVE`; any other gymnasium id
goes through `gymnasium.make_vec` behind the same torch-tensor contract (`envs.gym_adapter`).
"""

from __future__ import annotations

import difflib

import torch

from envs.classic_control import Acrobot, CartPole, MountainCar, MountainCarContinuous, Pendulum

NATIVE = {
    "CartPole-v1": CartPole,
    "Acrobot-v1": Acrobot,
    "MountainCar-v0": MountainCar,
    "MountainCarContinuous-v0": MountainCarContinuous,
    "Pendulum-v1": Pendulum,
}


def make(env_id: str, num_envs: int = 1, device: str | torch.device = "cpu", seed: int | None = None, **kwargs):
    """Make a vectorized env with torch tensors on `device` (see `common/vec_env.py`).

    `vectorization_mode` ("sync" / "async") picks how gymnasium ids run their host sub-envs
    (default: async from 8 envs); torch-native envs ignore it.
    """
    if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs <= 0:
        raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}")
    if env_id in NATIVE:
        kwargs.pop("vectorization_mode", None)  # only meaningful for host (gymnasium) sub-envs
        return NATIVE[env_id](num_envs=num_envs, device=device, seed=seed, **kwargs)
    import gymnasium as gym

    if env_id not in gym.registry:
        # phys2d/ and tabular/ are gymnasium's JAX-only functional envs: not offered here
        known = sorted(set(NATIVE) | {k for k in gym.registry if not k.startswith(("phys2d/", "tabular/"))})
        close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.5)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise ValueError(
            f"unknown env id {env_id!r}.{hint} Torch-native ids: {', '.join(sorted(NATIVE))}; "
            f"any id registered with gymnasium also works (see gymnasium.pprint_registry())."
        )
    from envs.gym_adapter import GymnasiumVecEnv

    return GymnasiumVecEnv(env_id, num_envs=num_envs, device=device, seed=seed, **kwargs)
