"""Replay storage on the training device: uniform and prioritized replay (frame stacks kept once
each) and the H-term files' trajectory store. One indexed copy per field per batch, no Python loop
over transitions, no host sync: write pointers are Python ints that never depend on tensor values.
"""

from __future__ import annotations

import torch

from common.errors import UserError
from common.storage import Batch


class FrameStore:
    """A replay's stacked camera frames (uint8 [n, k >= 2, H, W]), each kept once, in a ring
    `frames` [F, H, W] under global ids (row id % F); a transition keeps the k ids of its obs and
    of its next obs. An obs equal to the sub-env's previous next obs reuses its ids; a next obs
    that is the obs shifted by one frame adds one frame; anything else (a reset) adds k. On the
    device, no host sync. F = capacity x 17/16 + 2k x n rows suffice unless sub-envs reset more
    than once per 16k steps on average; frames overwritten while in use raise at the next check
    (every 1,024 samples) rather than train on wrong frames."""

    def __init__(self, capacity: int, example: torch.Tensor, device):
        n, self.k, h, w = example.shape
        self.rows = capacity + capacity // 16 + 2 * self.k * n
        self.frames = torch.empty((self.rows + 1, h, w), dtype=torch.uint8, device=device)  # +spare
        self.obs_ids = torch.empty((capacity, self.k), dtype=torch.long, device=device)
        self.next_ids = torch.empty_like(self.obs_ids)
        self.count = torch.zeros((), dtype=torch.long, device=device)  # frames written
        self.overflow = torch.zeros((), dtype=torch.bool, device=device)
        self.last = self.last_ids = None  # each sub-env's previous next observation, its ids
        self.reads = 0

    def _write(self, need: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
        """New ids for `frames` [n, m, H, W] where `need` [n], written to the ring; [n, m]."""
        m = frames.shape[1]
        counts = need.long() * m
        first = self.count + counts.cumsum(0) - counts
        ids = first[:, None] + torch.arange(m, device=frames.device)
        rows = torch.where(need[:, None], ids % self.rows, self.rows)  # not needed: the spare row
        self.frames.index_copy_(0, rows.flatten(), frames.flatten(0, 1))
        self.count += counts.sum()
        return ids

    def add(self, idx: torch.Tensor, obs: torch.Tensor, nxt: torch.Tensor) -> None:
        if self.last is None or self.last.shape != obs.shape:
            same = torch.zeros(obs.shape[0], dtype=torch.bool, device=obs.device)
        else:
            same = (obs == self.last).flatten(1).all(1)
        obs_ids = self._write(~same, obs)
        if self.last_ids is not None and self.last_ids.shape == obs_ids.shape:
            obs_ids = torch.where(same[:, None], self.last_ids, obs_ids)
        shifted = (nxt[:, :-1] == obs[:, 1:]).flatten(1).all(1)
        newest = self._write(shifted, nxt[:, -1:])
        whole = self._write(~shifted, nxt)
        next_ids = torch.where(shifted[:, None], torch.cat([obs_ids[:, 1:], newest], 1), whole)
        self.obs_ids[idx], self.next_ids[idx] = obs_ids, next_ids
        self.last, self.last_ids = nxt.clone(), next_ids

    def check(self, oldest_row: int) -> None:
        """Note (on the device) whether the oldest live transition's frames were overwritten."""
        self.overflow |= self.obs_ids[oldest_row].min() < self.count - self.rows

    def get(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads += 1
        if self.reads % 1024 == 0 and bool(self.overflow):
            raise UserError(
                "the replay's frame store overwrote frames still in use: its observations are not "
                "frame stacks that share frames (or resets are very frequent); store them whole "
                "(a smaller --buffer-size) or report the env"
            )
        return self.frames[self.obs_ids[idx] % self.rows], self.frames[
            self.next_ids[idx] % self.rows
        ]

    def state_dict(self, n: int) -> dict:
        filled = int(min(int(self.count), self.rows))
        return {
            "frames": self.frames[:filled].clone(),
            "obs_ids": self.obs_ids[:n].clone(),
            "next_ids": self.next_ids[:n].clone(),
            "count": self.count.clone(),
            "overflow": self.overflow.clone(),
            "last": None if self.last is None else self.last.clone(),
            "last_ids": None if self.last_ids is None else self.last_ids.clone(),
        }

    def load_state_dict(self, sd: dict) -> None:
        self.frames[: sd["frames"].shape[0]] = sd["frames"]
        n = sd["obs_ids"].shape[0]
        self.obs_ids[:n], self.next_ids[:n] = sd["obs_ids"], sd["next_ids"]
        self.count.copy_(sd["count"])
        self.overflow.copy_(sd["overflow"])
        dev = self.frames.device
        self.last = None if sd["last"] is None else sd["last"].to(dev)
        self.last_ids = None if sd["last_ids"] is None else sd["last_ids"].to(dev)


def _frame_stack(x: torch.Tensor) -> bool:
    """An example batch of stacked camera frames: uint8 [n, k >= 2, H >= 36, W >= 36]."""
    return x.dtype == torch.uint8 and x.dim() == 4 and x.shape[1] >= 2 and min(x.shape[2:]) >= 36


class ReplayBuffer:
    """Circular transition storage, one row per sub-env step, as named tensors (`Batch`):

        rb = ReplayBuffer(capacity, obs, actions)            # examples of one step: [n, ...]
        rb.add(obs, actions, rewards, next_obs, terminated)  # n transitions
        b = rb.sample(B)  # obs, actions, rewards, next_obs, terminated, indices (rows), weights

    Each field keeps its example's row shape and dtype (`obs`: a tensor or named groups);
    `rewards` float32 [n] unless an example is given ([n, A]: per agent), `terminated` float32.
    Store the true next obs (`info["final_obs"]` at an episode's end) and `terminated` only, so a
    truncated transition bootstraps. Extra fields (`state=example`) are kept per row, given to
    `add` by name."""

    def __init__(self, capacity: int, obs, actions: torch.Tensor, rewards=None, **extra):
        if capacity <= 0:
            raise UserError(f"buffer capacity must be positive, got {capacity}")
        self.capacity = int(capacity)
        self.device = actions.device
        self.frames = None  # the `policy` group's frame stacks, if any (FrameStore)
        if isinstance(obs, dict) and _frame_stack(obs.get("policy", torch.empty(0))):
            self.frames = FrameStore(capacity, obs["policy"], self.device)
            obs = {k: x for k, x in obs.items() if k != "policy"}
        if rewards is None:
            rewards = torch.zeros(actions.shape[0], device=self.device)
        flags = torch.zeros(actions.shape[0], device=self.device)
        # uninitialized: only rows below `size` are read or saved; pages are touched as rows arrive
        self.data = Batch.empty(
            capacity,
            **_rows(dict(obs=obs, next_obs=obs, actions=actions, rewards=rewards)),
            **_rows(dict(terminated=flags, **extra)),
        )
        self.pos = 0  # next write index
        self.size = 0  # number of valid rows
        # `size` on the device, which a CUDA graph's replay reads (sample_indices)
        self.filled = torch.zeros(
            (),
            dtype=torch.float32 if self.device.type == "mps" else torch.float64,
            device=self.device,
        )

    def __len__(self) -> int:
        return self.size

    def add(self, obs, actions, rewards, next_obs, terminated, **extra) -> torch.Tensor:
        """Write a batch of n transitions; returns the row indices written (for priorities)."""
        n = actions.shape[0]
        if n > self.capacity:
            raise UserError(
                f"cannot add {n} transitions at once to a buffer of capacity {self.capacity}"
            )
        idx = (self.pos + torch.arange(n, device=self.device)) % self.capacity
        if self.frames is not None:
            self.frames.add(idx, obs["policy"], next_obs["policy"])
            obs, next_obs = ({k: x[k] for k in self.data["obs"]} for x in (obs, next_obs))
        given = dict(obs=obs, next_obs=next_obs, actions=actions, rewards=rewards)
        _write(self.data, idx, dict(given, terminated=terminated, **extra))
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        self.filled.fill_(self.size)
        if self.frames is not None:
            self.frames.check(self.pos if self.size == self.capacity else 0)
        return idx

    def sample_indices(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """Uniform rows [B] (long) among the filled ones; no host sync."""
        if self.size == 0:
            raise RuntimeError(
                "sampling from an empty replay buffer: fill it first (raise learning_starts)"
            )
        if self.device.type == "cuda":
            # the bound read on the device, not baked in: a replayed CUDA graph (common/graphs.py)
            # samples the rows added since its capture too
            u = torch.rand(batch_size, dtype=torch.float64, device=self.device, generator=generator)
            return u.mul_(self.filled).long()
        return torch.randint(0, self.size, (batch_size,), device=self.device, generator=generator)

    def get(self, idx: torch.Tensor, weights: torch.Tensor | None = None) -> Batch:
        """Rows `idx` of every field, with `indices` (= idx) and `weights` (ones by default)."""
        b = self.data[idx]
        if self.frames is not None:
            b["obs"]["policy"], b["next_obs"]["policy"] = self.frames.get(idx)
        b["indices"] = idx
        b["weights"] = torch.ones(idx.shape[0], device=self.device) if weights is None else weights
        return b

    def sample(
        self, batch_size: int, beta: float | None = None, generator: torch.Generator | None = None
    ) -> Batch:
        """A uniform batch (`beta` is accepted for interface parity with prioritized replay)."""
        return self.get(self.sample_indices(batch_size, generator))

    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """Uniform replay has no priorities: a no-op, so algorithms call it unconditionally."""

    def state_dict(self) -> dict:
        """Only the filled rows are saved."""
        return {
            "capacity": self.capacity,
            "pos": self.pos,
            "size": self.size,
            **self.data[: self.size].state_dict(),
            **({} if self.frames is None else {"frames": self.frames.state_dict(self.size)}),
        }

    def load_state_dict(self, sd: dict) -> None:
        def rows(obs):  # the shape of a row (of each group)
            return (
                {k: tuple(v.shape[1:]) for k, v in obs.items()}
                if isinstance(obs, dict)
                else tuple(obs.shape[1:])
            )

        if sd["capacity"] != self.capacity or rows(sd["obs"]) != rows(self.data["obs"]):
            raise UserError(
                f"saved replay buffer (capacity {sd['capacity']}, obs {rows(sd['obs'])}) does not "
                f"fit this one (capacity {self.capacity}, obs {rows(self.data['obs'])}): resume "
                "with the same --buffer-size and env"
            )
        n = sd["size"]
        self.data[:n] = {k: sd[k] for k in self.data}  # (copied to this buffer's device)
        if self.frames is not None:
            self.frames.load_state_dict(sd["frames"])
        self.pos, self.size = sd["pos"], n
        self.filled.fill_(n)


def _rows(examples: dict) -> dict:
    """One row of each example batch (`[n, ...]` -> `[...]`, groups alike)."""
    return {k: _rows(x) if isinstance(x, dict) else x[0] for k, x in examples.items()}


def _write(store: dict, idx: torch.Tensor, given: dict) -> None:
    """`given`'s tensors into rows `idx` of `store`'s, each cast to its store's dtype."""
    for k, dest in store.items():
        if isinstance(dest, dict):
            _write(dest, idx, given[k])
        else:
            dest[idx] = given[k].to(dest.dtype)


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay (Schaul et al., 2016). Row i's priority p_i = |delta_i| + eps
    (its latest TD error); it is drawn with P(i) = p_i^alpha / sum_k p_k^alpha (alpha = 0: uniform)
    and its loss weighted by w_i = (N P(i))^-beta / max_batch w_j (N = rows filled, beta annealed
    towards 1). New rows get max_p, the running max priority (initially 1): replayed soon.

    A sum-tree in one tensor `tree` [2L] (L = capacity rounded up to a power of two; float64,
    float32 on MPS): node 1 the root, node j's children 2j and 2j+1, row i's leaf L + i holding
    p_i^alpha (0 until filled). Writes set leaves, then recompute each ancestor from its children
    level by level (one op per level), never by deltas: no drift, and duplicate indices cannot
    corrupt it. Sampling is stratified: one uniform draw per equal segment of the mass, all
    descending together. No host sync in add, sample or update_priorities."""

    def __init__(
        self,
        capacity: int,
        obs,
        actions: torch.Tensor,
        rewards=None,
        alpha: float = 0.6,
        eps: float = 1e-6,
        **extra,
    ):
        super().__init__(capacity, obs, actions, rewards, **extra)
        if alpha < 0:
            raise UserError(f"prioritized replay needs alpha >= 0 (0 = uniform), got {alpha}")
        if eps <= 0:
            raise UserError(
                f"prioritized replay needs eps > 0 so every row can be sampled, got {eps}"
            )
        self.alpha = float(alpha)
        self.eps = float(eps)
        self.tree_dtype = torch.float32 if self.device.type == "mps" else torch.float64
        self.num_leaves = 1 << (self.capacity - 1).bit_length()  # L: power of two >= capacity
        self.depth = self.num_leaves.bit_length() - 1  # levels below the root
        self.tree = torch.zeros(2 * self.num_leaves, dtype=self.tree_dtype, device=self.device)
        # running max of p
        self.max_priority = torch.ones((), dtype=self.tree_dtype, device=self.device)

    def _set_leaves(self, idx: torch.Tensor, values: torch.Tensor) -> None:
        """tree[L + idx] = values, then recompute all their ancestors level by level."""
        node = idx + self.num_leaves
        self.tree[node] = values
        for _ in range(self.depth):
            node = node >> 1
            self.tree[node] = self.tree[2 * node] + self.tree[2 * node + 1]

    def _rebuild(self) -> None:
        """Recompute every internal node from the leaves (same values as incremental updates)."""
        lo = self.num_leaves
        while lo > 1:
            children = self.tree[lo : 2 * lo]
            self.tree[lo // 2 : lo] = children[0::2] + children[1::2]
            lo //= 2

    def leaf_priorities(self) -> torch.Tensor:
        """p_i^alpha of the filled rows (a view into the tree)."""
        return self.tree[self.num_leaves : self.num_leaves + self.size]

    def add(self, obs, actions, rewards, next_obs, terminated, **extra) -> torch.Tensor:
        """Write n transitions (overwriting the oldest when full) with leaf = max_p^alpha each."""
        idx = super().add(obs, actions, rewards, next_obs, terminated, **extra)
        self._set_leaves(idx, (self.max_priority**self.alpha).expand(idx.shape[0]))
        return idx

    def sample_indices_and_probs(self, batch_size: int, generator: torch.Generator | None = None):
        """Stratified proportional draw: (rows [B] long, P(row) [B] in the tree's dtype)."""
        if self.size == 0:
            raise RuntimeError(
                "sampling from an empty replay buffer: fill it first (raise learning_starts)"
            )
        total = self.tree[1]
        u = torch.rand(batch_size, dtype=self.tree_dtype, device=self.device, generator=generator)
        u = (torch.arange(batch_size, dtype=self.tree_dtype, device=self.device) + u) * (
            total / batch_size
        )
        node = torch.ones(batch_size, dtype=torch.long, device=self.device)
        for _ in range(self.depth):
            left = 2 * node
            left_mass = self.tree[left]
            go_right = u >= left_mass
            u = torch.where(go_right, u - left_mass, u)
            node = left + go_right.long()
        # rounding may put a draw on an empty leaf (all >= size: rows fill from 0): clamp it
        idx = (node - self.num_leaves).clamp_(max=self.size - 1)
        probs = self.tree[idx + self.num_leaves] / total
        return idx, probs

    def sample(
        self, batch_size: int, beta: float | None = 0.4, generator: torch.Generator | None = None
    ) -> Batch:
        """A prioritized batch; `weights` = (N P(i))^-beta / max over the batch (float32)."""
        if beta is None:
            raise UserError(
                "PrioritizedReplayBuffer.sample needs the importance-sampling exponent beta "
                "(a float in [0, 1], e.g. beta=0.4 annealed to 1.0 over training); got None"
            )
        idx, probs = self.sample_indices_and_probs(batch_size, generator)
        weights = (self.size * probs) ** (-beta)  # beta: a float or a device scalar (no sync)
        weights = weights / weights.max()
        return self.get(idx, weights.to(torch.float32))

    def update_priorities(self, indices: torch.Tensor, td_errors: torch.Tensor) -> None:
        """p_i = |td_error_i| + eps for filled rows `indices` (duplicates allowed); raises max_p."""
        indices = indices.to(device=self.device, dtype=torch.long).reshape(-1)
        p = (
            td_errors.detach().to(device=self.device, dtype=self.tree_dtype).reshape(-1).abs()
            + self.eps
        )
        if p.numel() == 0:  # shape, not a value: no sync
            return
        self.max_priority = torch.maximum(self.max_priority, p.max())
        self._set_leaves(indices, p**self.alpha)

    def state_dict(self) -> dict:
        """The parent's rows, the filled leaves (p^alpha), max_p and alpha (loading rebuilds)."""
        sd = super().state_dict()
        sd["priorities"] = self.leaf_priorities().clone()
        sd["max_priority"] = self.max_priority.clone()
        sd["alpha"] = self.alpha
        return sd

    def load_state_dict(self, sd: dict) -> None:
        if "priorities" not in sd:
            raise UserError(
                "this replay-buffer state has no priorities (saved from a uniform ReplayBuffer): "
                "resume with the same replay type (prioritized or not) as the saved run"
            )
        if sd["alpha"] != self.alpha:
            raise UserError(
                f"saved prioritized buffer used alpha={sd['alpha']}, this one alpha={self.alpha}: "
                "its stored priorities are p^alpha, so resume with the same alpha"
            )
        super().load_state_dict(sd)
        self.tree.zero_()
        self.tree[self.num_leaves : self.num_leaves + self.size] = sd["priorities"].to(
            self.device, self.tree_dtype
        )
        self._rebuild()
        self.max_priority = sd["max_priority"].to(self.device, self.tree_dtype).clone()


class TrajectoryStore:
    """The H-term files' (algos/*_h.py) store of whole trajectories: the last `horizon` steps of
    every sub-env (an [N, horizon] ring on the device) and a table of the episodes finished in it
    (sub-env, absolute start, length, return); an episode whose first step was overwritten drops
    out. Tensor code only: no host sync, no Python loop over sub-envs or windows."""

    def __init__(
        self,
        num_envs: int,
        horizon: int,
        obs_shape: tuple | dict,
        action_shape: tuple = (),
        action_dtype=torch.float32,
        max_episodes: int = 4096,
        device="cpu",
    ):
        if horizon <= 0 or max_episodes <= 0:
            raise UserError("TrajectoryStore needs a positive horizon and max_episodes")
        self.N, self.H, self.E = num_envs, horizon, max_episodes
        self.device = dev = torch.device(device)
        # named observation groups: {name: an example batch [N, ...]}
        if isinstance(obs_shape, dict):
            self.obs = Batch(
                {k: x.new_zeros((num_envs, horizon, *x.shape[1:])) for k, x in obs_shape.items()}
            )
        else:
            self.obs = torch.zeros((num_envs, horizon, *obs_shape), device=dev)
        self.actions = torch.zeros(
            (num_envs, horizon, *action_shape), dtype=action_dtype, device=dev
        )
        # absolute step (sub-envs step together), on the device and updated in place: a captured
        # CUDA graph (common/graphs.py) replays `add` into this memory
        self.t = torch.zeros((), dtype=torch.long, device=dev)
        # absolute start of the running episode
        self.ep_start = torch.zeros(num_envs, dtype=torch.long, device=dev)
        self.ep_return = torch.zeros(num_envs, device=dev)
        # finished episodes: sub-env, absolute start, length, return; slot E sinks masked writes
        self.tab_env = torch.zeros(max_episodes + 1, dtype=torch.long, device=dev)
        self.tab_start = torch.zeros(max_episodes + 1, dtype=torch.long, device=dev)
        self.tab_len = torch.zeros(max_episodes + 1, dtype=torch.long, device=dev)
        self.tab_ret = torch.zeros(max_episodes + 1, device=dev)
        self.tab_count = torch.zeros((), dtype=torch.long, device=dev)  # episodes ever recorded

    def add(
        self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, done: torch.Tensor
    ) -> None:
        """One vectorized step: `obs` the one acted in, `done` = terminated | truncated."""
        col = (self.t % self.H).view(1)
        for k, store in self.obs.items() if isinstance(self.obs, dict) else [(None, self.obs)]:
            store.index_copy_(1, col, (obs if k is None else obs[k]).unsqueeze(1).to(store.dtype))
        self.actions.index_copy_(1, col, actions.unsqueeze(1).to(self.actions.dtype))
        self.ep_return += rewards
        self.t += 1
        # the j-th finishing episode goes to slot count + j, the others to the sink
        slot = self.tab_count + torch.cumsum(done.long(), 0) - 1
        slot = torch.where(done, slot % self.E, torch.full_like(slot, self.E))
        envs = torch.arange(self.N, device=self.device)
        self.tab_env[slot] = envs
        self.tab_start[slot] = self.ep_start
        self.tab_len[slot] = self.t - self.ep_start
        self.tab_ret[slot] = self.ep_return
        self.tab_count += done.sum()
        torch.where(done, self.t, self.ep_start, out=self.ep_start)
        self.ep_return.mul_(~done)

    _STATE = (
        "obs",
        "actions",
        "ep_start",
        "ep_return",
        "tab_env",
        "tab_start",
        "tab_len",
        "tab_ret",
        "tab_count",
    )

    def state_dict(self) -> dict:
        # plain tensors and dicts (no class of ours in a checkpoint); int(t) syncs, as saving does
        state = {k: getattr(self, k) for k in self._STATE}
        return {"t": int(self.t), **Batch(state).state_dict()}

    def load_state_dict(self, sd: dict) -> None:
        def shapes(obs):
            return (
                {k: tuple(v.shape) for k, v in obs.items()}
                if isinstance(obs, dict)
                else tuple(obs.shape)
            )

        if shapes(sd["obs"]) != shapes(self.obs) or sd["tab_ret"].shape != self.tab_ret.shape:
            raise UserError(
                f"saved H-term store {shapes(sd['obs'])} does not fit this one {shapes(self.obs)}: "
                f"resume with the same --num-envs and --h-term-* sizes"
            )
        self.t.fill_(int(sd["t"]))
        for k in self._STATE:
            getattr(self, k).copy_(sd[k])

    def valid(self) -> torch.Tensor:
        """Mask over table slots: recorded, and the whole episode still in the ring."""
        slots = torch.arange(self.E, device=self.device)
        recorded = slots < self.tab_count
        in_ring = self.tab_start[: self.E] >= self.t - self.H
        return recorded & in_ring

    def sample(
        self,
        batch: int,
        k_step: int,
        drop_rate: float = 0.125,
        generator: torch.Generator | None = None,
    ):
        """`batch` windows of `k_step` steps from the best `1 - drop_rate` of the stored episodes,
        returns normalized over the kept ones (a shorter episode: a masked, shorter window):
        (obs [B, K, ...], actions [B, K, ...], mask [B, K] bool, returns_norm [B], any_valid []);
        `any_valid` is a False tensor (no sync) while no episode is stored: the loss is then 0."""
        valid = self.valid()
        ret = torch.where(
            valid, self.tab_ret[: self.E], torch.full_like(self.tab_ret[: self.E], -float("inf"))
        )
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
