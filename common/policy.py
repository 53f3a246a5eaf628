"""The deployable policy: one `nn.Module` from the env's raw observations to its actions:
observation normalizer (buffers, if the run normalized) -> named groups with the action mask, for
a network that reads them -> the network's deterministic method `act` (`forward`, `deterministic`,
or `greedy`: the argmax of a Q-network) -> Box actions rescaled from [-1, 1] (buffers).

`Policy.of` shares the training network's parameters and normalizer statistics (no copy), so it
is always the policy being trained; `common.run.Run` evaluates it and saves it in each checkpoint
("policy": state_dict, "policy_spec": plain data to rebuild it; docs/usage.md#export-a-policy).
"""

from __future__ import annotations

from typing import Callable

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn

from common.checkpoint import load_checkpoint
from common.errors import UserError
from common.vec_env import mask_columns
from common.wrappers import NormalizeObservation, ObsGroups, find_wrapper


def describe_space(space: gym.Space) -> dict:
    """A space as plain data (what `space_from` rebuilds): checkpoints stay loadable across
    gymnasium versions."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist()}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {k: describe_space(v) for k, v in space.spaces.items()}}
    raise UserError(
        f"cannot describe the space {space} in a checkpoint: Box, Discrete, MultiDiscrete or Dict"
    )


def space_from(d: dict) -> gym.Space:
    """The space `describe_space` described."""
    kind = d["type"]
    if kind == "Box":
        return gym.spaces.Box(
            np.array(d["low"], dtype=d["dtype"]).reshape(d["shape"]),
            np.array(d["high"], dtype=d["dtype"]).reshape(d["shape"]),
            dtype=d["dtype"],
        )
    if kind == "Discrete":
        return gym.spaces.Discrete(d["n"], start=d["start"])
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(d["nvec"])
    return gym.spaces.Dict({k: space_from(v) for k, v in d["spaces"].items()})


def _plain(value):
    """Network keyword arguments as plain data: spaces described, tuples as lists."""
    if isinstance(value, gym.Space):
        return {"space": describe_space(value)}
    return list(value) if isinstance(value, tuple) else value


def _rebuilt(value):
    if isinstance(value, dict) and set(value) == {"space"}:
        return space_from(value["space"])
    return tuple(value) if isinstance(value, list) else value


class Policy(nn.Module):
    """`policy(obs [B, *obs_shape], action_mask=None) -> action` (module docstring). `net_kwargs`
    rebuild `net` when loading; `obs_norm` a `RunningMeanStd` whose statistics it reads, the
    `NormalizeObservation` holding one, or True (room a checkpoint fills); `action_space` the
    env's own (unscaled) one."""

    def __init__(
        self,
        net: nn.Module,
        net_kwargs: dict,
        obs_shape,
        action_space: gym.Space,
        obs_norm=None,
        clip: float = 10.0,
        mask_dim: int = 0,
        act: str = "forward",
        groups: bool = False,
        obs_dtype: str = "float32",
        obs_high: float | None = None,
    ):
        super().__init__()
        self.net, self.act, self.mask_dim, self.groups = net, act, int(mask_dim), groups
        self.obs_shape = tuple(int(n) for n in obs_shape)
        self.obs_dtype = obs_dtype  # "uint8": an image, which the network scales itself
        self.obs_high = obs_high  # an image's largest value (255 for a camera frame, 1 for MinAtar)
        self.normalize = obs_norm is not None and obs_norm is not False
        # the buffers live where the network does: the training loop evaluates this module as is
        device = next(net.parameters(), torch.empty(0)).device
        # a NormalizeObservation wrapper: its clip
        self.clip = float(getattr(obs_norm, "clip", clip))
        if self.normalize:
            if obs_norm is True:  # filled by load_state_dict
                dt = torch.float64
                mean, var = (
                    torch.zeros(self.obs_shape, dtype=dt, device=device),
                    torch.ones(self.obs_shape, dtype=dt, device=device),
                )
            # the training normalizer's own tensors (updated in place)
            else:
                rms = getattr(obs_norm, "rms", obs_norm)
                mean, var = rms.mean, rms.var
            self.register_buffer("obs_mean", mean)
            self.register_buffer("obs_var", var)
        self.box = isinstance(action_space, gym.spaces.Box)
        if self.box:
            if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
                raise UserError(
                    f"action rescaling needs finite bounds, got low={action_space.low}, "
                    f"high={action_space.high}"
                )
            self.register_buffer(
                "action_low", torch.as_tensor(action_space.low, dtype=torch.float32, device=device)
            )
            self.register_buffer(
                "action_high",
                torch.as_tensor(action_space.high, dtype=torch.float32, device=device),
            )
        self.spec = {
            "net": {k: _plain(v) for k, v in net_kwargs.items()},
            "obs_shape": list(self.obs_shape),
            "obs_dtype": obs_dtype,
            "obs_high": obs_high,
            "action_space": describe_space(action_space),
            "normalize": self.normalize,
            "clip": self.clip,
            "mask_dim": self.mask_dim,
            "act": act,
            "groups": groups,
            "recurrent": isinstance(self, RecurrentPolicy),
        }

    @classmethod
    def of(
        cls, net: nn.Module, net_kwargs: dict, env, act: str = "forward", obs_norm=None
    ) -> Policy:
        """The policy of `net` trained on `env` (wrappers and all): the `policy` group's shape, the
        action space before `RescaleAction`, its `NormalizeObservation` (or `obs_norm`, for a file
        keeping its own statistics), its action mask, named groups where `ObsGroups` wraps it."""
        groups = find_wrapper(env, ObsGroups) is not None
        space = env.single_observation_space
        space = space["policy"] if groups else space
        return cls(
            net,
            net_kwargs,
            space.shape,
            env.unwrapped.single_action_space,
            obs_norm if obs_norm is not None else find_wrapper(env, NormalizeObservation),
            mask_dim=mask_columns(env) if groups else 0,
            act=act,
            groups=groups,
            obs_dtype="uint8" if space.dtype == np.uint8 else "float32",
            obs_high=float(np.max(space.high)) if space.dtype == np.uint8 else None,
        )

    @staticmethod
    def restore(path: str, algo: str, net_cls: type, device="cpu"):
        """A file's `load_policy`: the checkpoint's policy (`load`), `deployed`; no env made."""
        return deployed(load(path, algo, net_cls, device), device)

    def inputs(self, obs: torch.Tensor, action_mask: torch.Tensor | None):
        """The normalized observation, as `{"policy", "action_mask"}` (no mask given: all allowed)
        to a network that reads named groups."""
        if self.normalize:
            obs = (obs - self.obs_mean.to(obs.dtype)) / torch.sqrt(
                self.obs_var.to(obs.dtype) + 1e-8
            )
            obs = obs.clamp(-self.clip, self.clip)
        if not self.groups:
            return obs
        if not self.mask_dim:
            return {"policy": obs}
        if action_mask is None:
            action_mask = torch.ones(
                obs.shape[0], self.mask_dim, dtype=torch.bool, device=obs.device
            )
        return {"policy": obs, "action_mask": action_mask.to(torch.bool)}

    def to_env(self, a: torch.Tensor) -> torch.Tensor:
        """A Box action from [-1, 1]^d (clipped; NaN passes, the env reports it) to the bounds."""
        if not self.box:
            return a
        a = a.clamp(-1.0, 1.0)
        return (self.action_low + (a + 1.0) * 0.5 * (self.action_high - self.action_low)).to(
            a.dtype
        )

    def forward(self, obs: torch.Tensor, action_mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.inputs(obs, action_mask)
        if self.act == "greedy":  # a Q-network: the action of the largest value
            return self.net(x).argmax(-1)
        return self.to_env(getattr(self.net, self.act)(x))


class RecurrentPolicy(Policy):
    """A policy with memory: `action, state = policy(obs, state, action_mask=None)`;
    `initial_state(batch)`, an episode's blank memory, is the first entry of the network's (the
    actor's; a PPO agent's critic's is second)."""

    def forward(
        self, obs: torch.Tensor, state: torch.Tensor, action_mask: torch.Tensor | None = None
    ):
        action, state = getattr(self.net, self.act)(self.inputs(obs, action_mask), state)
        return self.to_env(action), state

    def initial_state(self, n: int) -> torch.Tensor:
        return self.net.initial_state(n, next(self.net.parameters()).device)[0]


def load(path: str, algo: str, net_cls: type, device="cpu") -> Policy:
    """The policy a checkpoint of `algo` holds, rebuilt from it alone (no env made), in eval mode
    on `device`, its `env_id` the checkpoint's."""
    ckpt = load_checkpoint(path, algo=algo, map_location=device)
    if "policy_spec" not in ckpt:
        raise UserError(
            f"{path} holds no deployable policy (written before checkpoints kept one): resume it "
            f"for a step (--resume {path} --total-steps N) to write one, or train it again"
        )
    spec = ckpt["policy_spec"]
    net = net_cls(**{k: _rebuilt(v) for k, v in spec["net"].items()})
    cls = RecurrentPolicy if spec["recurrent"] else Policy
    policy = cls(
        net,
        {},
        spec["obs_shape"],
        space_from(spec["action_space"]),
        obs_norm=spec["normalize"] or None,
        clip=spec["clip"],
        mask_dim=spec["mask_dim"],
        act=spec["act"],
        groups=spec.get("groups", False),
        obs_dtype=spec.get("obs_dtype", "float32"),
        obs_high=spec.get("obs_high"),
    )
    policy.spec = spec
    policy.load_state_dict(ckpt["policy"])
    policy.env_id = ckpt.get("env_id")
    return policy.to(device).eval().requires_grad_(False)


def deployed(policy: Policy, device=None):
    """`policy` as the callable a user deploys: a `PolicyFn` (`RecurrentPolicyFn` with memory)."""
    device = device if device is not None else next(policy.parameters()).device
    env_id = getattr(policy, "env_id", None)
    if isinstance(policy, RecurrentPolicy):
        return RecurrentPolicyFn(
            policy, policy.initial_state, device, env_id=env_id, obs_shape=policy.obs_shape
        )
    return PolicyFn(policy, device, env_id=env_id, obs_shape=policy.obs_shape)


class PolicyFn:
    """`policy(obs) -> action` for deployment: torch or numpy, batched `[B, *obs_shape]` or single,
    answered in kind, so it drives our vec envs and a `gymnasium.make(env_id)` env alike. `core`
    maps raw observations to env-native actions on `device`."""

    def __init__(
        self,
        core: Callable[[torch.Tensor], torch.Tensor],
        device="cpu",
        env_id: str | None = None,
        obs_shape: tuple | None = None,
    ):
        self.core, self.device, self.env_id, self.obs_shape = (
            core,
            torch.device(device),
            env_id,
            obs_shape,
        )
        # a common.policy.Policy: exportable
        self.module = core if isinstance(core, torch.nn.Module) else None

    @torch.no_grad()
    def __call__(self, obs, action_mask=None):
        """`action_mask`: bool, True = allowed (`info["action_mask"]`), for a masked env."""
        as_numpy = not isinstance(obs, torch.Tensor)
        x = torch.as_tensor(
            np.asarray(obs) if as_numpy else obs, dtype=torch.float32, device=self.device
        )
        single = self.obs_shape is not None and x.dim() == len(self.obs_shape)
        if single:
            x = x.unsqueeze(0)
        if action_mask is not None:
            m = torch.as_tensor(
                np.asarray(action_mask)
                if not isinstance(action_mask, torch.Tensor)
                else action_mask,
                dtype=torch.bool,
                device=self.device,
            )
            a = self.core(x, action_mask=m.unsqueeze(0) if single else m)
        else:
            a = self.core(x)
        if single:
            a = a.squeeze(0)
        return a.cpu().numpy() if as_numpy else a


class RecurrentPolicyFn(PolicyFn):
    """A `PolicyFn` with memory (`algos/ppo_rnn.py`): `core(obs, state) -> (action, state)`, one
    state row per observation, kept between calls. `reset()` forgets it all (before new episodes),
    `reset(done)` the rows where `done` (a vec env's `terminated | truncated`); the first call, and
    one with another batch size, start from `initial_state(batch)`."""

    def __init__(
        self,
        core: Callable,
        initial_state: Callable[[int], torch.Tensor],
        device="cpu",
        env_id: str | None = None,
        obs_shape: tuple | None = None,
    ):
        self.recurrent_core, self.initial_state, self.state = core, initial_state, None

        def step(x, **kw):
            if self.state is None or self.state.shape[0] != x.shape[0]:
                self.state = initial_state(x.shape[0])
            action, self.state = core(x, self.state, **kw)
            return action

        super().__init__(step, device, env_id, obs_shape)
        self.module = core if isinstance(core, torch.nn.Module) else None

    def reset(self, done=None) -> None:
        if done is None or self.state is None:
            self.state = None
            return
        keep = ~torch.as_tensor(
            np.asarray(done) if not isinstance(done, torch.Tensor) else done,
            dtype=torch.bool,
            device=self.state.device,
        )
        self.state = self.state * keep.view(-1, *([1] * (self.state.dim() - 1))).to(
            self.state.dtype
        )
