"""common/noise.py: colored exploration noise keeps N(0, 1) marginals, is correlated in time as its
color says, is white noise itself at beta = 0, and resumes exactly from its state_dict."""

from __future__ import annotations

import pytest
import torch

from common.noise import ColoredNoise


def _draw(noise: ColoredNoise, steps: int) -> torch.Tensor:
    return torch.stack([noise.sample() for _ in range(steps)])


def _autocorr(x: torch.Tensor, lag: int) -> float:
    return float((x[lag:] * x[:-lag]).mean() / x.var())


@pytest.mark.parametrize("length", [1000, 999])
def test_each_step_is_unit_normal_and_the_color_sets_the_correlation(length):
    torch.manual_seed(0)
    corr = {}
    for beta in (0.0, 1.0, 2.0):
        x = _draw(ColoredNoise(beta, (2000, 2), length), length)  # (time, envs, dims)
        assert abs(float(x.mean())) < 0.02 and abs(float(x.var()) - 1) < 0.03, (
            beta,
            x.mean(),
            x.var(),
        )
        corr[beta] = _autocorr(x, 1), _autocorr(x, 10)
    assert abs(corr[0.0][0]) < 0.01 and abs(corr[0.0][1]) < 0.01  # white: no memory
    assert 0.7 < corr[1.0][0] < 0.85 and 0.35 < corr[1.0][1] < 0.55  # pink: decays slowly
    assert corr[2.0][0] > 0.99 and corr[2.0][1] > 0.9  # red: a slow random walk
    env_corr = float((x[:, :-1, 0] * x[:, 1:, 0]).mean())  # sub-envs draw independent sequences
    assert abs(env_corr) < 0.05


def test_white_noise_is_torch_randn_itself():
    """beta = 0 leaves the RNG stream as it was before the option existed (runs reproduce old
    results)."""
    torch.manual_seed(3)
    a = _draw(ColoredNoise(0.0, (4, 3)), 5)
    torch.manual_seed(3)
    b = torch.stack([torch.randn(4, 3) for _ in range(5)])
    assert torch.equal(a, b)


def test_state_dict_resumes_the_sequence_exactly():
    torch.manual_seed(1)
    noise = ColoredNoise(1.0, (3, 2), length=16)
    _draw(noise, 21)  # into the second block
    state, rng = noise.state_dict(), torch.get_rng_state()
    expected = _draw(noise, 30)  # crosses into a third block
    other = ColoredNoise(1.0, (3, 2), length=16)
    other.load_state_dict(state)
    torch.set_rng_state(rng)
    assert torch.equal(_draw(other, 30), expected)
    other.load_state_dict(None)  # a checkpoint from before the option: nothing to restore, no error
    with pytest.raises(ValueError, match="--num-envs"):
        ColoredNoise(1.0, (5, 2), length=16).load_state_dict(state)


def test_bad_settings_name_the_fix():
    with pytest.raises(ValueError, match="--noise-color must be >= 0"):
        ColoredNoise(-1.0, (2, 1))
    with pytest.raises(ValueError, match="at least 2 steps"):
        ColoredNoise(1.0, (2, 1), length=1)
