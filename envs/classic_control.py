"""Torch-native batched versions of gymnasium's classic-control tasks.

Each class reproduces the gymnasium task of the same id (dynamics, rewards, termination, time
limit, initial-state distribution) as tensor operations over `[N, state_dim]`, so thousands of
copies step at once on any device. `tests/test_classic_parity.py` checks them against
`gymnasium.make(id)` from identical states and actions in float64.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from envs.base import TorchVecEnv


class CartPole(TorchVecEnv):
    """CartPole-v1: keep a pole upright by pushing a cart left/right; +1 per step, 500-step
    limit."""

    env_id = "CartPole-v1"
    max_episode_steps = 500
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    theta_threshold = 12 * 2 * math.pi / 360
    x_threshold = 2.4

    def __init__(self, num_envs: int = 1, device="cpu", dtype=torch.float32, seed=None, **kw):
        high = np.array(
            [self.x_threshold * 2, np.inf, self.theta_threshold * 2, np.inf],  # as gymnasium 1.x
            dtype=np.float32,
        )
        obs_space = gym.spaces.Box(-high, high, dtype=np.float32)
        self._force_table = None
        super().__init__(num_envs, obs_space, gym.spaces.Discrete(2), device, dtype, seed, **kw)

    def _sample_initial_state(self, n):
        # [n, 4] as the transpose of a [4, n] buffer: each state variable is one contiguous row, so
        # the element-wise ops below run on contiguous vectors (faster at thousands of envs on a
        # CPU)
        u = torch.rand(4, n, generator=self.rng, device=self.device, dtype=self.dtype)
        return (-0.05 + 0.1 * u).t()

    def _transition(self, state, action):
        # gymnasium's arithmetic, term by term (float64 parity to 1e-12), in as few kernels as
        # possible: at N = 4096 each op costs about its launch, so fewer ops is more env-steps/s
        _, x_dot, theta, theta_dot = state.unbind(1)
        total_mass = self.masspole + self.masscart
        polemass_length = self.masspole * self.length
        if self._force_table is None or self._force_table.dtype != state.dtype:
            self._force_table = torch.tensor(
                [-self.force_mag, self.force_mag], dtype=state.dtype, device=state.device
            )
        # clamped: on an accelerator an invalid action is reported at the next logging tick
        # (deferred check), and an out-of-bounds index would end the process first (a CUDA
        # device-side assert)
        force = torch.take(self._force_table, action.long().clamp(0, 1))
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
        thetaacc = (self.gravity * sintheta - costheta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * costheta**2 / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        # explicit Euler, as gymnasium's default "euler" integrator: s' = s + tau * ds (same layout
        # as state)
        next_state = state + self.tau * torch.stack((x_dot, xacc, theta_dot, thetaacc)).t()
        terminated = (next_state[:, 0].abs() > self.x_threshold) | (
            next_state[:, 2].abs() > self.theta_threshold
        )
        reward = torch.ones_like(theta)
        return next_state, reward, terminated

    def _observe(self, state):
        return state.to(torch.float32) if self.dtype == torch.float32 else state.clone()


def _wrap_angle(x: torch.Tensor, lo: float, hi: float, exact_iters: int = 3) -> torch.Tensor:
    """Wrap `x` into [lo, hi] by adding/subtracting whole periods (gymnasium's acrobot `wrap`).

    gymnasium subtracts the period one at a time; the first `exact_iters` subtractions are done
    the same way (bit-identical results), anything still outside falls back to a remainder.
    """
    period = hi - lo
    for _ in range(exact_iters):
        x = torch.where(x > hi, x - period, x)
    for _ in range(exact_iters):
        x = torch.where(x < lo, x + period, x)
    outside = (x > hi) | (x < lo)
    return torch.where(outside, lo + torch.remainder(x - lo, period), x)


class Acrobot(TorchVecEnv):
    """Acrobot-v1: swing the tip of a two-link chain above a line by torquing the middle joint.

    Discrete torques {-1, 0, +1}; reward -1 per step, 0 on the terminating step; 500-step limit.
    One step is a single RK4 step of dt=0.2 of the "book" dynamics (Sutton & Barto), then the
    angles are wrapped into [-pi, pi] and the velocities clipped to +-4pi / +-9pi.
    State `[N, 4]` = (theta1, theta2, dtheta1, dtheta2); obs = (cos th1, sin th1, cos th2, sin th2,
    dth1, dth2).
    """

    env_id = "Acrobot-v1"
    max_episode_steps = 500
    dt = 0.2
    link_length_1 = 1.0
    link_mass_1 = link_mass_2 = 1.0
    link_com_pos_1 = link_com_pos_2 = 0.5
    link_moi = 1.0
    gravity = 9.8
    max_vel_1, max_vel_2 = 4 * math.pi, 9 * math.pi

    def __init__(self, num_envs: int = 1, device="cpu", dtype=torch.float32, seed=None, **kw):
        high = np.array([1.0, 1.0, 1.0, 1.0, self.max_vel_1, self.max_vel_2], dtype=np.float32)
        obs_space = gym.spaces.Box(-high, high, dtype=np.float32)
        super().__init__(num_envs, obs_space, gym.spaces.Discrete(3), device, dtype, seed, **kw)

    def _sample_initial_state(self, n):
        # gymnasium draws U(-0.1, 0.1) and stores it as float32
        return self._uniform(n, 4, -0.1, 0.1).to(torch.float32).to(self.dtype)

    def _derivs(self, s: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
        """Time derivative of the state `[N, 4]` under `torque` `[N]` (book dynamics)."""
        m1, m2, l1 = self.link_mass_1, self.link_mass_2, self.link_length_1
        lc1, lc2, I1, I2, g = (
            self.link_com_pos_1,
            self.link_com_pos_2,
            self.link_moi,
            self.link_moi,
            self.gravity,
        )
        theta1, theta2, dtheta1, dtheta2 = s.unbind(-1)
        sin_t2 = torch.sin(theta2)
        d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta2)) + I1 + I2
        d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta2)) + I2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - math.pi / 2.0)
        phi1 = (
            -m2 * l1 * lc2 * dtheta2**2 * sin_t2
            - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin_t2
            + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - math.pi / 2)
            + phi2
        )
        ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin_t2 - phi2) / (
            m2 * lc2**2 + I2 - d2**2 / d1
        )
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), dim=-1)

    def _transition(self, state, action):
        torque = action.to(state.dtype) - 1.0  # {0, 1, 2} -> {-1, 0, +1}, exact
        h, h2 = self.dt, self.dt / 2.0
        k1 = self._derivs(state, torque)
        k2 = self._derivs(state + h2 * k1, torque)
        k3 = self._derivs(state + h2 * k2, torque)
        k4 = self._derivs(state + h * k3, torque)
        ns = state + h / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        th1 = _wrap_angle(ns[:, 0], -math.pi, math.pi)
        th2 = _wrap_angle(ns[:, 1], -math.pi, math.pi)
        dth1 = ns[:, 2].clamp(-self.max_vel_1, self.max_vel_1)
        dth2 = ns[:, 3].clamp(-self.max_vel_2, self.max_vel_2)
        next_state = torch.stack((th1, th2, dth1, dth2), dim=-1)
        terminated = -torch.cos(th1) - torch.cos(th2 + th1) > 1.0
        reward = torch.where(terminated, 0.0, -1.0).to(state.dtype)
        return next_state, reward, terminated

    def _observe(self, state):
        th1, th2, dth1, dth2 = state.unbind(-1)
        obs = torch.stack(
            (torch.cos(th1), torch.sin(th1), torch.cos(th2), torch.sin(th2), dth1, dth2), dim=-1
        )
        return obs.to(torch.float32) if self.dtype == torch.float32 else obs


class _MountainCarBase(TorchVecEnv):
    """Shared parts of the two mountain-car tasks: a car in a valley y = sin(3x), state (x, v)."""

    min_position, max_position, max_speed = -1.2, 0.6, 0.07

    def _spaces(self):
        low = np.array([self.min_position, -self.max_speed], dtype=np.float32)
        high = np.array([self.max_position, self.max_speed], dtype=np.float32)
        return gym.spaces.Box(low, high, dtype=np.float32)

    def _sample_initial_state(self, n):
        position = self._uniform(n, 1, -0.6, -0.4)
        return torch.cat((position, torch.zeros_like(position)), dim=-1)

    def _integrate(self, position, velocity):
        """Clip the speed, move, clip the position, stop the car at the left wall."""
        velocity = velocity.clamp(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp(self.min_position, self.max_position)
        velocity = torch.where(
            (position <= self.min_position) & (velocity < 0), torch.zeros_like(velocity), velocity
        )
        return position, velocity

    def _observe(self, state):
        return state.to(torch.float32) if self.dtype == torch.float32 else state.clone()


class MountainCar(_MountainCarBase):
    """MountainCar-v0: drive an under-powered car up the right hill (x >= 0.5).

    Discrete pushes {left, none, right}; reward -1 per step; 200-step limit.
    """

    env_id = "MountainCar-v0"
    max_episode_steps = 200
    force, gravity, goal_position, goal_velocity = 0.001, 0.0025, 0.5, 0.0

    def __init__(self, num_envs: int = 1, device="cpu", dtype=torch.float32, seed=None, **kw):
        super().__init__(
            num_envs, self._spaces(), gym.spaces.Discrete(3), device, dtype, seed, **kw
        )

    def _transition(self, state, action):
        position, velocity = state.unbind(-1)
        push = (action.to(state.dtype) - 1.0) * self.force
        velocity = velocity + (push + torch.cos(3 * position) * (-self.gravity))
        position, velocity = self._integrate(position, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        reward = torch.full_like(position, -1.0)
        return torch.stack((position, velocity), dim=-1), reward, terminated


class MountainCarContinuous(_MountainCarBase):
    """MountainCarContinuous-v0: continuous force in [-1, 1] (clipped); goal x >= 0.45.

    Reward 100 on reaching the goal minus 0.1 * action^2 every step, where (as in gymnasium) the
    penalty uses the action as given, before clipping; 999-step limit.

    gymnasium keeps this task's state in a float32 array (the product `3 * position` is then
    float32 too); in float64 mode this env rounds the same quantities so the parity is exact.
    """

    env_id = "MountainCarContinuous-v0"
    max_episode_steps = 999
    power, goal_position, goal_velocity = 0.0015, 0.45, 0.0
    min_action, max_action = -1.0, 1.0

    def __init__(self, num_envs: int = 1, device="cpu", dtype=torch.float32, seed=None, **kw):
        act_space = gym.spaces.Box(self.min_action, self.max_action, shape=(1,), dtype=np.float32)
        super().__init__(num_envs, self._spaces(), act_space, device, dtype, seed, **kw)

    def _f32(self, x: torch.Tensor) -> torch.Tensor:
        """Round to float32 precision, keeping `self.dtype` (a no-op in float32 mode)."""
        return x.to(torch.float32).to(self.dtype)

    def _sample_initial_state(self, n):
        return self._f32(super()._sample_initial_state(n))

    def _transition(self, state, action):
        position, velocity = state.unbind(-1)
        a = action[:, 0].to(state.dtype)
        force = a.clamp(self.min_action, self.max_action)
        velocity = velocity + (force * self.power - 0.0025 * torch.cos(self._f32(3 * position)))
        position, velocity = self._integrate(position, velocity)
        terminated = (position >= self.goal_position) & (velocity >= self.goal_velocity)
        reward = torch.where(terminated, 100.0, 0.0).to(state.dtype) - a**2 * 0.1
        return self._f32(torch.stack((position, velocity), dim=-1)), reward, terminated


class Pendulum(TorchVecEnv):
    """Pendulum-v1: swing a pendulum up and hold it with a torque in [-2, 2] (clipped).

    Reward -(angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2); no termination; 200-step limit.
    State `[N, 2]` = (theta, thetadot) with theta unwrapped; obs = (cos th, sin th, thdot).
    """

    env_id = "Pendulum-v1"
    max_episode_steps = 200
    max_speed, max_torque, dt, g, m, l = 8.0, 2.0, 0.05, 10.0, 1.0, 1.0
    _init_high = None

    def __init__(self, num_envs: int = 1, device="cpu", dtype=torch.float32, seed=None, **kw):
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        obs_space = gym.spaces.Box(-high, high, dtype=np.float32)
        act_space = gym.spaces.Box(-self.max_torque, self.max_torque, shape=(1,), dtype=np.float32)
        super().__init__(num_envs, obs_space, act_space, device, dtype, seed, **kw)

    def _sample_initial_state(self, n):
        u = torch.rand(n, 2, generator=self.rng, device=self.device, dtype=self.dtype)
        if self._init_high is None:
            # made once: a tensor from host numbers is a copy from pageable memory, which waits for
            # the GPU (and the masked autoreset draws initial states every step)
            self._init_high = torch.tensor([math.pi, 1.0], device=self.device, dtype=self.dtype)
        return -self._init_high + 2 * self._init_high * u

    def _transition(self, state, action):
        th, thdot = state.unbind(-1)
        u = action[:, 0].to(state.dtype).clamp(-self.max_torque, self.max_torque)
        th_norm = torch.remainder(th + math.pi, 2 * math.pi) - math.pi
        costs = th_norm**2 + 0.1 * thdot**2 + 0.001 * u**2
        g, m, l, dt = self.g, self.m, self.l, self.dt
        newthdot = thdot + (3 * g / (2 * l) * torch.sin(th) + 3.0 / (m * l**2) * u) * dt
        newthdot = newthdot.clamp(-self.max_speed, self.max_speed)
        newth = th + newthdot * dt
        return (
            torch.stack((newth, newthdot), dim=-1),
            -costs,
            torch.zeros_like(th, dtype=torch.bool),
        )

    def _observe(self, state):
        th, thdot = state.unbind(-1)
        obs = torch.stack((torch.cos(th), torch.sin(th), thdot), dim=-1)
        return obs.to(torch.float32) if self.dtype == torch.float32 else obs
