"""The Adam every algorithm file uses, its gradient clipping, and the learning-rate schedules the PPO files share.

`Adam` is `torch.optim.Adam` with a lean step for the case the files use on CPU (`fused=True`): torch.optim's
`step` spends most of its time, for the small nets of the classic-control tasks, in Python around its one fused
kernel (step hooks, profiler scopes, re-collecting and re-grouping the tensors on every call); the lean `step` calls
the same `torch._fused_adam_` kernel on the same state tensors, collected once, and `zero_grad` drops the gradients
of a cached list. The numbers and the `state_dict` are torch's, bit for bit (tests/test_optim.py); anything else
(CUDA, capturable, foreach, amsgrad, a closure, a registered hook, a parameter without a gradient, a step traced
by `--compile`) takes torch's step; checkpoints hold torch's state_dict either way.

The learning-rate schedules write in place into the learning-rate tensor of the PPO files' Adam
(`optimizer.param_groups[0]["lr"]`, a device tensor so that a compiled optimizer step reads it).

`adapt_lr` is rsl_rl's adaptive schedule (Rudin et al. 2021, arXiv:2109.11978; rsl_rl's PPO default, so
IsaacLab's PPO settings port with it): after each minibatch's loss, before its optimizer step,

    KL > 2 x desired      ->  lr / 1.5, not below 1e-5
    KL < desired / 2      ->  lr x 1.5, not above 1e-2
    otherwise             ->  lr unchanged

where KL is the minibatch's estimate of KL(old policy || current policy). rsl_rl computes it in closed form
between the two diagonal Gaussians and reads it on the host every minibatch; here it is the PPO loss's
`approx_kl` (the k3 estimator, ((ratio - 1) - log ratio).mean(), which works for categorical policies too)
and the rule runs on the device with `torch.where`: no host sync at all. The rate is saved with the
optimizer's state, so a resumed run continues with the rate it had.
"""

from __future__ import annotations

import torch
from torch.optim import optimizer as torch_optimizer

LR_MIN, LR_MAX, LR_FACTOR = 1e-5, 1e-2, 1.5


_adam_step = torch.optim.Adam.step  # torch's step, in torch's hooks-and-profiler wrapper exactly once
_TORCH_STEP = torch.optim.Optimizer.profile_hook_step(_adam_step.__wrapped__ if getattr(_adam_step, "hooked", False) else _adam_step)


class Adam(torch.optim.Adam):
    """`torch.optim.Adam`; with `fused=True` on CPU a lean `step` and `zero_grad` (module docstring)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._lean = None  # per group: (params, exp_avgs, exp_avg_sqs, steps), collected after the first step

    def _collect(self):
        groups = []
        for g in self.param_groups:
            if not (g["fused"] and not g["amsgrad"] and not g["maximize"] and not g["decoupled_weight_decay"]
                    and not g["differentiable"] and not g["capturable"]
                    and not any(isinstance(b, torch.Tensor) for b in g["betas"])):
                return None
            params = list(g["params"])
            if any(p.device.type != "cpu" or p not in self.state for p in params):
                return None
            st = [self.state[p] for p in params]
            groups.append((g, params, [s["exp_avg"] for s in st], [s["exp_avg_sq"] for s in st], [s["step"] for s in st]))
        return groups

    def step(self, closure=None):
        if torch.compiler.is_compiling():  # --compile traces torch's step (inductor rejects the in-place kernel call)
            return _TORCH_STEP(self, closure)
        lean = self._lean
        if (lean is None or closure is not None or self._optimizer_step_pre_hooks or self._optimizer_step_post_hooks
                or torch_optimizer._global_optimizer_pre_hooks or torch_optimizer._global_optimizer_post_hooks):
            loss = _TORCH_STEP(self, closure)
            self._lean = self._collect() if closure is None else None
            return loss
        grads = [[p.grad for p in params] for _, params, *_ in lean]
        if any(g is None for gs in grads for g in gs):  # a parameter without a gradient: torch skips it
            return _TORCH_STEP(self)
        with torch.no_grad():
            for (g, params, exp_avgs, exp_avg_sqs, steps), gs in zip(lean, grads):
                beta1, beta2 = g["betas"]
                torch._foreach_add_(steps, 1)
                torch._fused_adam_(params, gs, exp_avgs, exp_avg_sqs, [], steps, amsgrad=False, lr=g["lr"],
                                   beta1=beta1, beta2=beta2, weight_decay=g["weight_decay"], eps=g["eps"],
                                   maximize=False, grad_scale=None, found_inf=None)
        return None

    step.hooked = True  # torch would wrap `step` in its hooks-and-profiler wrapper; torch's own step keeps it

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._lean is None or not set_to_none:
            return super().zero_grad(set_to_none)
        for _, params, *_ in self._lean:
            for p in params:
                p.grad = None

    def load_state_dict(self, state_dict) -> None:
        super().load_state_dict(state_dict)
        self._lean = None  # new state tensors: collect them again at the next step

    def add_param_group(self, param_group) -> None:
        super().add_param_group(param_group)
        self._lean = None


def clip_grad_norm_(parameters, max_norm: float) -> torch.Tensor:
    """`torch.nn.utils.clip_grad_norm_(parameters, max_norm)` (the 2-norm), bit for bit, without its per-call
    grouping of the gradients by device and dtype: when they share one (what the files have) it runs the same
    three steps itself (`_foreach_norm`, the norm of the norms, `_foreach_mul_` by min(max_norm / (norm + 1e-6), 1)),
    anything else, and a traced `--compile` step, is torch's."""
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    device = grads[0].device if grads else None
    if (not grads or torch.compiler.is_compiling() or device.type not in ("cpu", "cuda")
            or any(type(g) is not torch.Tensor or g.device != device or g.dtype != grads[0].dtype or g.is_sparse
                   for g in grads)):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    with torch.no_grad():
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads, 2.0)), 2.0)
        torch._foreach_mul_(grads, torch.clamp(float(max_norm) / (total + 1e-6), max=1.0))
    return total


@torch.no_grad()
def adapt_lr(lr: torch.Tensor, kl: torch.Tensor, desired_kl: float) -> None:
    """rsl_rl's adaptive rule (module docstring), in place on `lr`'s device."""
    up, down = (lr * LR_FACTOR).clamp(max=LR_MAX), (lr / LR_FACTOR).clamp(min=LR_MIN)
    lr.copy_(torch.where(kl > 2.0 * desired_kl, down, torch.where(kl < 0.5 * desired_kl, up, lr)))
