"""Torch vec-env wrappers: episode statistics, normalizers, action rescaling, named groups.
Statistics stay on the device, `step` never syncs with the host, and checkpoints save them
(`VecEnvWrapper.state_dict`); the stack: docs/environments.md#wrappers.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from common.errors import UserError, UserTypeError
from common.vec_env import VecEnvWrapper, keeps_episodes, mask_width, unwrap_chain


def _stat_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


class RunningMeanStd:
    """Running mean/variance over batches (Chan et al.'s parallel update), on the device."""

    def __init__(self, shape=(), device="cpu", epsilon: float = 1e-4):
        device = torch.device(device)
        dt = _stat_dtype(device)
        self.mean = torch.zeros(shape, dtype=dt, device=device)
        self.var = torch.ones(shape, dtype=dt, device=device)
        self.count = torch.full((), epsilon, dtype=dt, device=device)

    def update(self, x: torch.Tensor) -> None:
        x = x.to(self.mean.dtype)
        batch_mean = x.mean(0)
        batch_var = x.var(0, unbiased=False)
        n = x.shape[0]
        delta = batch_mean - self.mean
        total = self.count + n
        mean = self.mean + delta * (n / total)
        m2 = self.var * self.count + batch_var * n + delta.square() * (self.count * n / total)
        # in place: a captured CUDA graph (common.graphs) replays into this memory
        self.mean.copy_(mean)
        torch.div(m2, total, out=self.var)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor, clip: float = 10.0, eps: float = 1e-8) -> torch.Tensor:
        y = (x - self.mean.to(x.dtype)) / torch.sqrt(self.var.to(x.dtype) + eps)
        return y.clamp(-clip, clip)

    def state_dict(self) -> dict:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count.clone()}

    def load_state_dict(self, sd: dict) -> None:
        if tuple(sd["mean"].shape) != tuple(self.mean.shape):
            raise UserError(
                f"normalizer statistics have shape {tuple(sd['mean'].shape)}, expected "
                f"{tuple(self.mean.shape)}"
            )
        self.mean.copy_(sd["mean"])
        self.var.copy_(sd["var"])
        self.count.copy_(sd["count"])


class EpisodeStatistics(VecEnvWrapper):
    """Records finished episodes: `info["episode"] = {"r": returns, "l": lengths}`, rows valid
    where `info["_episode"]`, and on-device sums that `pop()` reads."""

    hold_last = True
    # the run's NumericGuard (set by `common.run.Run.start`)
    guard = None

    def _step_reward(self, reward: torch.Tensor) -> torch.Tensor:
        """The per-world reward an episode's return sums."""
        return reward

    def __init__(self, env):
        super().__init__(env)
        dev = torch.device(env.device)
        self.ep_return = torch.zeros(env.num_envs, dtype=torch.float32, device=dev)
        self.ep_length = torch.zeros(env.num_envs, dtype=torch.long, device=dev)
        self._acc = torch.zeros(
            3, dtype=torch.float64 if dev.type != "mps" else torch.float32, device=dev
        )
        self.last_return_mean = float("nan")
        self.last_length_mean = float("nan")

    def reset(self, **kwargs):
        self.ep_return.zero_()
        self.ep_length.zero_()
        return self.env.reset(**kwargs)

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if self.guard is not None:
            state = [info[k] for k in ("state", "final_state") if k in info]
            self.guard.watch("observations", obs, info["final_obs"], *state)
            self.guard.watch("rewards", reward)
        # an env that shapes its reward or ends episodes early for learning (Atari: clipping, a
        # lost life) reports its game's own
        score = info.get("score", reward)
        # new tensors, since `info` keeps them; the state is updated in place below
        ep_return = (self.ep_return + self._step_reward(score)).to(self.ep_return.dtype)
        ep_length = self.ep_length + 1
        done = info.get("episode_over", terminated | truncated)
        d = done.to(self._acc.dtype)
        self._acc += torch.stack(((ep_return * d).sum(), (ep_length * d).sum(), d.sum()))
        info = dict(info)
        info["episode"] = {"r": ep_return, "l": ep_length}
        info["_episode"] = done
        going = ~done
        # in place (captured graphs)
        torch.mul(ep_return, going, out=self.ep_return)
        torch.mul(ep_length, going, out=self.ep_length)
        return obs, reward, terminated, truncated, info

    def pop(self) -> dict:
        """Mean return/length and count of the episodes finished since the last call (when none:
        the previous means, nan with `hold_last = False`). Logging ticks only: it syncs with the
        host and raises the env's deferred errors."""
        if hasattr(self.env, "raise_deferred_errors"):
            self.env.raise_deferred_errors()
        s_ret, s_len, n = self._acc.tolist()
        self._acc.zero_()
        if n > 0:
            self.last_return_mean = s_ret / n
            self.last_length_mean = s_len / n
        elif not self.hold_last:
            self.last_return_mean = self.last_length_mean = float("nan")
        return {
            "return": self.last_return_mean,
            "length": self.last_length_mean,
            "episodes": int(n),
        }

    def own_state_dict(self):
        return {
            "ep_return": self.ep_return.clone(),
            "ep_length": self.ep_length.clone(),
            "acc": self._acc.clone(),
            "last": [self.last_return_mean, self.last_length_mean],
        }

    def load_own_state_dict(self, sd):
        if keeps_episodes(self.env):  # else its games restart, and so do their sums
            self.ep_return.copy_(sd["ep_return"])
            self.ep_length.copy_(sd["ep_length"])
        self._acc.copy_(sd["acc"])
        self.last_return_mean, self.last_length_mean = sd["last"]


class ActionScaler:
    """Maps actions from [-1, 1]^d (clipped) to a Box's bounds (`RescaleAction`, deployed
    policies)."""

    def __init__(self, space: gym.spaces.Box, device="cpu"):
        if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise UserError(
                f"action rescaling needs finite bounds, got low={space.low}, high={space.high}"
            )
        self.low = torch.as_tensor(space.low, dtype=torch.float32, device=device)
        self.high = torch.as_tensor(space.high, dtype=torch.float32, device=device)

    def __call__(self, a: torch.Tensor) -> torch.Tensor:
        if a.shape[-1:] != self.low.shape:
            return a
        a = a.clamp(-1.0, 1.0)  # NaN passes through and is reported by the env
        return (self.low + (a + 1.0) * 0.5 * (self.high - self.low)).to(a.dtype)


class RescaleAction(VecEnvWrapper):
    """The agent acts in [-1, 1]^d, clipped and mapped affinely to the env's bounds."""

    def __init__(self, env):
        super().__init__(env)
        space = env.single_action_space
        if not isinstance(space, gym.spaces.Box):
            raise UserTypeError(f"RescaleAction needs a Box action space, got {space}")
        self.to_env = ActionScaler(space, env.device)
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, shape=space.shape, dtype=np.float32)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, env.num_envs)

    def step(self, actions):
        if isinstance(actions, torch.Tensor) and actions.dtype.is_floating_point:
            actions = self.to_env(actions)  # shape errors are reported by the env
        return self.env.step(actions)


class NormalizeObservation(VecEnvWrapper):
    """Normalizes observations and `final_obs` by running mean/std (updated while `training`),
    clipped to +-clip; one set of statistics per observation group, `rms` the `policy` group's (a
    deployed policy's)."""

    def __init__(self, env, clip: float = 10.0, training: bool = True):
        super().__init__(env)
        space = env.single_observation_space
        spaces = space.spaces if isinstance(space, gym.spaces.Dict) else {None: space}
        self.group_rms = {k: RunningMeanStd(s.shape, env.device) for k, s in spaces.items()}
        self.rms = self.group_rms.get("policy", self.group_rms.get(None))
        self.clip = clip
        self.training = training

    def _norm(self, obs):
        if isinstance(obs, dict):
            return {
                k: self.group_rms[k].normalize(v, self.clip).to(v.dtype) for k, v in obs.items()
            }
        return self.rms.normalize(obs, self.clip).to(obs.dtype)

    def _update(self, obs):
        for k, v in obs.items() if isinstance(obs, dict) else [(None, obs)]:
            self.group_rms[k].update(v)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        if self.training:
            self._update(obs)
        return self._norm(obs), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if self.training:
            self._update(obs)
        info = dict(info)
        final = info.get("final_obs")
        if (
            torch.is_tensor(obs)
            and torch.is_tensor(final)
            and final.shape == obs.shape
            and final.dtype == obs.dtype
        ):
            # both in one pass: half the kernels
            both = self._norm(torch.cat([obs, final]))
            obs, info["final_obs"] = both[: len(obs)], both[len(obs) :]
            return obs, reward, terminated, truncated, info
        if final is not None:
            info["final_obs"] = self._norm(final)
        return self._norm(obs), reward, terminated, truncated, info

    def own_state_dict(self):
        sd = {"rms": self.rms.state_dict(), "clip": self.clip}
        if None not in self.group_rms:
            sd["groups"] = {k: r.state_dict() for k, r in self.group_rms.items()}
        return sd

    def load_own_state_dict(self, sd):
        for k, r in sd.get("groups", {}).items():
            self.group_rms[k].load_state_dict(r)
        self.rms.load_state_dict(sd["rms"])
        self.clip = sd["clip"]


class NormalizeReward(VecEnvWrapper):
    """Scales rewards by the running std of the discounted return (gymnasium's NormalizeReward)."""

    def __init__(self, env, gamma: float = 0.99, clip: float = 10.0, training: bool = True):
        super().__init__(env)
        self.rms = RunningMeanStd((), env.device)
        self.ret = torch.zeros(
            env.num_envs, dtype=self.rms.mean.dtype, device=torch.device(env.device)
        )
        self.gamma = gamma
        self.clip = clip
        self.training = training

    def reset(self, **kwargs):
        self.ret.zero_()
        return self.env.reset(**kwargs)

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        if self.training:
            ret = self.ret * self.gamma + reward.to(self.ret.dtype)
            self.rms.update(ret)
            # in place (captured graphs)
            torch.mul(ret, ~(terminated | truncated), out=self.ret)
        scaled = (reward / torch.sqrt(self.rms.var.to(reward.dtype) + 1e-8)).clamp(
            -self.clip, self.clip
        )
        return obs, scaled, terminated, truncated, info

    def own_state_dict(self):
        return {"rms": self.rms.state_dict(), "ret": self.ret.clone()}

    def load_own_state_dict(self, sd):
        self.rms.load_state_dict(sd["rms"])
        if keeps_episodes(self.env):
            self.ret.copy_(sd["ret"])


def find_wrapper(env, cls):
    """The first wrapper of type `cls` in `env`'s stack, or None."""
    for e in unwrap_chain(env):
        if isinstance(e, cls):
            return e
    return None


class ObsGroups(VecEnvWrapper):
    """Observations as the named groups the single-agent files read: `policy`, `critic` where the
    env has it, `action_mask` (bool `[N, n]`; `final_obs` takes `final_action_mask` if given) where
    it masks. No state: a checkpoint sees the env it wraps."""

    def __init__(self, env):
        super().__init__(env)
        space = env.single_observation_space
        groups = dict(space.spaces) if isinstance(space, gym.spaces.Dict) else {"policy": space}
        self.masked = bool(getattr(env, "has_action_mask", False))
        if self.masked:
            groups["action_mask"] = gym.spaces.MultiBinary(mask_width(env.single_action_space))
        self.single_observation_space = gym.spaces.Dict(groups)
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, env.num_envs
        )

    def _groups(self, obs, mask) -> dict:
        out = dict(obs) if isinstance(obs, dict) else {"policy": obs}
        if self.masked:
            out["action_mask"] = mask
        return out

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        return self._groups(obs, info.get("action_mask")), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = self.env.step(actions)
        info, mask = dict(info), info.get("action_mask")
        info["final_obs"] = self._groups(info["final_obs"], info.get("final_action_mask", mask))
        return self._groups(obs, mask), reward, terminated, truncated, info

    def state_dict(self) -> dict:
        return self.env.state_dict()

    def load_state_dict(self, sd: dict) -> None:
        self.env.load_state_dict(sd)


def wrap_env(
    env,
    *,
    rescale_actions: bool = True,
    norm_obs: bool = False,
    norm_reward: bool = False,
    gamma: float = 0.99,
    training: bool = True,
    groups: bool = False,
):
    """The standard stack (docs/environments.md#wrappers); Box actions rescaled to [-1, 1] when
    `rescale_actions`, named groups with `groups`."""
    env = EpisodeStatistics(env)
    if rescale_actions and isinstance(env.single_action_space, gym.spaces.Box):
        env = RescaleAction(env)
    if norm_obs:
        space = env.single_observation_space
        space = space["policy"] if isinstance(space, gym.spaces.Dict) else space
        if space.dtype == np.uint8:
            raise UserError(
                "--norm-obs keeps running statistics of flat observations; an image is scaled to "
                "[0, 1] in the model: run without --norm-obs"
            )
        env = NormalizeObservation(env, training=training)
    if norm_reward:
        env = NormalizeReward(env, gamma=gamma, training=training)
    return ObsGroups(env) if groups else env
