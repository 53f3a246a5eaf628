"""Base classes of the batched torch environments, and the check every env made by `envs.make`
passes.

`TorchVecEnv`: a task written as three pure tensor functions over a `[N, state_dim]` state (its
initial states, its transition, its observation) gets from here the rest of the vec-env contract
(`common/vec_env.py`): time limits, same-step autoreset with `final_obs`, action validation,
seeding and checkpointable state. `MultiAgentTorchVecEnv` is the same for N worlds of A agents
(the contract in `common/ma_vec_env.py`). `ActionChecks` is the action validation alone, for batched
envs that keep their own state (the MuJoCo tasks); `check_actions` the metadata check, for the
adapters. `check_env` runs one `reset` and one `step` of a user's env and names what breaks the
contract, before any training.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from common.device import canonical
from common.errors import UserError, UserTypeError
from common.vec_env import NormalTensors, describe, mask_width

__all__ = ["ActionChecks", "MultiAgentTorchVecEnv", "TorchVecEnv", "check_actions", "check_env"]


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

    def _observe_reset(self, final_obs: torch.Tensor, fresh: torch.Tensor, done: torch.Tensor):
        """Optional: the observation of the state after the autoreset (`fresh` where `done`, else
        the state `final_obs` shows); a task may skip drawing it again (a start it has drawn)."""
        return self._observe(self.state)

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
        obs = self._own(self._observe_reset(final_obs, fresh, done))
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
                f"subclassing envs.base.TorchVecEnv provides them)"
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
