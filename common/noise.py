"""Colored Gaussian exploration noise (Eberhard et al., 2023): each step N(0, 1), the sequence
with a 1/f^beta power spectrum (0 white, 1 pink, 2 red), for exploration that must make long
excursions (docs/usage.md#colored-exploration-noise).
"""

from __future__ import annotations

import torch

from common.errors import UserError


class ColoredNoise:
    """An independent sequence per element of `shape` (sub-env x action dimension), drawn on the
    device from torch's RNG in blocks of `length` steps (one inverse real FFT), one step per
    `sample()`; the block and position are in `state_dict()` for an exact resume. With beta = 0
    `sample()` is `torch.randn(shape)` itself."""

    def __init__(
        self,
        beta: float,
        shape: tuple[int, ...],
        length: int = 1000,
        device: torch.device | str = "cpu",
    ):
        if beta < 0:
            raise UserError(f"--noise-color must be >= 0 (0 white, 1 pink, 2 red), got {beta}")
        if length < 2:
            raise UserError(
                f"colored noise needs sequences of at least 2 steps, got length {length}"
            )
        self.beta, self.shape, self.length, self.device = (
            float(beta),
            tuple(shape),
            int(length),
            torch.device(device),
        )
        k = torch.arange(length // 2 + 1, dtype=torch.float64)
        # the zero frequency takes the lowest one's power (a block's mean wanders)
        f = (k / length).clamp(min=1.0 / length)
        amp = f ** (-self.beta / 2)
        # Var of one step of irfft(amp * z) (z: unit complex normals; real at 0 and even Nyquist)
        var = (
            amp[0] ** 2
            + 2 * (amp[1 : length // 2 + (length % 2)] ** 2).sum()
            + (amp[-1] ** 2 if length % 2 == 0 else 0)
        )
        # unit-variance output
        self.amp = (amp * length / var.sqrt()).to(torch.float32).to(self.device)
        self.block: torch.Tensor | None = None  # (length, *shape), used up one row per sample()
        self.pos = length

    def _draw(self, generator: torch.Generator | None) -> torch.Tensor:
        n, m = self.length, self.amp.numel()
        re = torch.randn(*self.shape, m, device=self.device, generator=generator)
        im = torch.randn(*self.shape, m, device=self.device, generator=generator)
        im[..., 0] = 0.0  # the zero frequency is real: its real part keeps the full variance
        re[..., 1:] *= 0.5**0.5
        im[..., 1:] *= 0.5**0.5
        if n % 2 == 0:  # so is the Nyquist frequency
            im[..., -1] = 0.0
            re[..., -1] *= 2**0.5
        seq = torch.fft.irfft(torch.complex(re, im) * self.amp, n=n)  # (*shape, length)
        return seq.movedim(-1, 0).contiguous()

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """The next step of every sequence, shape `shape`, N(0, 1); `generator` None: torch's
        global RNG."""
        if self.beta == 0.0:
            return torch.randn(self.shape, device=self.device, generator=generator)
        if self.pos >= self.length:
            self.block, self.pos = self._draw(generator), 0
        self.pos += 1
        return self.block[self.pos - 1]

    def state_dict(self) -> dict:
        return {"beta": self.beta, "block": self.block, "pos": self.pos}

    def load_state_dict(self, state: dict | None) -> None:
        if state is None:  # a checkpoint without noise state: nothing to restore
            return
        if state["block"] is not None and tuple(state["block"].shape) != (self.length, *self.shape):
            raise UserError(
                f"the checkpoint's noise block has shape {tuple(state['block'].shape)}, this run "
                f"needs {(self.length, *self.shape)}: resume with the checkpoint's --num-envs"
            )
        self.block = None if state["block"] is None else state["block"].to(self.device)
        self.pos = int(state["pos"])
