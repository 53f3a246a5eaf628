"""Torch-native batched ports of the MPE particle tasks of `mpe2` (PettingZoo's MPE).

`SimpleSpread` (cooperative navigation, `simple_spread_v3`) and `SimpleTag` (predator-prey,
`simple_tag_v3`) follow the multi-agent contract of `common/ma_vec_env.py`: N worlds step at once
as tensor operations over a world state `[N, entities, 4]` = (x, y, vx, vy) per entity, agents
first (in mpe2's agent order), then landmarks.

Everything matches mpe2's parallel env (`tests/test_mpe_parity.py` checks it in float64 from
identical states and actions): the per-agent observation layout, the rewards, the physics (action
force = action x sensitivity, softmax-penetration contact forces summed in mpe2's pair order,
damping, speed caps, explicit integration with dt=0.1), the initial-state distributions,
truncation at `max_cycles` and the optional `terminate_on_success`. Continuous actions are
`Box(0, 1, (5,))` = (no-op, left, right, down, up) and are clipped to [0, 1] as mpe2's
`ClipOutOfBoundsWrapper` does; discrete actions 0..4 = (no-op, left, right, down, up).
The global `info["state"]` is mpe2's `state()`: every agent's own observation, concatenated.

Where the agents of a task observe vectors of different lengths (simple_tag: adversaries 16,
the prey 14), the shorter ones are zero-padded at the end to a common `obs_dim` (`env.obs_dims`
lists the true lengths); `info["state"]` concatenates the unpadded observations, as mpe2's.
Not ported: rendering, `benchmark_data`, curriculum stages and partial observability
(`num_agent_neighbors` / `num_landmark_neighbors`); mpe2's agents here are silent, so the
communication slots of simple_spread's observation are always zero, as in mpe2.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from common.errors import UserError
from envs.base import MultiAgentTorchVecEnv

# discrete action -> unit force direction (mpe2's `_set_action`: 1 left, 2 right, 3 down, 4 up)
_DIRECTIONS = [[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]]


def _norm(d: torch.Tensor) -> torch.Tensor:
    """Euclidean norm over the last dim of size 2, as mpe2's `np.sqrt(np.sum(np.square(d)))`."""
    return torch.sqrt(d[..., 0] * d[..., 0] + d[..., 1] * d[..., 1])


class MPEEnv(MultiAgentTorchVecEnv):
    """Shared MPE world: entities (agents, then landmarks) with sizes, collision flags, per-agent
    sensitivity and speed caps; mpe2's `World.step` as batched tensor operations."""

    dt = 0.1
    damping = 0.25
    contact_force = 1e2
    contact_margin = 1e-3
    dim_c = 2

    def __init__(
        self,
        num_envs,
        agent_names,
        n_landmarks,
        sizes,
        collide,
        accel,
        max_speed,
        obs_dims,
        state_dim,
        continuous_actions=False,
        max_cycles=25,
        terminate_on_success=False,
        device="cpu",
        dtype=torch.float32,
        seed=None,
        validate_actions=True,
    ):
        if not isinstance(max_cycles, int) or isinstance(max_cycles, bool) or max_cycles <= 0:
            raise UserError(f"max_cycles must be a positive integer, got {max_cycles!r}")
        A = len(agent_names)
        dev = torch.device(device)
        self.max_episode_steps = max_cycles
        self.continuous_actions = bool(continuous_actions)
        self.terminate_on_success = bool(terminate_on_success)
        self.n_landmarks = n_landmarks
        self._size = torch.tensor(sizes, dtype=dtype, device=dev)  # [E]
        self._collide = torch.tensor(collide, dtype=torch.bool, device=dev)  # [E]
        self._accel = torch.tensor(accel, dtype=dtype, device=dev)  # [A]
        self._max_speed = (
            None
            if all(m is None for m in max_speed)
            else torch.tensor(
                [np.inf if m is None else m for m in max_speed], dtype=dtype, device=dev
            )
        )
        self._directions = torch.tensor(_DIRECTIONS, dtype=dtype, device=dev)
        # contact forces act on the colliding agents (the only movable entities), from every other
        # colliding entity; mpe2 sums them in entity order, which `_contact` reproduces
        colliders = [j for j, c in enumerate(collide) if c]
        self._colliders = torch.tensor(colliders, dtype=torch.long, device=dev)
        pair = torch.tensor(
            [[collide[i] and i != j for j in colliders] for i in range(A)], dtype=torch.bool
        )
        self._pair = pair.to(dev)  # [A, C]
        # [A, C]
        self._pair_sum_size = self._size[:A, None] + self._size[self._colliders][None, :]
        self._others = torch.tensor(
            [[j for j in range(A) if j != i] for i in range(A)], dtype=torch.long, device=dev
        )
        self._offdiag = ~torch.eye(A, dtype=torch.bool, device=dev)
        obs_dim = max(obs_dims)
        # flat positions of the unpadded observations inside [A * obs_dim] (for the global state)
        self._state_index = torch.tensor(
            [i * obs_dim + k for i in range(A) for k in range(obs_dims[i])],
            dtype=torch.long,
            device=dev,
        )
        obs_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
        act_space = (
            gym.spaces.Box(0.0, 1.0, (5,), np.float32)
            if self.continuous_actions
            else gym.spaces.Discrete(5)
        )
        super().__init__(
            num_envs,
            A,
            obs_space,
            act_space,
            state_dim,
            device,
            dtype,
            seed,
            validate_actions,
            agent_names=agent_names,
            obs_dims=obs_dims,
        )

    # ---- physics ------------------------------------------------------------------------------
    def _action_force(self, actions: torch.Tensor) -> torch.Tensor:
        """mpe2's `_set_action`: the physical force [N, A, 2] of each agent's action."""
        if self.continuous_actions:
            a = actions.to(self.dtype).clamp(0.0, 1.0)  # ClipOutOfBoundsWrapper
            u = torch.stack((a[..., 2] - a[..., 1], a[..., 4] - a[..., 3]), dim=-1)
        else:
            # clamped: an invalid action is reported by the (deferred, on a GPU) action check, never
            # an out-of-bounds index
            u = self._directions[actions.long().clamp(0, 4)]
        return u * self._accel[:, None]

    def _contact(self, pos: torch.Tensor, force: torch.Tensor) -> torch.Tensor:
        """Add the contact forces on the agents (mpe2's `get_collision_force`) to `force`."""
        A = self.n_agents
        delta = pos[:, :A, None, :] - pos[:, None, self._colliders, :]  # [N, A, C, 2]
        dist = _norm(delta)
        k = self.contact_margin
        penetration = torch.logaddexp(torch.zeros_like(dist), -(dist - self._pair_sum_size) / k) * k
        f = self.contact_force * delta / dist[..., None] * penetration[..., None]
        zero = torch.zeros((), dtype=force.dtype, device=force.device)
        for c in range(self._colliders.numel()):  # in entity order, as mpe2 accumulates the pairs
            force = force + torch.where(self._pair[None, :, c, None], f[:, :, c], zero)
        return force

    def _physics(self, state: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """One `World.step`: forces, then explicit integration of the agents (landmarks are
        static)."""
        A = self.n_agents
        pos, vel = state[..., :2], state[:, :A, 2:]
        force = self._contact(pos, self._action_force(actions))
        new_pos = pos[:, :A] + vel * self.dt
        new_vel = vel * (1 - self.damping)
        new_vel = new_vel + (force / 1.0) * self.dt  # mass 1
        if self._max_speed is not None:
            speed = _norm(new_vel)[..., None]
            cap = self._max_speed[:, None]
            new_vel = torch.where(speed > cap, new_vel / speed * cap, new_vel)
        agents = torch.cat((new_pos, new_vel), dim=-1)
        return torch.cat((agents, state[:, A:]), dim=1)

    def _collisions(self, pos: torch.Tensor) -> torch.Tensor:
        """[N, A, A] bool: agents i and j overlap (mpe2's `is_collision`, true on the diagonal)."""
        A = self.n_agents
        d = _norm(pos[:, :A, None, :] - pos[:, None, :A, :])
        return d < (self._size[:A, None] + self._size[None, :A])

    # ---- contract --------------------------------------------------------------------------------
    def _transition(self, state, actions):
        next_state = self._physics(state, actions)
        rewards = self._reward(next_state)
        if self.terminate_on_success:
            terminated = self._success(next_state)
        else:
            terminated = torch.zeros(state.shape[0], dtype=torch.bool, device=self.device)
        return next_state, rewards, terminated

    def _global_state(self, state, obs):
        return obs.reshape(obs.shape[0], -1)[:, self._state_index]

    def _agent_obs_prefix(self, state: torch.Tensor) -> list[torch.Tensor]:
        """The part every MPE observation starts with: own vel, own pos, landmark and other-agent
        positions relative to the agent (entries of [N, A, *])."""
        A, N = self.n_agents, state.shape[0]
        pos, vel = state[:, :A, :2], state[:, :A, 2:]
        rel_lm = state[:, None, A:, :2] - pos[:, :, None, :]  # [N, A, L, 2]
        rel_ag = pos[:, self._others] - pos[:, :, None, :]  # [N, A, A-1, 2]
        return [vel, pos, rel_lm.reshape(N, A, -1), rel_ag.reshape(N, A, -1)]

    def _reward(self, state):
        raise NotImplementedError

    def _success(self, state):
        raise NotImplementedError


class SimpleSpread(MPEEnv):
    """simple_spread_v3: `N` agents (size 0.15) must cover `N` landmarks without colliding.

    Reward of agent i = (1 - local_ratio) * (-sum over landmarks of the distance to the closest
    agent) + local_ratio * (-1 per other agent it overlaps). Observation (18 for N=3): own vel,
    own pos, landmark positions relative to it, other agents' relative positions, their (always
    zero) communication. Starts: agents and landmarks uniform in [-1, 1]^2, velocities zero.
    """

    env_id = "simple_spread_v3"

    def __init__(
        self,
        num_envs: int = 1,
        device="cpu",
        dtype=torch.float32,
        seed=None,
        N: int = 3,
        local_ratio: float = 0.5,
        max_cycles: int = 25,
        continuous_actions: bool = False,
        terminate_on_success: bool = False,
        validate_actions: bool = True,
    ):
        if not (isinstance(N, int) and N >= 2):
            raise UserError(f"N (agents = landmarks) must be an integer >= 2, got {N!r}")
        if not 0.0 <= local_ratio <= 1.0:
            raise UserError(f"local_ratio is a proportion in [0, 1], got {local_ratio!r}")
        self.local_ratio = float(local_ratio)
        obs_dim = 4 + 2 * N + 2 * (N - 1) + self.dim_c * (N - 1)
        super().__init__(
            num_envs,
            [f"agent_{i}" for i in range(N)],
            N,
            sizes=[0.15] * N + [0.05] * N,
            collide=[True] * N + [False] * N,
            accel=[5.0] * N,
            max_speed=[None] * N,
            obs_dims=[obs_dim] * N,
            state_dim=N * obs_dim,
            continuous_actions=continuous_actions,
            max_cycles=max_cycles,
            terminate_on_success=terminate_on_success,
            device=device,
            dtype=dtype,
            seed=seed,
            validate_actions=validate_actions,
        )

    def _sample_initial_state(self, n):
        E = self.n_agents + self.n_landmarks
        pos = self._uniform(n, E, 2, low=-1.0, high=1.0)  # agents, then landmarks: U(-1, 1)
        return torch.cat((pos, torch.zeros_like(pos)), dim=-1)

    def _landmark_dists(self, state):
        A = self.n_agents
        return _norm(state[:, :A, None, :2] - state[:, None, A:, :2])  # [N, A, L]

    def _reward(self, state):
        closest = self._landmark_dists(state).min(dim=1).values  # [N, L]
        glob = torch.zeros_like(closest[:, 0])
        for lm in range(self.n_landmarks):  # mpe2's order of summation
            glob = glob - closest[:, lm]
        coll = self._collisions(state[..., :2]) & self._offdiag
        local = -coll.sum(-1).to(self.dtype)
        return glob[:, None] * (1 - self.local_ratio) + local * self.local_ratio

    def _success(self, state):
        return (self._landmark_dists(state).min(dim=1).values < 0.1).all(-1)

    def _observe(self, state):
        A, N = self.n_agents, state.shape[0]
        # silent agents
        comm = torch.zeros(N, A, self.dim_c * (A - 1), dtype=state.dtype, device=state.device)
        return torch.cat(self._agent_obs_prefix(state) + [comm], dim=-1)


class SimpleTag(MPEEnv):
    """simple_tag_v3: `num_adversaries` slow predators (size 0.075, accel 3, max speed 1.0) chase
    `num_good` fast prey (size 0.05, accel 4, max speed 1.3) among `num_obstacles` static obstacles
    (size 0.2). Agent order: adversary_0.., agent_0...

    Every adversary gets +10 per (prey, adversary) overlap in the world; a prey gets -10 per
    adversary overlapping it and a boundary penalty per coordinate (0 below 0.9, 10 (|x| - 0.9)
    below 1, then min(exp(2|x| - 2), 10)). Observation: own vel, own pos, obstacle positions and
    other agents' positions relative to it, then the velocities of the other prey (adversaries:
    16 with the defaults, prey: 14, zero-padded to 16). Starts: agents uniform in [-1, 1]^2,
    obstacles in [-0.9, 0.9]^2, velocities zero.
    """

    env_id = "simple_tag_v3"

    def __init__(
        self,
        num_envs: int = 1,
        device="cpu",
        dtype=torch.float32,
        seed=None,
        num_good: int = 1,
        num_adversaries: int = 3,
        num_obstacles: int = 2,
        max_cycles: int = 25,
        continuous_actions: bool = False,
        terminate_on_success: bool = False,
        validate_actions: bool = True,
    ):
        for name, v, lo in (
            ("num_good", num_good, 1),
            ("num_adversaries", num_adversaries, 1),
            ("num_obstacles", num_obstacles, 0),
        ):
            if not (isinstance(v, int) and v >= lo):
                raise UserError(f"{name} must be an integer >= {lo}, got {v!r}")
        G, Ad, L = num_good, num_adversaries, num_obstacles
        A = G + Ad
        self.num_good, self.num_adversaries = G, Ad
        names = [f"adversary_{i}" for i in range(Ad)] + [f"agent_{i}" for i in range(G)]
        base = 4 + 2 * L + 2 * (A - 1)
        obs_dims = [base + 2 * G] * Ad + [base + 2 * (G - 1)] * G
        super().__init__(
            num_envs,
            names,
            L,
            sizes=[0.075] * Ad + [0.05] * G + [0.2] * L,
            collide=[True] * (A + L),
            accel=[3.0] * Ad + [4.0] * G,
            max_speed=[1.0] * Ad + [1.3] * G,
            obs_dims=obs_dims,
            state_dim=sum(obs_dims),
            continuous_actions=continuous_actions,
            max_cycles=max_cycles,
            terminate_on_success=terminate_on_success,
            device=device,
            dtype=dtype,
            seed=seed,
            validate_actions=validate_actions,
        )
        # velocity slots of the observation: the other prey in agent order, padded (-1) to G slots
        idx = [[j for j in range(Ad, A) if j != i] for i in range(A)]
        idx = [row + [-1] * (G - len(row)) for row in idx]
        self._prey_idx = torch.tensor(idx, dtype=torch.long, device=self.device)  # [A, G]
        # [A] bool: which agents are predators
        self.adversary = torch.arange(A, device=self.device) < Ad

    def _sample_initial_state(self, n):
        A, L = self.n_agents, self.n_landmarks
        agents = self._uniform(n, A, 2, low=-1.0, high=1.0)
        obstacles = self._uniform(n, L, 2, low=-0.9, high=0.9)
        pos = torch.cat((agents, obstacles), dim=1)
        return torch.cat((pos, torch.zeros_like(pos)), dim=-1)

    def _caught(self, state):
        """[N, Ad, G] bool: adversary a overlaps prey g."""
        Ad = self.num_adversaries
        return self._collisions(state[..., :2])[:, :Ad, Ad:]

    @staticmethod
    def _bound(x: torch.Tensor) -> torch.Tensor:
        return torch.where(
            x < 0.9,
            torch.zeros_like(x),
            torch.where(x < 1.0, (x - 0.9) * 10, torch.clamp(torch.exp(2 * x - 2), max=10.0)),
        )

    def _reward(self, state):
        Ad = self.num_adversaries
        caught = self._caught(state)
        adv = (10.0 * caught.sum((1, 2)).to(self.dtype))[:, None].expand(-1, Ad)  # [N, Ad]
        prey = -10.0 * caught.sum(1).to(self.dtype)  # [N, G]
        pos = state[:, Ad : self.n_agents, :2].abs()
        for p in range(2):
            prey = prey - self._bound(pos[..., p])
        return torch.cat((adv, prey), dim=1)

    def _success(self, state):
        return self._caught(state).any(1).all(-1)

    def _observe(self, state):
        A = self.n_agents
        vel = state[:, :A, 2:]
        prey_vel = vel[:, self._prey_idx.clamp(min=0)]  # [N, A, G, 2]
        prey_vel = torch.where(
            (self._prey_idx >= 0)[None, :, :, None], prey_vel, torch.zeros_like(prey_vel)
        )
        return torch.cat(
            self._agent_obs_prefix(state) + [prey_vel.reshape(state.shape[0], A, -1)], dim=-1
        )
