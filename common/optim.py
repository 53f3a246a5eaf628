"""The learning-rate schedules the PPO files share.

The learning-rate schedules write in place into the learning-rate tensor of the PPO files' Adam
(`optimizer.param_groups[0]["lr"]`, a device tensor so that a compiled optimizer step reads it).

`adapt_lr` is rsl_rl's adaptive schedule (Rudin et al. 2021, arXiv:2109.11978; rsl_rl's PPO default,
so IsaacLab's PPO settings port with it): after each minibatch's loss, before its optimizer step,

    KL > 2 x desired      ->  lr / 1.5, not below 1e-5
    KL < desired / 2      ->  lr x 1.5, not above 1e-2
    otherwise             ->  lr unchanged

where KL is the minibatch's estimate of KL(old policy || current policy). rsl_rl computes it in
closed form between the two diagonal Gaussians and reads it on the host every minibatch; here it is
the PPO loss's `approx_kl` (the k3 estimator, ((ratio - 1) - log ratio).mean(), which works for
categorical policies too) and the rule runs on the device with `torch.where`: no host sync at all.
The rate is saved with the optimizer's state, so a resumed run continues with the rate it had.
"""

from __future__ import annotations

import torch

LR_MIN, LR_MAX, LR_FACTOR = 1e-5, 1e-2, 1.5


@torch.no_grad()
def adapt_lr(lr: torch.Tensor, kl: torch.Tensor, desired_kl: float) -> None:
    """rsl_rl's adaptive rule (module docstring), in place on `lr`'s device."""
    up, down = (lr * LR_FACTOR).clamp(max=LR_MAX), (lr / LR_FACTOR).clamp(min=LR_MIN)
    lr.copy_(torch.where(kl > 2.0 * desired_kl, down, torch.where(kl < 0.5 * desired_kl, up, lr)))
