"""The vec-env contract every algorithm file relies on, in full in
docs/environments.md#the-vec-env-contract: gymnasium's `VectorEnv` API with torch tensors on
`env.device`, same-step autoreset with `info["final_obs"]`, no host sync in `step`; optional
observation groups and action masks. Here: its wrapper base, the inference-mode guard, and the
group and mask helpers the algorithm files share.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import torch

from common.encoders import is_image
from common.errors import UserError


def describe(space: gym.Space) -> str:
    """A space in a few words (type, shape, dtype; a Dict's sub-spaces; no Box bounds), for
    messages and for what a checkpoint records of its env."""
    if isinstance(space, gym.spaces.Box):
        return f"Box(shape={tuple(space.shape)}, {space.dtype})"
    if isinstance(space, gym.spaces.Dict):
        return "Dict(" + ", ".join(f"{k}: {describe(v)}" for k, v in space.spaces.items()) + ")"
    return repr(space)


def outside_inference_mode(fn):
    """`fn` run with inference mode off (and autograd off) when the caller has it on, so that the
    tensors it creates (the env's state among them) can later be updated in place or used in
    autograd outside inference mode."""
    if getattr(fn, "_outside_inference_mode", False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not torch.is_inference_mode_enabled():
            return fn(*args, **kwargs)
        with torch.inference_mode(False), torch.no_grad():
            return fn(*args, **kwargs)

    wrapper._outside_inference_mode = True
    return wrapper


class NormalTensors:
    """Mixin of every vec env and wrapper: the `__init__`, `step`, `reset` and `load_state_dict`
    each subclass defines run through `outside_inference_mode`."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ("__init__", "step", "reset", "load_state_dict"):
            if name in cls.__dict__ and callable(cls.__dict__[name]):
                setattr(cls, name, outside_inference_mode(cls.__dict__[name]))


class VecEnvWrapper(NormalTensors, gym.vector.VectorWrapper):
    """Base of the wrappers in `common.wrappers`: unknown attributes are the wrapped env's;
    `state_dict()` nests every layer's state, so a checkpoint restores the normalizers too."""

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    def own_state_dict(self) -> dict:
        return {}

    def load_own_state_dict(self, sd: dict) -> None:
        pass

    def state_dict(self) -> dict:
        inner = self.env.state_dict() if hasattr(self.env, "state_dict") else {}
        return {"wrapper": type(self).__name__, "own": self.own_state_dict(), "inner": inner}

    def load_state_dict(self, sd: dict) -> None:
        if sd.get("wrapper") != type(self).__name__:
            raise UserError(
                f"env state was saved with wrapper {sd.get('wrapper')!r} where this env has "
                f"{type(self).__name__!r}: the wrapper stacks differ (different normalization "
                f"flags?)"
            )
        self.load_own_state_dict(sd["own"])
        if hasattr(self.env, "load_state_dict"):
            self.env.load_state_dict(sd["inner"])


def keeps_episodes(env) -> bool:
    """Whether a checkpoint restores `env`'s episodes where they stood. A simulator that cannot
    save its state (ALE, a host gymnasium env: empty `state_dict()`) starts new ones on resume, so
    per-episode sums and the run's last observation must restart too."""
    base = unwrap_chain(env)[-1]
    return hasattr(base, "state_dict") and bool(base.state_dict())


def unwrap_chain(env) -> list:
    """The env and every env it wraps, outermost first."""
    chain = [env]
    while isinstance(chain[-1], gym.vector.VectorWrapper):
        chain.append(chain[-1].env)
    return chain


def policy_obs(obs):
    """The actor's input: the `policy` group of a dict observation, else `obs`."""
    return obs["policy"] if isinstance(obs, dict) else obs


def mask_width(space: gym.Space) -> int:
    """Action-mask columns for `space`: n for Discrete(n), sum(nvec) for MultiDiscrete, else 0."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    return int(np.sum(space.nvec)) if isinstance(space, gym.spaces.MultiDiscrete) else 0


def mask_columns(env) -> int:
    """The width of `env`'s action mask; 0 when it does not mask."""
    return mask_width(env.single_action_space) if getattr(env, "has_action_mask", False) else 0


def group_spaces(space: gym.Space) -> tuple[gym.Space, gym.Space]:
    """(actor space, critic space) of an observation space; the same space twice without groups."""
    if isinstance(space, gym.spaces.Dict):
        if "policy" not in space.spaces:
            raise UserError(
                f"a dict observation space needs a 'policy' group, got groups {list(space.spaces)}"
            )
        return space["policy"], space.spaces.get("critic", space["policy"])
    return space, space


def check_single_agent(
    env,
    env_id: str,
    algo: str,
    groups: bool = False,
    masks: bool = False,
    flat: bool = False,
    images: bool = False,
) -> None:
    """Refuse, in one line naming the files that fit, an env this single-agent file cannot train:
    multi-agent; with observation groups unless `groups`; with action masks unless `masks`; with
    `flat`, a group that is not a vector (nor, with `images`, a uint8 `(C, H, W)` image)."""
    if getattr(env, "has_action_mask", False) and not masks:
        raise UserError(
            f"{env_id} masks its actions (info['action_mask']) and algos/{algo}.py cannot apply a "
            "mask: train it with algos/ppo_vec.py (a2c, ppo_h, ppo_rnn, ppo_podracer) or "
            "algos/dqn.py (double_dqn, d3qn, pqn)"
        )
    # `policy` and `action_mask` alone are ObsGroups' form, not privileged groups
    space = env.single_observation_space
    if (
        isinstance(space, gym.spaces.Dict)
        and set(space.spaces) - {"policy", "action_mask"}
        and not groups
    ):
        raise UserError(
            f"{env_id} has observation groups {sorted(space.spaces)} and algos/{algo}.py feeds one "
            "observation to all its networks: train it with algos/ppo_vec.py (a2c, ppo_h, "
            "ppo_rnn, ppo_podracer: the critic gets the 'critic' group), or make the env without "
            "groups (e.g. FromRslRl(..., critic_group=None))"
        )
    n_agents = getattr(env, "n_agents", None)
    if n_agents is not None:
        raise UserError(
            f"{env_id} is a multi-agent env ({n_agents} agents) and algos/{algo}.py trains one "
            "agent: use algos/mappo.py, algos/maddpg.py, algos/matd3.py, algos/qmix.py or "
            "algos/vdn.py"
        )
    spaces = group_spaces(env.single_observation_space)
    if flat and any(len(s.shape) != 1 and not (images and is_image(s)) for s in spaces):
        raise UserError(
            f"{algo}'s MLP needs flat observations"
            + (" or uint8 (C, H, W) images" if images else "")
            + f", {env_id} has {env.single_observation_space}"
            + ("" if images or not any(map(is_image, spaces)) else f" (images: {IMAGE_FILES})")
        )


# the files whose networks start with a conv encoder (common/encoders.py)
IMAGE_FILES = "dqn, double_dqn, d3qn, pqn, ppo_vec, a2c, ppo_h, ppo_rnn, ppo_podracer"
