"""The vectorized-environment contract every algorithm in `algos/` relies on.

A vec env follows gymnasium's `VectorEnv` API with torch tensors on `env.device`:

    obs, info = env.reset(seed=0)                       # obs: [N, *obs_shape]
    obs, reward, terminated, truncated, info = env.step(actions)
                                                        # reward [N] float32, flags [N] bool

* Same-step autoreset (`metadata["autoreset_mode"] == AutoresetMode.SAME_STEP`): a sub-env
  that finished is reset inside the same `step`; `obs` is then its new first observation and
  `info["final_obs"]` holds the true last observation. Rows of `final_obs` are valid where
  `info["_final_obs"]` (= terminated | truncated) is set; the key is present on every step so
  that callers never branch on tensor values. Bootstrap from `final_obs` on truncation, never
  on termination.
* No Python loop over sub-envs, no host sync inside `step` (resets are masked tensor ops).
* Checks on actions that need the values (NaN, out-of-range discrete actions) raise at once on
  CPU; on an accelerator they are accumulated on the device and raised at the next logging tick
  (`raise_deferred_errors`, called by `EpisodeStatistics.pop`), so `step` never waits for the
  device.

* For CUDA graphs (optional; an env that does not keep it trains eagerly, with one warning): `step`
  writes the env's state in place (`copy_`, `out=`, masked fills), keeps no Python counters that
  advance per step, and returns tensors that do not share memory with that state. The PPO files then
  replay each iteration, the env's steps inside, as one CUDA graph (common/graphs.py, which checks
  this before capturing). `envs.base.TorchVecEnv`, the batched MuJoCo tasks and the wrappers in
  `common.wrappers` keep it.

* `step` and `reset` may be called inside `torch.inference_mode()` (rsl_rl's runner does) and
  outside it, in any order: they run with inference mode off (`NormalTensors`), so the env's state
  and the tensors it returns are normal tensors (an inference tensor cannot be updated in place
  or saved for backward outside inference mode).

* Observation groups (optional, IsaacLab's convention): an env may return a dict
  `{"policy": [N, p], "critic": [N, c]}` (space `gymnasium.spaces.Dict`, `final_obs` the same dict)
  where the critic sees privileged state the policy does not. The PPO files feed `policy` to the
  actor and `critic` to the value function; a deployed policy takes the `policy` group only. Files
  without an asymmetric critic refuse such an env with one line (`check_single_agent`).

* Action masks (optional, for discrete actions): `info["action_mask"]`, bool, True = allowed, for
  the observation returned with it (in `reset`'s info and in every `step`'s): `[N, n]` for
  `Discrete(n)`, `[N, sum(nvec)]` for `MultiDiscrete(nvec)` (each dimension's allowed values,
  concatenated). The multi-agent envs' `info["avail_actions"]` (`common/ma_vec_env.py`) is the same
  convention with an agent axis. The ppo_vec family and the dqn family mask their logits / their
  argmax with it; files that cannot mask refuse such an env with one line. An env that masks says
  so before its first reset: `env.has_action_mask = True` (`envs.base.TorchVecEnv` sets it when a
  subclass defines `_action_mask`); `info["final_action_mask"]` may hold the masks of `final_obs`.
* `MultiDiscrete(nvec)` actions: integer tensors `[N, len(nvec)]`, each column in `[0, nvec[i])`.

What the algorithm files read: the single-agent files wrap the env in `common.wrappers.ObsGroups`,
so that every observation arrives as named groups,
`{"policy": ..., "critic": ... (where the env has it), "action_mask": bool ... (where it masks)}`,
`final_obs` alike; their networks read the groups by name and their storage (`common.storage.Batch`,
`common.buffers`) keeps each group as its own tensor, in its own dtype.

An env written for this contract may subclass `envs.base.TorchVecEnv` (a task as pure tensor
functions); `envs.base.check_env` checks a user's env against it when `envs.make` makes it.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import torch

from common.encoders import is_image
from common.errors import UserError


def describe(space: gym.Space) -> str:
    """A space in a few words, for messages and for what a checkpoint records of its env: type,
    shape and dtype (a Box's bounds left out), the sub-spaces of a Dict."""
    if isinstance(space, gym.spaces.Box):
        return f"Box(shape={tuple(space.shape)}, {space.dtype})"
    if isinstance(space, gym.spaces.Dict):
        return "Dict(" + ", ".join(f"{k}: {describe(v)}" for k, v in space.spaces.items()) + ")"
    return repr(space)


def outside_inference_mode(fn):
    """`fn` run with `torch.inference_mode` off (and autograd off) when its caller has it on:
    tensors it creates, the env state it keeps among them, are normal tensors, which the caller may
    later update in place or use in autograd outside inference mode. Outside inference mode it is
    `fn` as it was."""
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
    """Mixin of every vec env and wrapper here: the `__init__`, `step`, `reset` and
    `load_state_dict` a class defines (a subclass's own, a user's env's too) run outside inference
    mode (`outside_inference_mode`)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        for name in ("__init__", "step", "reset", "load_state_dict"):
            if name in cls.__dict__ and callable(cls.__dict__[name]):
                setattr(cls, name, outside_inference_mode(cls.__dict__[name]))


class VecEnvWrapper(NormalTensors, gym.vector.VectorWrapper):
    """Base for the torch vec-env wrappers in `common.wrappers`.

    Unknown attributes (`device`, `raise_deferred_errors`, ...) are looked up on the wrapped env;
    `state_dict()` collects the state of every layer so a checkpoint restores normalizers too.
    """

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
    """Whether a checkpoint restores `env`'s episodes where they stood: a simulator that cannot
    save its state (ALE, a gymnasium env on the host: `state_dict()` is empty) starts new ones on
    resume, and what stood with the old ones must start again with them (a wrapper's per-episode
    sums, a run's observation: `common.run`)."""
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
    """Columns of an action mask for `space`: n for Discrete(n), sum(nvec) for MultiDiscrete (0
    otherwise)."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    return int(np.sum(space.nvec)) if isinstance(space, gym.spaces.MultiDiscrete) else 0


def mask_columns(env) -> int:
    """The width of `env`'s action mask (`mask_width` of its action space): 0 when it does not
    mask."""
    return mask_width(env.single_action_space) if getattr(env, "has_action_mask", False) else 0


def group_spaces(space: gym.Space) -> tuple[gym.Space, gym.Space]:
    """(actor space, critic space) of an observation space (the same space twice when it has no
    groups)."""
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
    """Refuse a multi-agent env (`common/ma_vec_env.py`, observations `[N, n_agents, ...]`) in a
    single-agent algorithm file, naming the files that train several agents; an env with observation
    groups in a file that has no asymmetric critic (`groups=False`); an env with action masks in a
    file that cannot apply them (`masks=False`); with `flat=True` (an MLP's input), an observation
    group that is not a vector (nor, with `images=True`, a uint8 `(C, H, W)` image: a file whose
    networks start with `common.encoders`)."""
    if getattr(env, "has_action_mask", False) and not masks:
        raise UserError(
            f"{env_id} masks its actions (info['action_mask']) and algos/{algo}.py cannot apply a "
            "mask: train it with algos/ppo_vec.py (a2c, ppo_h, ppo_rnn, ppo_podracer) or "
            "algos/dqn.py (double_dqn, d3qn, pqn)"
        )
    # (`common.wrappers.ObsGroups` names the policy's group and the mask too)
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


# the files whose networks start with a conv encoder for an image group (common/encoders.py)
IMAGE_FILES = "dqn, double_dqn, d3qn, pqn, ppo_vec, a2c, ppo_h, ppo_rnn, ppo_podracer"
