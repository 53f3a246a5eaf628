"""The deployable policy: one `nn.Module` from the env's raw observations to the env's actions.

    obs -> clamp((obs - mean) / sqrt(var + eps), -clip, clip)  the observation normalizer (buffers;
                                                               none when the run did not normalize)
        -> {"policy": obs, "action_mask": mask}                named groups, to a network that reads
                                                               them (a masked env's mask; none
                                                               given: all allowed)
        -> net.<act>(obs)                                      the file's network, deterministic: an
                                                               action in [-1, 1]^d, or an index
        -> low + (clamp(a, -1, 1) + 1) / 2 * (high - low)      the action scaling (buffers; Box
                                                               spaces only)

An algorithm file builds it once around its training network (`Policy.of(agent, net_kwargs, env)`):
the module shares the network's parameters and the normalizer's statistics (the same tensors, no
copy), so it is always the policy being trained; `common.run.Run` evaluates it and writes it to
every checkpoint (`"policy"`: its `state_dict()`; `"policy_spec"`: how to rebuild it, plain data).
`Policy.restore(path, algo, Net)` rebuilds it from a checkpoint alone, no env made (a file's
`load_policy`), as a `PolicyFn`: the callable a user deploys, numpy or torch in and out;
`tools.export` writes it as TorchScript, a torch.export program or ONNX.

The network keeps its own layout: a PPO agent's actor and critic, a Q-network, an actor. `act` names
the method that is the deterministic policy (`forward`, `deterministic`), or is `greedy`: the argmax
of a Q-network's values; a recurrent one (`RecurrentPolicy`) takes and returns its memory:
`action, state = policy(obs, state)`.
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
    """The deployable policy (module docstring):
    `policy(obs [B, *obs_shape], action_mask=None) -> action`.

    `net_kwargs` are what `net` was built with (`Net(**net_kwargs)` rebuilds it when loading);
    `obs_norm` a `common.wrappers.RunningMeanStd` whose statistics the module reads (or True: room
    for statistics a checkpoint fills in), or the `common.wrappers.NormalizeObservation` wrapper
    holding one; `action_space` the env's own (unscaled) action space."""

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
            # the training normalizer's own tensors (updated in place): always the current
            # statistics
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
        """The deployable policy of `net` trained on `env` (the training env, wrappers and all): the
        `policy` group's shape, the env's own action space (before `RescaleAction`), its
        `NormalizeObservation` (or `obs_norm`, for a file that keeps its own statistics), its action
        mask; named groups where `ObsGroups` wraps the env."""
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
        """What an algorithm file's `load_policy` returns: the checkpoint's policy (`load`),
        `deployed`: numpy or torch, batched or single observations, no env made."""
        return deployed(load(path, algo, net_cls, device), device)

    def inputs(self, obs: torch.Tensor, action_mask: torch.Tensor | None):
        """What the network reads: the normalized observation, as named groups to a network that
        reads them (`{"policy": ..., "action_mask": ...}`: a masked env's mask, none given: all
        allowed), else as it is."""
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
        """A Box action from [-1, 1]^d (clipped; NaN passes through, the env reports it) to the
        env's bounds."""
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
    `initial_state(batch)` is the blank memory of an episode's start: the first entry of the
    network's `initial_state(batch, device)` (the actor's memory; a PPO agent keeps its critic's
    second)."""

    def forward(
        self, obs: torch.Tensor, state: torch.Tensor, action_mask: torch.Tensor | None = None
    ):
        action, state = getattr(self.net, self.act)(self.inputs(obs, action_mask), state)
        return self.to_env(action), state

    def initial_state(self, n: int) -> torch.Tensor:
        return self.net.initial_state(n, next(self.net.parameters()).device)[0]


def load(path: str, algo: str, net_cls: type, device="cpu") -> Policy:
    """The deployable policy a checkpoint of `algo` holds, rebuilt from the checkpoint alone (no env
    made): the module, in eval mode on `device`, its `env_id` the checkpoint's."""
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
    """`policy` as the callable a user deploys (`PolicyFn`): torch or numpy in (and
    out), batched or single observations; a recurrent one keeps its memory between calls (`reset()`
    forgets it)."""
    device = device if device is not None else next(policy.parameters()).device
    env_id = getattr(policy, "env_id", None)
    if isinstance(policy, RecurrentPolicy):
        return RecurrentPolicyFn(
            policy, policy.initial_state, device, env_id=env_id, obs_shape=policy.obs_shape
        )
    return PolicyFn(policy, device, env_id=env_id, obs_shape=policy.obs_shape)


class PolicyFn:
    """A deterministic policy for deployment: `policy(obs) -> action`.

    Takes a torch tensor or a numpy array, batched `[B, *obs_shape]` or single `[*obs_shape]`, and
    answers in kind (numpy in, numpy out), so the same object drives our vec envs and a plain
    `gymnasium.make(env_id)` env. `core` maps raw observations to env-native actions on `device`.
    """

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
        """`action_mask` (bool, True = allowed; an env's `info["action_mask"]`): for a policy of a
        masked env."""
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
    """A `PolicyFn` with memory (a recurrent policy, `algos/ppo_rnn.py`):
    `core(obs, state) -> (action, state)`, the state batch first, one row per observation of the
    batch, kept from call to call.

        policy.reset()        forget everything: call it before new episodes (`evaluate` does)
        policy.reset(done)    forget the rows where `done` (bool [B]) is true: with a vec env
                              that resets its sub-envs itself, pass `terminated | truncated`
                              after each step

    The first call, and a call with another batch size, start from `initial_state(batch)`
    (zeros)."""

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
