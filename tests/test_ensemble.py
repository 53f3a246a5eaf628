"""The batched critic ensemble equals the individual critics it was built from."""

import torch
import torch.nn as nn

from common.ensemble import EnsembleLinear, EnsembleMLP


def _mlp(seed, sizes=(7, 32, 32, 1)):
    torch.manual_seed(seed)
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers).double()


def test_ensemble_matches_individual_critics():
    mlps = [_mlp(s) for s in range(10)]
    ens = EnsembleMLP.from_mlps(mlps).double()
    x = torch.randn(64, 7, dtype=torch.float64)
    out = ens(x)  # shared input
    assert out.shape == (10, 64, 1)
    for i, m in enumerate(mlps):
        torch.testing.assert_close(out[i], m(x), rtol=1e-12, atol=1e-12)
    # per-member inputs [K, B, in]
    xs = torch.randn(10, 5, 7, dtype=torch.float64)
    out = ens(xs)
    for i, m in enumerate(mlps):
        torch.testing.assert_close(out[i], m(xs[i]), rtol=1e-12, atol=1e-12)
    # and back: member(i) is the same function
    for i in (0, 9):
        torch.testing.assert_close(ens.member(i).double()(x), mlps[i](x), rtol=1e-12, atol=1e-12)


def test_ensemble_gradients_match_individual_critics():
    mlps = [_mlp(s) for s in range(3)]
    ens = EnsembleMLP.from_mlps(mlps).double()
    x = torch.randn(16, 7, dtype=torch.float64)
    ens(x).square().sum().backward()
    for m in mlps:
        m(x).square().sum().backward()
    first = ens.net[0]
    for i, m in enumerate(mlps):
        torch.testing.assert_close(first.weight.grad[i], m[0].weight.grad.T)
        torch.testing.assert_close(first.bias.grad[i, 0], m[0].bias.grad)


def test_members_are_initialized_independently():
    lin = EnsembleLinear(4, 8, 3)
    assert not torch.equal(lin.weight[0], lin.weight[1])
    assert lin.weight.abs().max() <= 8**-0.5
