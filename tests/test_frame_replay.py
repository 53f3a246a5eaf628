"""Stacked camera frames in the replay buffer (`common.buffers.FrameStore`): every sampled
observation and next observation equals what was added, through resets, a full ring and a
checkpoint, at about one stored frame per transition; data that is not a frame stack is refused
rather than sampled wrong."""

import pytest
import torch

from common.buffers import ReplayBuffer
from common.errors import UserError
from common.storage import Batch as Named


class FrameStacks:
    """N sub-envs of 4-frame stacks of random 36x36 frames, each resetting (a fresh stack of 4 new
    frames) with probability `reset_p` a step; a reset step's next observation is the episode's
    last stack (the final observation), the following step starts from the fresh one."""

    def __init__(self, n: int, reset_p: float, seed: int = 0):
        self.g = torch.Generator().manual_seed(seed)
        self.n, self.reset_p = n, reset_p
        self.obs = self._frames(n, 4)

    def _frames(self, n, k):
        return torch.randint(0, 256, (n, k, 36, 36), generator=self.g, dtype=torch.uint8)

    def step(self):
        """(obs, next_obs) of one vectorized step."""
        nxt = torch.cat([self.obs[:, 1:], self._frames(self.n, 1)], 1)
        reset = torch.rand(self.n, generator=self.g) < self.reset_p
        obs, self.obs = (
            self.obs,
            torch.where(reset[:, None, None, None], self._frames(self.n, 4), nxt),
        )
        return obs, nxt


def _fill(rb, plain, stream, steps):
    for _ in range(steps):
        obs, nxt = stream.step()
        a, r, t = (
            torch.zeros(stream.n, dtype=torch.long),
            torch.zeros(stream.n),
            torch.zeros(stream.n),
        )
        rb.add(Named(policy=obs), a, r, Named(policy=nxt), t)
        plain.add(obs, a, r, nxt, t)


def _same(rb, plain):
    idx = torch.arange(len(plain))
    got, want = rb.get(idx), plain.get(idx)
    assert torch.equal(got["obs"]["policy"], want["obs"]) and torch.equal(
        got["next_obs"]["policy"], want["next_obs"]
    )


def test_stacked_frames_are_stored_once_and_come_back_exact():
    n, cap = 4, 400
    example = Named(policy=torch.zeros(n, 4, 36, 36, dtype=torch.uint8))
    actions = torch.zeros(n, dtype=torch.long)
    rb = ReplayBuffer(cap, example, actions)
    plain = ReplayBuffer(cap, example["policy"], actions)
    assert rb.frames is not None and plain.frames is None
    stream = FrameStacks(n, reset_p=0.01)
    _fill(rb, plain, stream, 60)  # not yet full
    _same(rb, plain)
    _fill(rb, plain, stream, 400)  # the ring wrapped several times
    _same(rb, plain)
    frames_per_transition = int(rb.frames.count) / (460 * n)
    assert frames_per_transition < 1.1, frames_per_transition  # plain: 8 frames a transition
    for _ in range(2048):
        rb.sample(32)  # the overflow check passes
    # a checkpoint brings back the same frames and ids; adding goes on from there
    again = ReplayBuffer(cap, example, actions)
    again.load_state_dict(rb.state_dict())
    _same(again, plain)
    twin = FrameStacks(n, 0.01, seed=5)
    twin_plain = ReplayBuffer(cap, example["policy"], actions)
    twin_plain.load_state_dict(plain.state_dict())
    _fill(again, twin_plain, twin, 50)
    _same(again, twin_plain)


def test_data_that_is_not_a_frame_stack_is_refused_not_sampled_wrong():
    n = 4
    example = Named(policy=torch.zeros(n, 4, 36, 36, dtype=torch.uint8))
    rb = ReplayBuffer(64, example, torch.zeros(n, dtype=torch.long))
    g = torch.Generator().manual_seed(0)
    for _ in range(100):  # every observation new: 8 frames a transition, the ring overflows
        obs, nxt = (
            torch.randint(0, 256, (n, 4, 36, 36), generator=g, dtype=torch.uint8) for _ in "ab"
        )
        z = torch.zeros(n)
        rb.add(Named(policy=obs), z.long(), z, Named(policy=nxt), z)
    with pytest.raises(UserError, match="frame store"):
        for _ in range(1024):
            rb.sample(8)


def test_small_images_and_flat_observations_are_stored_whole():
    for shape in [(4, 10, 10), (8,)]:  # MinAtar's planes are channels, not frames
        rb = ReplayBuffer(
            16, Named(policy=torch.zeros(2, *shape, dtype=torch.uint8)), torch.zeros(2)
        )
        assert rb.frames is None
