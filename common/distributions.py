"""The categorical action distribution of the discrete-action PPO files: one categorical per dimension of the
action space (`Discrete(n)`: one; `MultiDiscrete(nvec)`: `len(nvec)`, independent, over consecutive slices of
the logits), with the actions an action mask forbids given probability zero (Huang & Ontañón 2020,
arXiv:2006.14171: the masked logits are what the policy gradient flows through, so a forbidden action
takes no probability mass and no share of the entropy); and the Gaussian of the continuous-action ones.

`Categorical` and `Normal` compute what `torch.distributions` computes, the same ops in the same order, without
its Python bookkeeping: a small PPO update is bound by per-op overhead on a CPU, where that bookkeeping cost as
much as the kernels (tests/test_action_masks.py checks both against torch to the last bit, gradients included)."""

from __future__ import annotations

import math

import gymnasium as gym
import torch
import torch.nn.functional as F

from common.errors import UserError


def action_nvec(space: gym.Space) -> tuple[int, ...] | None:
    """The sizes of a discrete action space's dimensions (`Discrete(n)`: `(n,)`), or None for continuous."""
    if isinstance(space, gym.spaces.Discrete):
        return (int(space.n),)
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise UserError(f"MultiDiscrete action spaces must be flat, got nvec of shape {space.nvec.shape}")
        return tuple(int(n) for n in space.nvec)
    return None


class Categorical:
    """`torch.distributions.Categorical(logits=...)`'s arithmetic, op for op (the same numbers bit for bit), without
    its Python machinery (shape bookkeeping, argument checks, the broadcast in `log_prob`): a PPO iteration builds
    one per minibatch and per rollout step, and on a CPU that machinery cost as much as the small kernels."""

    __slots__ = ("logits", "_probs")

    def __init__(self, logits: torch.Tensor):
        self.logits = logits - logits.logsumexp(dim=-1, keepdim=True)  # normalized log-probabilities
        self._probs = None

    @property
    def probs(self) -> torch.Tensor:
        if self._probs is None:
            self._probs = F.softmax(self.logits, dim=-1)
        return self._probs

    def sample(self) -> torch.Tensor:
        """torch's draws; on an accelerator NaN probabilities (from a NaN observation) are drawn from as uniform:
        CUDA's multinomial would stop on a device-side assert, which kills the process's CUDA context before
        NumericGuard names the NaN at its next check (finite probabilities: the same draws). On CPU multinomial
        raises at once."""
        p = self.probs if self.probs.device.type == "cpu" else torch.nan_to_num(self.probs, nan=1.0, posinf=1.0)
        return torch.multinomial(p.reshape(-1, self.logits.shape[-1]), 1, True).T.reshape(self.logits.shape[:-1])

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        value = value.long().unsqueeze(-1)
        logits = self.logits
        if value.shape[:-1] != logits.shape[:-1]:  # torch's broadcast of actions against the batch
            value, logits = torch.broadcast_tensors(value, logits)
            value = value[..., :1]
        return logits.gather(-1, value).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        p_log_p = torch.clamp(self.logits, min=torch.finfo(self.logits.dtype).min) * self.probs
        return -p_log_p.sum(-1)


class Normal:
    """`torch.distributions.Normal(loc, scale)`'s arithmetic for the Gaussian PPO files, op for op (bit for bit),
    without its broadcasting of `loc` against `scale` (give `scale` in `loc`'s shape: the files expand their
    log-std) and its argument checks."""

    __slots__ = ("loc", "scale")

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor):
        self.loc, self.scale = loc, scale

    def rsample(self) -> torch.Tensor:
        eps = torch.empty(self.loc.shape, dtype=self.loc.dtype, device=self.loc.device).normal_()
        return self.loc + eps * self.scale

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        var = self.scale**2
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - math.log(math.sqrt(2 * math.pi))

    def entropy(self) -> torch.Tensor:
        return 0.5 + 0.5 * math.log(2 * math.pi) + torch.log(self.scale)


class Categoricals:
    """`logits` [..., sum(nvec)] as independent categoricals; `mask` [..., sum(nvec)] (bool, True = allowed)
    or None. Actions are `[...]` long for one dimension (`multi=False`, a `Discrete` space) and `[..., D]`
    long for several; `log_prob` and `entropy` sum over the dimensions."""

    def __init__(self, logits: torch.Tensor, nvec: tuple[int, ...], mask: torch.Tensor | None = None,
                 multi: bool = False):
        if mask is not None:
            logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
        self.multi = multi
        # validation would read tensors: host syncs; one dimension (`Discrete`) takes the logits whole (a split of
        # one piece is one more autograd node, and its sums below one more add, each way, for the same numbers)
        parts = logits.split(list(nvec), -1) if len(nvec) > 1 else [logits]
        self.dims = [Categorical(x) for x in parts]

    def _cols(self, action: torch.Tensor) -> list[torch.Tensor]:
        action = action.long()
        return action.unbind(-1) if self.multi else [action]

    def sample(self) -> torch.Tensor:
        out = [d.sample() for d in self.dims]
        return torch.stack(out, -1) if self.multi else out[0]

    def mode(self) -> torch.Tensor:
        out = [d.logits.argmax(-1) for d in self.dims]
        return torch.stack(out, -1) if self.multi else out[0]

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return _total(d.log_prob(a) for d, a in zip(self.dims, self._cols(action)))

    def entropy(self) -> torch.Tensor:
        return _total(d.entropy() for d in self.dims)


def _total(terms) -> torch.Tensor:
    """The sum of the dimensions' terms, left to right; one term is returned as it is (`sum` would add it to 0)."""
    terms = iter(terms)
    total = next(terms)
    for t in terms:
        total = total + t
    return total
