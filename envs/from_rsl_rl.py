"""Any env with rsl_rl's `VecEnv` interface (IsaacLab's and mjlab's wrappers, Genesis examples, ...)
behind our vec-env contract, so every single-agent algorithm file trains on it:

    import envs
    from envs.from_rsl_rl import FromRslRl

    def make_task(num_envs, device, seed, **kw):          # a factory, as envs.register wants
        return FromRslRl(MyIsaacTask(num_envs=num_envs, device=device, seed=seed), action_limit=1.0)

    envs.register("Go2-Flat-v0", make_task)               # or, from the command line only:
    # python algos/ppo_vec.py --env my_tasks:make_task    (module:factory, imported and registered)

What is read from the wrapped env (no rsl_rl import is needed: the interface is duck-typed):
`num_envs`, `num_actions`, `device`, `max_episode_length` (the time limit, optional),
`get_observations()` (a TensorDict or dict of groups, or one tensor), `step(actions)` ->
`(obs, rewards, dones, extras)` with `extras["time_outs"]` (the episodes that ended on the time
limit, optional), and `reset()` if it has one.

What our side sees:

* observations: the `policy` group as a tensor; when the env also has a `critic` group (IsaacLab's
  privileged observations) and `critic_group` is left on, a dict `{"policy": ..., "critic": ...}`
  with a `gymnasium.spaces.Dict` space, which the PPO files feed to actor and critic separately
  (see `common/vec_env.py`, observation groups); other groups are dropped.
* `terminated = dones & ~time_outs`, `truncated = dones & time_outs`; the env autoresets in the same
  step (rsl_rl's convention too), so `obs` is already the next episode's start where `dones` is set.
* `info["final_obs"]`: rsl_rl envs do not return the last observation of an episode (IsaacLab's
  observation is computed after the reset). When `extras` holds one (`"final_obs"`, as
  `envs.rsl_rl.RslRlVecEnv` provides) it is used as is. Otherwise `final_obs` is the observation
  *before* the last step, the one the final action was taken in. What that means for truncation:
  our algorithms bootstrap a time-out with `gamma * V(final_obs)`, so they use `V(s_{T-1})` in place
  of `V(s_T)`, the same approximation rsl_rl makes (it bootstraps time-outs from the value computed
  before the step). For a time limit of hundreds of steps the two values differ by about one
  step's reward; for termination nothing is bootstrapped, so nothing changes.
* `single_action_space = Box(-action_limit, action_limit)`: rsl_rl envs take unbounded actions
  (IsaacLab clips them to `clip_actions` if set); our continuous algorithms need bounds: pass the
  range your task's actions live in (a joint-offset scale is usually about 1).
* `reset(seed=...)`: calls the wrapped env's `reset()` where it has one; the seed is the one the
  factory built it with (rsl_rl envs are not reseeded after construction), so pass it there.
* no `state_dict`: a run on such an env resumes its networks and optimizer from a checkpoint, not
  the simulator's state (the episodes in flight restart).
"""

from __future__ import annotations

import math

import gymnasium as gym
import torch
from gymnasium.vector import AutoresetMode

from common.errors import UserError, UserTypeError
from common.vec_env import NormalTensors
from envs.base import check_actions


class FromRslRl(NormalTensors, gym.vector.VectorEnv):
    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP, "render_modes": []}

    def __init__(
        self,
        env,
        action_limit: float = 1.0,
        policy_group: str = "policy",
        critic_group: str | None = "critic",
        env_id: str | None = None,
    ):
        for attr in ("num_envs", "num_actions", "device", "get_observations", "step"):
            if not hasattr(env, attr):
                raise UserTypeError(
                    f"{type(env).__name__} has no `{attr}`: FromRslRl wraps an env with rsl_rl's "
                    f"VecEnv interface (num_envs, num_actions, device, get_observations(), step())"
                )
        if not (
            isinstance(action_limit, (int, float))
            and action_limit > 0
            and math.isfinite(action_limit)
        ):
            raise UserError(f"action_limit must be a positive finite number, got {action_limit!r}")
        self.env, self.policy_group, self.critic_group = env, policy_group, critic_group
        self.env_id = env_id or type(env).__name__
        self.num_envs = int(env.num_envs)
        self.device = torch.device(env.device)
        length = getattr(env, "max_episode_length", None)
        self.max_episode_steps = int(length) if length else None
        obs = self._convert(env.get_observations())
        box = lambda x: gym.spaces.Box(-math.inf, math.inf, tuple(x.shape[1:]))  # noqa: E731
        self.single_observation_space = (
            gym.spaces.Dict({k: box(v) for k, v in obs.items()})
            if isinstance(obs, dict)
            else box(obs)
        )
        self.single_action_space = gym.spaces.Box(
            -float(action_limit), float(action_limit), (int(env.num_actions),)
        )
        self.observation_space = gym.vector.utils.batch_space(
            self.single_observation_space, self.num_envs
        )
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._last = obs

    def _convert(self, obs):
        """The wrapped env's observation -> a float tensor, or a dict of the policy and critic
        groups."""
        if isinstance(obs, torch.Tensor):
            return obs.float()
        keys = list(obs.keys())
        if self.policy_group not in keys:
            raise UserError(
                f"{self.env_id}: no observation group {self.policy_group!r} (it has {keys}): "
                f"pass policy_group= naming the actor's group"
            )
        policy = obs[self.policy_group].float()
        if self.critic_group is None or self.critic_group not in keys:
            return policy
        return {"policy": policy, "critic": obs[self.critic_group].float()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        reset = getattr(self.env, "reset", None)
        out = reset() if callable(reset) else None
        if out is None:
            out = self.env.get_observations()
        obs = out[0] if isinstance(out, tuple) else out
        self._last = self._convert(obs)
        return self._last, {}

    def step(self, actions):
        actions = check_actions(actions, self.single_action_space, self.num_envs, self.device)
        obs, rewards, dones, extras = self.env.step(actions)
        done = dones.to(self.device).reshape(self.num_envs).bool()
        time_outs = extras.get("time_outs")
        truncated = (
            done & time_outs.reshape(self.num_envs).bool()
            if time_outs is not None
            else torch.zeros_like(done)
        )
        obs = self._convert(obs)
        final = extras.get("final_obs")
        # see the module docstring
        final = self._convert(final) if final is not None else self._last
        self._last = obs
        info = {"final_obs": final, "_final_obs": done}
        return obs, rewards.reshape(self.num_envs).float(), done & ~truncated, truncated, info

    def close(self, **kwargs) -> None:
        if hasattr(self.env, "close"):
            self.env.close()

    def __repr__(self) -> str:
        return f"FromRslRl({self.env_id}, num_envs={self.num_envs}, device={self.device})"
