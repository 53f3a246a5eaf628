"""The categorical action distribution of the discrete-action PPO files: one categorical per
dimension of the action space (`Discrete(n)`: one; `MultiDiscrete(nvec)`: `len(nvec)`, independent,
over consecutive slices of the logits), with the actions an action mask forbids given probability
zero (Huang & Ontañón 2020, arXiv:2006.14171: the masked logits are what the policy gradient flows
through, so a forbidden action takes no probability mass and no share of the entropy); and the
Gaussian of the continuous-action ones.

`Categorical` and `Normal` are torch's (`torch.distributions`), without argument validation: its
checks read tensors, a host sync on an accelerator each time a distribution is built."""

from __future__ import annotations

import gymnasium as gym
import torch

from common.errors import UserError


def action_nvec(space: gym.Space) -> tuple[int, ...] | None:
    """The sizes of a discrete action space's dimensions (`Discrete(n)`: `(n,)`), or None for
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
    probabilities (from a NaN observation) are drawn from as uniform: CUDA's multinomial would stop
    on a device-side assert, which kills the process's CUDA context before NumericGuard names the
    NaN at its next check (finite probabilities: torch's draws). On CPU multinomial raises at
    once."""

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
    """`torch.distributions.Normal(loc, scale)` without validation (a host sync on an
    accelerator)."""
    return torch.distributions.Normal(loc, scale, validate_args=False)


class Categoricals:
    """`logits` [..., sum(nvec)] as independent categoricals; `mask` [..., sum(nvec)] (bool, True =
    allowed) or None. Actions are `[...]` long for one dimension (`multi=False`, a `Discrete` space)
    and `[..., D]` long for several; `log_prob` and `entropy` sum over the dimensions."""

    # the `nvec` of an action space (`Categoricals.nvec(space)`): None for a continuous one
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
        # validation would read tensors: host syncs; one dimension (`Discrete`) takes the logits
        # whole (a split of one piece is one more autograd node, and its sums below one more add,
        # each way, for the same numbers)
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
    """The sum of the dimensions' terms, left to right; one term is returned as it is (`sum` would
    add it to 0)."""
    terms = iter(terms)
    total = next(terms)
    for t in terms:
        total = total + t
    return total
