"""The H-term's trajectory store and loss (ElegantRL's Hamiltonian term, as this project defines it).

The H-term is an extra, actor-only update computed on whole trajectory windows instead of single
transitions:

1. `TrajectoryStore` keeps the most recent `horizon` steps of every sub-env (a `[N, horizon]` ring
   on the device) and a table of the episodes that finished in it: sub-env, absolute start step,
   length and return. Episodes whose first step has been overwritten drop out.
2. `sample(batch, k_step, drop_rate)` ranks the stored episodes by return, drops the lowest
   `drop_rate` fraction (the rest are the L selected trajectories), normalizes the returns of the
   kept ones to zero mean and unit std, and draws `batch` windows of `k_step` consecutive steps
   from them (episodes shorter than `k_step` give a masked, shorter window).
3. `h_term_loss(logp, mask, returns_norm, gamma, lam)` with `logp[b, k]` the current policy's
   log-probability of the stored action at step k of window b:

       H_b  = sum_k gamma^k * logp[b, k] * mask[b, k]
       loss = -lam * mean_b(H_b * returns_norm_b)

   so the actor raises the discounted log-likelihood of good trajectories and lowers that of
   poor ones (a trajectory-level REINFORCE-like signal with a return baseline).

Everything is tensor code on the store's device: writes, the episode table (finished episodes are
appended with a cumulative-sum scatter, no host sync) and window sampling (no Python loop over
windows or sub-envs).
"""

from __future__ import annotations

import torch


class TrajectoryStore:
    def __init__(self, num_envs: int, horizon: int, obs_shape: tuple, action_shape: tuple = (),
                 action_dtype=torch.float32, max_episodes: int = 4096, device="cpu"):
        if horizon <= 0 or max_episodes <= 0:
            raise ValueError("TrajectoryStore needs a positive horizon and max_episodes")
        self.N, self.H, self.E = num_envs, horizon, max_episodes
        self.device = dev = torch.device(device)
        self.obs = torch.zeros((num_envs, horizon, *obs_shape), device=dev)
        self.actions = torch.zeros((num_envs, horizon, *action_shape), dtype=action_dtype, device=dev)
        self.t = 0  # absolute step count of every sub-env (they step together)
        self.ep_start = torch.zeros(num_envs, dtype=torch.long, device=dev)  # absolute start of the running episode
        self.ep_return = torch.zeros(num_envs, device=dev)
        # finished episodes: sub-env, absolute start, length, return; slot E is a sink for masked writes
        self.tab_env = torch.zeros(max_episodes + 1, dtype=torch.long, device=dev)
        self.tab_start = torch.zeros(max_episodes + 1, dtype=torch.long, device=dev)
        self.tab_len = torch.zeros(max_episodes + 1, dtype=torch.long, device=dev)
        self.tab_ret = torch.zeros(max_episodes + 1, device=dev)
        self.tab_count = torch.zeros((), dtype=torch.long, device=dev)  # episodes ever recorded

    def add(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, done: torch.Tensor) -> None:
        """One vectorized step: `obs` the observation the action was taken in, `done` = terminated | truncated."""
        col = self.t % self.H
        self.obs[:, col] = obs
        self.actions[:, col] = actions.to(self.actions.dtype)
        self.ep_return += rewards
        self.t += 1
        # append the finished episodes to the table: row j of the finishing ones goes to slot count + j
        slot = self.tab_count + torch.cumsum(done.long(), 0) - 1
        slot = torch.where(done, slot % self.E, torch.full_like(slot, self.E))
        envs = torch.arange(self.N, device=self.device)
        self.tab_env[slot] = envs
        self.tab_start[slot] = self.ep_start
        self.tab_len[slot] = self.t - self.ep_start
        self.tab_ret[slot] = self.ep_return
        self.tab_count += done.sum()
        self.ep_start = torch.where(done, torch.full_like(self.ep_start, self.t), self.ep_start)
        self.ep_return = self.ep_return * ~done

    _STATE = ("obs", "actions", "ep_start", "ep_return", "tab_env", "tab_start", "tab_len", "tab_ret", "tab_count")

    def state_dict(self) -> dict:
        return {"t": self.t, **{k: getattr(self, k).clone() for k in self._STATE}}

    def load_state_dict(self, sd: dict) -> None:
        if tuple(sd["obs"].shape) != tuple(self.obs.shape) or sd["tab_ret"].shape != self.tab_ret.shape:
            raise ValueError(f"saved H-term store {tuple(sd['obs'].shape)} does not fit this one {tuple(self.obs.shape)}: "
                             f"resume with the same --num-envs and --h-term-* sizes")
        self.t = sd["t"]
        for k in self._STATE:
            setattr(self, k, sd[k].to(self.device))

    def valid(self) -> torch.Tensor:
        """Mask over table slots: recorded, and the whole episode still in the ring."""
        slots = torch.arange(self.E, device=self.device)
        recorded = slots < self.tab_count
        in_ring = self.tab_start[:self.E] >= self.t - self.H
        return recorded & in_ring

    def sample(self, batch: int, k_step: int, drop_rate: float = 0.125, generator: torch.Generator | None = None):
        """`batch` windows of `k_step` steps from the best `1 - drop_rate` of the stored episodes.

        Returns (obs [B, K, ...], actions [B, K, ...], mask [B, K] bool, returns_norm [B], any_valid []):
        `any_valid` is False (as a tensor, no sync) while no episode is stored; the loss is then 0.
        """
        valid = self.valid()
        ret = torch.where(valid, self.tab_ret[:self.E], torch.full_like(self.tab_ret[:self.E], -float("inf")))
        n_valid = valid.sum()
        n_keep = torch.clamp(torch.ceil(n_valid * (1.0 - drop_rate)).long(), min=1)
        order = torch.argsort(ret, descending=True)  # valid episodes first, best first
        pick = (torch.rand(batch, generator=generator, device=self.device) * n_keep).long()
        ep = order[pick.clamp(max=self.E - 1)]
        kept = torch.zeros(self.E, dtype=torch.bool, device=self.device)
        kept[order] = torch.arange(self.E, device=self.device) < n_keep
        kept &= valid
        kept_ret = torch.where(kept, ret, torch.zeros_like(ret))
        n = kept.sum().clamp(min=1)
        mean = kept_ret.sum() / n
        std = torch.sqrt(torch.where(kept, (ret - mean).square(), torch.zeros_like(ret)).sum() / n)
        returns_norm = (self.tab_ret[ep] - mean) / (std + 1e-8)
        length = self.tab_len[ep]
        span = (length - k_step).clamp(min=0) + 1
        offset = (torch.rand(batch, generator=generator, device=self.device) * span).long()
        k = torch.arange(k_step, device=self.device)
        steps = self.tab_start[ep, None] + offset[:, None] + k  # absolute steps [B, K]
        mask = (offset[:, None] + k) < length[:, None]
        any_valid = n_valid > 0
        mask &= any_valid
        env = self.tab_env[ep, None].expand_as(steps)
        col = steps % self.H
        return self.obs[env, col], self.actions[env, col], mask, returns_norm * any_valid, any_valid


def h_term_loss(logp: torch.Tensor, mask: torch.Tensor, returns_norm: torch.Tensor, gamma: float,
                lam: float) -> torch.Tensor:
    """-lam * mean_b( sum_k gamma^k logp[b, k] mask[b, k] * returns_norm[b] ) (see the module docstring)."""
    discount = gamma ** torch.arange(logp.shape[1], device=logp.device, dtype=logp.dtype)
    h = (discount * logp * mask).sum(1)
    return -lam * (h * returns_norm).mean()
