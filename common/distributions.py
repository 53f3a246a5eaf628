"""Action distributions: one categorical per dimension of a discrete action space, an action mask
giving forbidden actions probability zero (Huang & Ontañón 2020, arXiv:2006.14171: the policy
gradient flows through the masked logits, so forbidden actions take no mass and no entropy); and
the Gaussian. Torch's classes without argument validation, whose checks read tensors: a host sync
on an accelerator for every distribution built."""

from __future__ import annotations

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


class Categorical(torch.distributions.Categorical):
    """`torch.distributions.Categorical(logits=...)` without validation. On an accelerator NaN
    probabilities are drawn from as uniform: CUDA's multinomial would hit a device-side assert,
    killing the CUDA context before NumericGuard can name the NaN. CPU raises at once."""

    def __init__(self, logits: torch.Tensor):
        super().__init__(logits=logits, validate_args=False)

    def sample(self, sample_shape=torch.Size()) -> torch.Tensor:
        if self.probs.device.type == "cpu" or sample_shape != torch.Size():
            return super().sample(sample_shape)
        p = torch.nan_to_num(self.probs, nan=1.0, posinf=1.0)
        return torch.multinomial(p.reshape(-1, self._num_events), 1, True).T.reshape(
            self.batch_shape
        )


def Normal(loc: torch.Tensor, scale: torch.Tensor) -> torch.distributions.Normal:
    """`torch.distributions.Normal(loc, scale)` without validation."""
    return torch.distributions.Normal(loc, scale, validate_args=False)


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
