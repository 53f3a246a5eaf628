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
  this before capturing). `TorchVecEnv`, the batched MuJoCo tasks and the wrappers in
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
  argmax with it; files that cannot mask refuse such an env with one line. An env
  that masks says so before its first reset: `env.has_action_mask = True` (`TorchVecEnv` sets it
  when a subclass defines `_action_mask`); `info["final_action_mask"]` may hold the masks of
  `final_obs`.
* `MultiDiscrete(nvec)` actions: integer tensors `[N, len(nvec)]`, each column in `[0, nvec[i])`.

What the algorithm files read: the PPO and DQN families wrap the env in `common.wrappers.ObsGroups`,
so that every observation arrives as named groups,
`{"policy": ..., "critic": ... (where the env has it), "action_mask": bool ... (where it masks)}`,
`final_obs` alike; their networks read the groups by name and their storage (`common.storage.Batch`,
`common.buffers`) keeps each group as its own tensor, in its own dtype.

`TorchVecEnv` is the base for torch-native batched environments: a subclass describes a single
task as pure tensor functions over a `[N, state_dim]` state and gets time limits, autoreset,
`final_obs`, action validation, seeding and checkpointable state from here.
"""

from __future__ import annotations

import functools
import math

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from common.device import canonical
from common.encoders import is_image
from common.errors import UserError, UserTypeError

__all__ = [
    "ActionChecks",
    "TorchVecEnv",
    "VecEnvWrapper",
    "check_actions",
    "unwrap_chain",
    "keeps_episodes",
    "AutoresetMode",
]


def describe(space: gym.Space) -> str:
    """A space in a few words, for messages and for what a checkpoint records of its env: type,
    shape and dtype (a Box's bounds left out), the sub-spaces of a Dict."""
    if isinstance(space, gym.spaces.Box):
        return f"Box(shape={tuple(space.shape)}, {space.dtype})"
    if isinstance(space, gym.spaces.Dict):
        return "Dict(" + ", ".join(f"{k}: {describe(v)}" for k, v in space.spaces.items()) + ")"
    return repr(space)


def check_actions(
    actions: Any, space: gym.Space, num_envs: int, device: torch.device, n_agents: int | None = None
) -> torch.Tensor:
    """Validate a batch of actions against `space` (metadata only: shape, dtype, device).

    `space` is the action space of one agent of one sub-env; with `n_agents` (multi-agent envs,
    `common/ma_vec_env.py`) the batch is `[num_envs, n_agents, ...]` instead of `[num_envs, ...]`.
    Returns the actions as a tensor; raises `ValueError`/`TypeError` with the expected form.
    """
    lead = (num_envs,) if n_agents is None else (num_envs, n_agents)
    batch = (
        f"{num_envs} sub-envs" if n_agents is None else f"{num_envs} sub-envs x {n_agents} agents"
    )
    if not isinstance(actions, torch.Tensor):
        raise UserTypeError(
            f"actions must be a torch.Tensor on {device}, got {type(actions).__name__}; "
            f"convert with torch.as_tensor(actions, device=env.device)"
        )
    if actions.device != canonical(device):
        raise UserError(
            f"actions are on {actions.device} but the env runs on {device}; "
            f"move them with actions.to(env.device)"
        )
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        expected = lead if isinstance(space, gym.spaces.Discrete) else (*lead, len(space.nvec))
        if (
            actions.dtype.is_floating_point
            or actions.dtype.is_complex
            or actions.dtype == torch.bool
        ):
            raise UserTypeError(
                f"{describe(space)} actions must be an integer tensor of shape {expected}, "
                f"got dtype {actions.dtype}; pass e.g. logits.argmax(-1) or actions.long()"
            )
    elif isinstance(space, gym.spaces.Box):
        expected = (*lead, *space.shape)
        if not actions.dtype.is_floating_point:
            raise UserTypeError(
                f"{describe(space)} actions must be a floating-point tensor of shape "
                f"{expected}, got dtype {actions.dtype}"
            )
    else:  # pragma: no cover - no such env yet
        raise UserTypeError(f"unsupported action space {space}")
    if tuple(actions.shape) != expected:
        raise UserError(
            f"actions have shape {tuple(actions.shape)} but this env ({batch}, "
            f"{describe(space)} actions) expects shape {expected}"
        )
    return actions


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


class ActionChecks(NormalTensors):
    """Action validation shared by the batched envs (`TorchVecEnv`, the MuJoCo tasks).

    Needs `single_action_space`, `num_envs`, `device`, `_discrete` and a device flag
    `_invalid_action`; multi-agent envs set `_batch_agents` to their number of agents (actions
    `[num_envs, n_agents, ...]`). Values are checked at once on CPU and at the next logging tick
    elsewhere.
    """

    _batch_agents: int | None = None

    def _validate(self, actions) -> torch.Tensor:
        actions = check_actions(
            actions, self.single_action_space, self.num_envs, self.device, self._batch_agents
        )
        # each column below its nvec
        if isinstance(self.single_action_space, gym.spaces.MultiDiscrete):
            bad = (
                (actions < 0)
                | (actions >= torch.as_tensor(self.single_action_space.nvec, device=self.device))
            ).any()
            if self.device.type == "cpu" and bad.item():
                raise UserError(self._invalid_message(actions))
            self._invalid_action |= bad
            return actions
        # one reduction, read at once (there is no device to wait for)
        if self.device.type == "cpu":
            if self._discrete:
                lo, hi = actions.aminmax()
                bad = lo.item() < 0 or hi.item() >= self.single_action_space.n
            else:  # a finite sum means no NaN/Inf; a non-finite one may also be an overflow: check
                bad = not math.isfinite(actions.sum().item()) and not bool(
                    torch.isfinite(actions).all()
                )
            if bad:
                raise UserError(self._invalid_message(actions))
        elif self._discrete:  # accumulate on the device; raised at the next logging tick
            self._invalid_action |= ((actions < 0) | (actions >= self.single_action_space.n)).any()
        else:
            self._invalid_action |= ~torch.isfinite(actions).all()
        return actions

    def _invalid_message(self, actions=None) -> str:
        if isinstance(self.single_action_space, gym.spaces.MultiDiscrete):
            what = (
                f"integers in [0, nvec) per column, nvec = {self.single_action_space.nvec.tolist()}"
            )
        elif self._discrete:
            what = f"integers in [0, {self.single_action_space.n})"
        else:
            what = "finite floats (no NaN/Inf)"
        found = ""
        if actions is not None:
            found = f"; found e.g. {actions.flatten()[:8].tolist()}"
        return f"{self.env_id}: invalid action values, expected {what}{found}"

    def raise_deferred_errors(self) -> None:
        """Raise an invalid-action error recorded on the device (a host sync: logging ticks
        only)."""
        if bool(self._invalid_action):
            raise UserError(self._invalid_message())


class TorchVecEnv(ActionChecks, gym.vector.VectorEnv):
    """Base class of torch-native batched environments (see the module docstring).

    Subclasses set the spaces and `max_episode_steps` and implement three tensor functions:

    * `_sample_initial_state(n) -> [n, state_dim]` using `self.rng` (a `torch.Generator`);
    * `_transition(state, action) -> (next_state, reward, terminated)`;
    * `_observe(state) -> obs` (in `self.dtype`).

    `dtype=torch.float64` runs the physics in double precision (used by the parity tests).
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}
    max_episode_steps: int | None = None
    env_id: str = "TorchVecEnv"

    def __init__(
        self,
        num_envs: int,
        single_observation_space: gym.Space,
        single_action_space: gym.Space,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
        seed: int | None = None,
        validate_actions: bool = True,
    ):
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs <= 0:
            raise UserError(f"num_envs must be a positive integer (--num-envs), got {num_envs!r}")
        self.num_envs = num_envs
        self.device = canonical(device)  # cuda -> cuda:N, the device its tensors report
        self.dtype = dtype
        self.single_observation_space = single_observation_space
        self.single_action_space = single_action_space
        self.observation_space = batch_space(single_observation_space, num_envs)
        self.action_space = batch_space(single_action_space, num_envs)
        self.validate_actions = validate_actions
        self.rng = torch.Generator(device=self.device)
        self.rng.manual_seed(
            int(np.random.SeedSequence(seed).generate_state(1)[0]) if seed is None else seed
        )
        self._seed = seed
        self._discrete = isinstance(single_action_space, gym.spaces.Discrete)
        self._invalid_action = torch.zeros((), dtype=torch.bool, device=self.device)
        self.state = self._sample_initial_state(num_envs)
        self.elapsed = torch.zeros(num_envs, dtype=torch.long, device=self.device)

    # ---- the three functions a task provides -------------------------------------------------
    def _sample_initial_state(self, n: int) -> torch.Tensor:
        raise NotImplementedError

    def _transition(self, state: torch.Tensor, action: torch.Tensor):
        raise NotImplementedError

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _action_mask(self, state: torch.Tensor) -> torch.Tensor | None:
        """Optional: the allowed actions in `state`, bool `[n, n_actions]` (`info["action_mask"]`);
        None: all."""
        return None

    @property
    def has_action_mask(self) -> bool:
        return type(self)._action_mask is not TorchVecEnv._action_mask

    # ---- helpers for subclasses ----------------------------------------------------------------
    def _uniform(self, n: int, dim: int, low, high) -> torch.Tensor:
        u = torch.rand(n, dim, generator=self.rng, device=self.device, dtype=self.dtype)
        return low + (high - low) * u

    # ---- gymnasium VectorEnv API ----------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self.rng.manual_seed(int(seed))
        self.state.copy_(self._sample_initial_state(self.num_envs))
        self.elapsed.zero_()
        self._invalid_action.zero_()
        mask = self._action_mask(self.state)
        return self._own(self._observe(self.state)), ({} if mask is None else {"action_mask": mask})

    def _own(self, obs: torch.Tensor) -> torch.Tensor:
        """`obs`, copied if it shares memory with the env's state (an identity observation, or a
        slice of the state): `step` writes the state in place, which must not change an observation
        the caller holds."""
        if obs.untyped_storage().data_ptr() == self.state.untyped_storage().data_ptr():
            return obs.clone()
        return obs

    def step(self, actions):
        if self.validate_actions:
            actions = self._validate(actions)
        next_state, reward, terminated = self._transition(self.state, actions)
        self.elapsed += 1
        if self.max_episode_steps is not None:
            truncated = self.elapsed >= self.max_episode_steps
        else:
            truncated = torch.zeros_like(terminated)
        done = terminated | truncated
        final_obs = self._observe(next_state)
        fresh = self._sample_initial_state(self.num_envs)
        # in place: a training iteration captured as a CUDA graph (common.graphs) replays into this
        # memory
        torch.where(done[:, None], fresh, next_state, out=self.state)
        self.elapsed.masked_fill_(done, 0)
        # row-wise: the fresh start where done, else final_obs
        obs = self._own(self._observe(self.state))
        info = {"final_obs": final_obs, "_final_obs": done}
        mask = self._action_mask(self.state)
        if mask is not None:
            info["action_mask"], info["final_action_mask"] = mask, self._action_mask(next_state)
        return obs, reward.to(torch.float32), terminated, truncated, info

    # ---- checkpointable state --------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {
            "state": self.state.clone(),
            "elapsed": self.elapsed.clone(),
            "rng": self.rng.get_state(),
        }

    def load_state_dict(self, sd: dict) -> None:
        if tuple(sd["state"].shape) != tuple(self.state.shape):
            raise UserError(
                f"{self.env_id}: saved env state has shape {tuple(sd['state'].shape)}, this env "
                f"has {tuple(self.state.shape)} (was it saved with another --num-envs?)"
            )
        self.state.copy_(sd["state"])  # in place (common.graphs), and never into the caller's dict
        self.elapsed.copy_(sd["elapsed"])
        self.rng.set_state(sd["rng"].cpu())  # a state loaded onto the GPU comes back to the host

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.env_id}, num_envs={self.num_envs}, device={self.device})"
        )


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


def check_env(env, num_envs: int, device: torch.device | str) -> None:
    """Check that a user env keeps the vec-env contract (the module docstring): one `reset` and one
    `step` with valid actions, before any training. Raises `TypeError`/`ValueError` naming what was
    found, what was expected and the fix."""
    device = torch.device(device)
    name = type(env).__name__
    for attr in (
        "num_envs",
        "single_observation_space",
        "single_action_space",
        "device",
        "reset",
        "step",
    ):
        if not hasattr(env, attr):
            raise UserTypeError(
                f"{name} has no `{attr}`: a vec env needs num_envs, single_observation_space, "
                f"single_action_space, device, reset() and step() (see common/vec_env.py; "
                f"subclassing common.vec_env.TorchVecEnv provides them)"
            )
    if env.num_envs != num_envs:
        raise UserError(
            f"{name} was asked for num_envs={num_envs} and has num_envs={env.num_envs}: "
            f"build it with the num_envs its factory is given"
        )
    if torch.device(env.device).type != device.type:
        raise UserError(
            f"{name} runs on {env.device} but the run asked for {device}: build it on the device "
            f"its factory is given"
        )
    obs_space, act_space = env.single_observation_space, env.single_action_space
    out = env.reset(seed=0)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise UserTypeError(f"{name}.reset() must return (obs, info), got {type(out).__name__}")
    _check_obs(name, "reset() obs", out[0], obs_space, num_envs, env.device)
    masked = bool(getattr(env, "has_action_mask", False))
    if masked != ("action_mask" in out[1]):
        raise UserError(
            f"{name}: reset() info {'lacks' if masked else 'has'} 'action_mask' but "
            f"has_action_mask is {masked}: an env that masks actions sets has_action_mask = True "
            "and gives the mask on reset and on every step"
        )
    if isinstance(act_space, gym.spaces.Discrete):
        actions = torch.randint(0, int(act_space.n), (num_envs,), device=env.device)
    elif isinstance(act_space, gym.spaces.MultiDiscrete):
        actions = (
            torch.rand((num_envs, len(act_space.nvec)), device=env.device)
            * torch.as_tensor(act_space.nvec, device=env.device)
        ).long()
    elif isinstance(act_space, gym.spaces.Box):
        low = torch.as_tensor(
            np.nan_to_num(act_space.low, posinf=1.0, neginf=-1.0),
            dtype=torch.float32,
            device=env.device,
        )
        high = torch.as_tensor(
            np.nan_to_num(act_space.high, posinf=1.0, neginf=-1.0),
            dtype=torch.float32,
            device=env.device,
        )
        actions = low + (high - low) * torch.rand((num_envs, *act_space.shape), device=env.device)
    else:
        raise UserTypeError(
            f"{name}'s action space {act_space} is not supported: use Discrete, MultiDiscrete or "
            f"Box"
        )
    out = env.step(actions)
    if not (isinstance(out, tuple) and len(out) == 5):
        raise UserTypeError(
            f"{name}.step() must return (obs, reward, terminated, truncated, info), "
            f"got {type(out).__name__}{f' of {len(out)}' if isinstance(out, tuple) else ''}"
        )
    obs, reward, terminated, truncated, info = out
    _check_obs(name, "step() obs", obs, obs_space, num_envs, env.device)
    _check_tensor(name, "step() reward", reward, (num_envs,), env.device, float)
    _check_tensor(name, "step() terminated", terminated, (num_envs,), env.device, bool)
    _check_tensor(name, "step() truncated", truncated, (num_envs,), env.device, bool)
    if not isinstance(info, dict) or "final_obs" not in info:
        raise UserError(
            f"{name}.step() info must hold 'final_obs' (the last observation of the episodes that "
            f"ended, for same-step autoreset), got "
            f"{sorted(info) if isinstance(info, dict) else info!r}"
        )
    _check_obs(name, "step() info['final_obs']", info["final_obs"], obs_space, num_envs, env.device)
    for key in [
        k
        for k in ("action_mask", "final_action_mask")
        if masked and (k in info or k == "action_mask")
    ]:
        _check_tensor(
            name,
            f"step() info[{key!r}]",
            info.get(key),
            (num_envs, mask_width(act_space)),
            env.device,
            bool,
        )


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


def _check_obs(env_name: str, what: str, x, space: gym.Space, num_envs: int, device) -> None:
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(x, dict) or set(x) != set(space.spaces):
            raise UserTypeError(
                f"{env_name}.{what} must be a dict with the groups of its Dict observation space "
                f"{sorted(space.spaces)}, got "
                f"{sorted(x) if isinstance(x, dict) else type(x).__name__}"
            )
        for k, sub in space.spaces.items():
            _check_tensor(
                env_name, f"{what}[{k!r}]", x[k], (num_envs, *sub.shape), device, _kind(sub)
            )
    else:
        _check_tensor(env_name, what, x, (num_envs, *space.shape), device, _kind(space))


def _kind(space: gym.Space):
    """What an observation of `space` must be: uint8 for an image (a uint8 Box), else float."""
    return torch.uint8 if getattr(space, "dtype", None) == np.uint8 else float


def _check_tensor(env_name: str, what: str, x, shape: tuple, device, kind) -> None:
    if not isinstance(x, torch.Tensor):
        raise UserTypeError(
            f"{env_name}.{what} is a {type(x).__module__}.{type(x).__name__}, expected a "
            f"torch.Tensor on {device}: return torch.as_tensor(x, device=self.device)"
        )
    if tuple(x.shape) != tuple(shape):
        raise UserError(
            f"{env_name}.{what} has shape {tuple(x.shape)}, expected {tuple(shape)} "
            f"(num_envs x the single space's shape)"
        )
    if x.device != canonical(device):
        raise UserError(
            f"{env_name}.{what} is on {x.device}, expected the env's device {device}: create it "
            f"there"
        )
    if kind is float and not x.dtype.is_floating_point:
        raise UserTypeError(
            f"{env_name}.{what} has dtype {x.dtype}, expected a floating-point tensor"
        )
    if kind is torch.uint8 and x.dtype != torch.uint8:
        raise UserTypeError(
            f"{env_name}.{what} has dtype {x.dtype}, expected torch.uint8 (an image space)"
        )
    if kind is bool and x.dtype != torch.bool:
        raise UserTypeError(f"{env_name}.{what} has dtype {x.dtype}, expected torch.bool")


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
