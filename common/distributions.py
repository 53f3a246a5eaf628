"""Action distributions: one categorical per dimension of a discrete action space, an action mask
giving forbidden actions probability zero (Huang & Ontañón 2020, arXiv:2006.14171: the policy
gradient flows through the masked logits, so forbidden actions take no mass and no entropy); and
the Gaussian. Torch's arithmetic without torch's classes: no argument validation (its checks read
tensors, a host sync on an accelerator for every distribution built), no per-call machinery."""

from __future__ import annotations

import math

import gymnasium as gym
import torch

from common.errors import UserError


def action_nvec(space: gym.Space) -> tuple[int, ...] | None:
    """The sizes of a discrete action space's dimensions (`Discrete(n)`: `(n,)`); None if
    continuous."""
    if isinstance(space, gym.spaces.Discrete):
        return (int(space.n),)
    if isinstance(space, gym.spaces.MultiDiscrete):
        if space.nvec.ndim != 1:
            raise UserError(
                f"MultiDiscrete action spaces must be flat, got nvec of shape {space.nvec.shape}"
            )
        return tuple(int(n) for n in space.nvec)
    return None


class Categorical:
    """`torch.distributions.Categorical(logits=...)`'s arithmetic, op for op (the same numbers, the
    same random draws), without its class machinery: at a few sub-envs a step is bound by Python
    per op, and torch's constructor, lazy properties and shape checks cost more than its kernels.
    On an accelerator NaN probabilities are drawn from as uniform: CUDA's multinomial would hit a
    device-side assert, killing the CUDA context before NumericGuard can name the NaN. CPU raises
    at once."""

    def __init__(self, logits: torch.Tensor):
        self.logits = logits - logits.logsumexp(-1, keepdim=True)  # normalized: log-probabilities
        self._probs = None

    @property
    def probs(self) -> torch.Tensor:
        if self._probs is None:
            self._probs = self.logits.softmax(-1)
        return self._probs

    def sample(self) -> torch.Tensor:
        p = self.probs
        if p.device.type != "cpu":
            p = torch.nan_to_num(p, nan=1.0, posinf=1.0)
        return torch.multinomial(p.reshape(-1, p.shape[-1]), 1, True).view(p.shape[:-1])

    def log_prob(self, action: torch.Tensor) -> torch.Tensor:
        return self.logits.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        logits = self.logits.clamp(min=torch.finfo(self.logits.dtype).min)  # -inf * 0: no NaN
        return -(logits * self.probs).sum(-1)


_LOG_SQRT_2PI = math.log(math.sqrt(2 * math.pi))


class Normal:
    """`torch.distributions.Normal(loc, scale)`'s arithmetic for the methods the files use, op for
    op, without its class machinery (see `Categorical`); `loc` and `scale` of one shape."""

    def __init__(self, loc: torch.Tensor, scale: torch.Tensor):
        self.loc, self.scale = loc, scale

    def rsample(self) -> torch.Tensor:
        eps = torch.empty(self.loc.shape, dtype=self.loc.dtype, device=self.loc.device).normal_()
        return self.loc + eps * self.scale

    def log_prob(self, value: torch.Tensor) -> torch.Tensor:
        var = self.scale**2
        return -((value - self.loc) ** 2) / (2 * var) - self.scale.log() - _LOG_SQRT_2PI

    def entropy(self) -> torch.Tensor:
        return 0.5 + 0.5 * math.log(2 * math.pi) + torch.log(self.scale)


class Categoricals:
    """`logits` [..., sum(nvec)] as independent categoricals; `mask` like it (bool, True = allowed)
    or None. Actions are long `[...]` (`multi=False`, `Discrete`) or `[..., D]`; `log_prob` and
    `entropy` sum over the dimensions."""

    # `Categoricals.nvec(space)`
    nvec = staticmethod(action_nvec)

    def __init__(
        self,
        logits: torch.Tensor,
        nvec: tuple[int, ...],
        mask: torch.Tensor | None = None,
        multi: bool = False,
    ):
        if mask is not None:
            logits = logits.masked_fill(~mask, torch.finfo(logits.dtype).min)
        self.multi = multi
        # one dimension takes the logits whole: a split of one piece would add autograd nodes
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
    """The terms' sum, left to right; one term as it is (`sum` would add it to 0)."""
    terms = iter(terms)
    total = next(terms)
    for t in terms:
        total = total + t
    return total
