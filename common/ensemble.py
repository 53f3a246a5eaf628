"""K MLPs as one batched module: weights stacked `[K, in, out]`, one `torch.baddbmm` per layer for
all members, so one optimizer, one target update and `torch.compile` see a single module. Twin
critics are K=2, REDQ's ensemble K=10, DDPG's critic K=1:

    q = EnsembleMLP(2, obs_dim + act_dim, (256, 256), 1)
    q_values = q(torch.cat([obs, act], -1)).squeeze(-1)       # [K, B]
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


class EnsembleLinear(nn.Module):
    """K independent affine maps: `[K, B, in] -> [K, B, out]` (or a shared `[B, in]` input)."""

    def __init__(self, k: int, in_features: int, out_features: int):
        super().__init__()
        self.k, self.in_features, self.out_features = k, in_features, out_features
        self.weight = nn.Parameter(torch.empty(k, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(k, 1, out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        # as torch.nn.Linear, per member
        bound = 1.0 / math.sqrt(self.in_features)
        nn.init.uniform_(self.weight, -bound, bound)
        nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor, members: torch.Tensor | slice | None = None) -> torch.Tensor:
        """Only `members`' maps (indices, or a slice: a view), `[len(members), B, out]`."""
        weight, bias = (
            (self.weight, self.bias)
            if members is None
            else (self.weight[members], self.bias[members])
        )
        if x.dim() == 2:  # shared input for every member (a view, no copy)
            x = x.expand(weight.shape[0], *x.shape)
        return torch.baddbmm(bias, x, weight)

    def extra_repr(self) -> str:
        return f"k={self.k}, in_features={self.in_features}, out_features={self.out_features}"


class EnsembleMLP(nn.Module):
    """K MLPs `in_dim -> hidden... -> out_dim`, batched: input `[B, in]` (shared) or
    `[K, B, in]`, output `[K, B, out]`."""

    def __init__(
        self, k: int, in_dim: int, hidden=(256, 256), out_dim: int = 1, activation=nn.ReLU
    ):
        super().__init__()
        self.k = k
        sizes = [in_dim, *hidden, out_dim]
        layers: list[nn.Module] = []
        for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
            layers.append(EnsembleLinear(k, a, b))
            if i < len(sizes) - 2:
                layers.append(activation())
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, members: torch.Tensor | slice | None = None) -> torch.Tensor:
        """All members, or only `members` (REDQ's target subset, TD3's first critic: the others
        cost nothing)."""
        if members is None:
            return self.net(x)
        for layer in self.net:
            x = layer(x, members) if isinstance(layer, EnsembleLinear) else layer(x)
        return x

    @classmethod
    def from_mlps(cls, mlps: list[nn.Sequential]) -> "EnsembleMLP":
        """One ensemble from K `nn.Sequential` MLPs of identical shape."""
        linears = [[m for m in mlp if isinstance(m, nn.Linear)] for mlp in mlps]
        sizes = [linears[0][0].in_features] + [lin.out_features for lin in linears[0]]
        act = next((type(m) for m in mlps[0] if not isinstance(m, nn.Linear)), nn.ReLU)
        ens = cls(len(mlps), sizes[0], tuple(sizes[1:-1]), sizes[-1], act)
        ens_linears = [m for m in ens.net if isinstance(m, EnsembleLinear)]
        with torch.no_grad():
            for layer_idx, el in enumerate(ens_linears):
                el.weight.copy_(torch.stack([lin[layer_idx].weight.T for lin in linears]))
                el.bias.copy_(torch.stack([lin[layer_idx].bias[None] for lin in linears]))
        return ens

    def member(self, i: int) -> nn.Sequential:
        """Member `i` as a plain `nn.Sequential` of `nn.Linear` layers (a copy)."""
        layers = []
        for m in self.net:
            if isinstance(m, EnsembleLinear):
                lin = nn.Linear(m.in_features, m.out_features)
                with torch.no_grad():
                    lin.weight.copy_(m.weight[i].T)
                    lin.bias.copy_(m.bias[i, 0])
                layers.append(lin)
            else:
                layers.append(type(m)())
        return nn.Sequential(*layers)
