"""rsl_rl's adaptive learning rate (Rudin et al. 2021, arXiv:2109.11978), shared by the PPO files
(docs/usage.md, adaptive learning rate): lr / 1.5 when the minibatch's KL exceeds twice the
target, x 1.5 below half of it, within [1e-5, 1e-2]. KL is the PPO loss's `approx_kl`
(the k3 estimator, fit for categorical policies too) where rsl_rl reads a closed-form Gaussian KL
on the host; here the rule runs on the device, no host sync.
"""

from __future__ import annotations

import torch

LR_MIN, LR_MAX, LR_FACTOR = 1e-5, 1e-2, 1.5


@torch.no_grad()
def adapt_lr(lr: torch.Tensor, kl: torch.Tensor, desired_kl: float) -> None:
    """The rule, in place on `lr`: the Adam's `param_groups[0]["lr"]`, a device tensor so that a
    compiled optimizer step reads it. Call after a minibatch's loss, before its step."""
    up, down = (lr * LR_FACTOR).clamp(max=LR_MAX), (lr / LR_FACTOR).clamp(min=LR_MIN)
    lr.copy_(torch.where(kl > 2.0 * desired_kl, down, torch.where(kl < 0.5 * desired_kl, up, lr)))
