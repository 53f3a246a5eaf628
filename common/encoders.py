"""The conv encoder an image-capable file puts in front of its MLP
(docs/usage.md#learning-from-pixels): networks are sized from `obs_input(space)`, which `layers`
turns, for a uint8 `(C, H, W)` image, into the Nature DQN (Mnih et al., 2015) or MinAtar (Young &
Tian, 2019) conv stack, each conv followed by ReLU (with `norm`, a LayerNorm over the channels
first, as PQN). The model scales the bytes to [0, 1] by the space's `high`, so stored and deployed
observations stay uint8.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn


def is_image(space: gym.Space) -> bool:
    """A uint8 `(C, H, W)` Box: an image observation."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


def obs_input(space: gym.Space):
    """What a network is sized from: a flat space's width, or an image space itself."""
    return space if is_image(space) else int(np.prod(space.shape))


def group_dims(space: gym.Space) -> tuple:
    """(policy input, critic input), each `obs_input` of its group; the critic's is 0 without a
    `critic` group (the critic then reads the policy's)."""
    from common.vec_env import group_spaces

    policy, critic = group_spaces(space)
    return obs_input(policy), obs_input(critic) if critic is not policy else 0


class ChannelNorm(nn.LayerNorm):
    """LayerNorm over the channels of each pixel of a `[B, C, H, W]` map."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ImageEncoder(nn.Module):
    """uint8 `[B, C, H, W]` -> float features `[B, out_dim]`."""

    def __init__(self, space: gym.spaces.Box, norm: bool = False):
        super().__init__()
        c, h, w = space.shape
        if min(h, w) >= 36:
            convs = [(32, 8, 4), (64, 4, 2), (64, 3, 1)]  # Nature DQN
        else:
            convs = [(16, 3, 1)]  # MinAtar
        layers, channels = [], c
        for out, k, stride in convs:
            layers.append(nn.Conv2d(channels, out, k, stride))
            if norm:
                layers.append(ChannelNorm(out))
            layers.append(nn.ReLU())
            channels = out
        self.convs = nn.Sequential(*layers, nn.Flatten())
        self.register_buffer("scale", torch.tensor(1.0 / float(np.max(space.high))))
        with torch.no_grad():
            self.out_dim = int(self.convs(torch.zeros(1, c, h, w)).shape[-1])

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """`[..., C, H, W]` -> `[..., out_dim]` (any leading dims); channels_last on CPU (oneDNN's
        faster path)."""
        lead = obs.shape[:-3]
        x = obs.reshape(-1, *obs.shape[-3:]).float() * self.scale
        if x.device.type == "cpu":
            x = x.contiguous(memory_format=torch.channels_last)
        return self.convs(x).view(*lead, -1)


def layers(obs, norm: bool = False) -> tuple[list[nn.Module], int]:
    """(layers to put first, the width after them) for `obs_input(space)`: none for a flat space,
    an `ImageEncoder` for an image."""
    if isinstance(obs, gym.spaces.Box):
        enc = ImageEncoder(obs, norm)
        return [enc], enc.out_dim
    return [], int(obs)
