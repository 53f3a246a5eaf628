"""Replay storage on the training device.

`ReplayBuffer` is a circular buffer of transitions held as preallocated tensors. A batch of N
transitions (one per sub-env) is written with one indexed copy per field, and sampling draws
uniform indices with torch's RNG: no Python loop over transitions, no host sync. Write pointers
are Python integers (they never depend on tensor values), so nothing waits for the device.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class Batch(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor  # float {0, 1}: 1 cuts the bootstrap (truncation does not)


class ReplayBuffer:
    """Circular transition storage: `add()` a vectorized step, `sample(batch_size)` a batch.

    Store the true next observation (`info["final_obs"]` where an episode ended) and
    `terminated` only: a truncated transition then bootstraps from its real next state.
    """

    def __init__(self, capacity: int, obs_shape: tuple, action_shape: tuple = (), action_dtype=torch.float32,
                 device="cpu", obs_dtype=torch.float32):
        if capacity <= 0:
            raise ValueError(f"buffer capacity must be positive, got {capacity}")
        self.capacity = int(capacity)
        self.device = torch.device(device)
        self.obs = torch.zeros((capacity, *obs_shape), dtype=obs_dtype, device=self.device)
        self.next_obs = torch.zeros((capacity, *obs_shape), dtype=obs_dtype, device=self.device)
        self.actions = torch.zeros((capacity, *action_shape), dtype=action_dtype, device=self.device)
        self.rewards = torch.zeros(capacity, dtype=torch.float32, device=self.device)
        self.terminated = torch.zeros(capacity, dtype=torch.float32, device=self.device)
        self.pos = 0  # next write index
        self.size = 0  # number of valid rows

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, terminated) -> torch.Tensor:
        """Write a batch of n transitions; returns the row indices written (for priorities)."""
        n = obs.shape[0]
        if n > self.capacity:
            raise ValueError(f"cannot add {n} transitions at once to a buffer of capacity {self.capacity}")
        idx = (self.pos + torch.arange(n, device=self.device)) % self.capacity
        self.obs[idx] = obs.to(self.obs.dtype)
        self.actions[idx] = actions.to(self.actions.dtype)
        self.rewards[idx] = rewards.to(torch.float32)
        self.next_obs[idx] = next_obs.to(self.obs.dtype)
        self.terminated[idx] = terminated.to(torch.float32)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        return idx

    def sample_indices(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        if self.size == 0:
            raise RuntimeError("sampling from an empty replay buffer: fill it first (raise learning_starts)")
        return torch.randint(0, self.size, (batch_size,), device=self.device, generator=generator)

    def get(self, idx: torch.Tensor) -> Batch:
        return Batch(self.obs[idx], self.actions[idx], self.rewards[idx], self.next_obs[idx], self.terminated[idx])

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        return self.get(self.sample_indices(batch_size, generator))

    def state_dict(self) -> dict:
        """Only the filled rows are saved."""
        n = self.size
        return {"capacity": self.capacity, "pos": self.pos, "size": n,
                "obs": self.obs[:n].clone(), "next_obs": self.next_obs[:n].clone(), "actions": self.actions[:n].clone(),
                "rewards": self.rewards[:n].clone(), "terminated": self.terminated[:n].clone()}

    def load_state_dict(self, sd: dict) -> None:
        if sd["capacity"] != self.capacity or tuple(sd["obs"].shape[1:]) != tuple(self.obs.shape[1:]):
            raise ValueError(
                f"saved replay buffer (capacity {sd['capacity']}, obs {tuple(sd['obs'].shape[1:])}) does not fit this one "
                f"(capacity {self.capacity}, obs {tuple(self.obs.shape[1:])}): resume with the same --buffer-size and env"
            )
        n = sd["size"]
        for name in ("obs", "next_obs", "actions", "rewards", "terminated"):
            getattr(self, name)[:n] = sd[name].to(self.device)
        self.pos, self.size = sd["pos"], n
