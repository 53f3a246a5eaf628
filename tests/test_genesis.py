"""`GenesisGo2-v0` (envs/genesis_go2.py): Genesis's Go2 behind rsl_rl's interface and `FromRslRl`.

Genesis is not a project dependency (its pygel3d pins plotly < 6, skfolio needs plotly >= 6): these
tests run where `genesis` imports, e.g. in `bench/.venv-genesis`
(`bash benchmark.sh genesis --setup`, then
`bench/.venv-genesis/bin/python -m pytest tests/test_genesis.py`), and are skipped elsewhere, CI
included. The learning runs are `bash benchmark.sh genesis` (results in bench/results/genesis/).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("genesis", reason="Genesis is optional: bash benchmark.sh genesis --setup")

import envs  # noqa: E402
from envs.base import check_env  # noqa: E402

# a scene build compiles Genesis's kernels (about a minute once cached)
pytestmark = pytest.mark.slow


def test_go2_keeps_the_contract_stands_and_falls():
    env = envs.make("GenesisGo2-v0", num_envs=4, seed=1)
    check_env(env, 4, "cpu")
    assert env.single_observation_space["policy"].shape == (45,) and env.single_observation_space[
        "critic"
    ].shape == (48,)
    assert env.max_episode_steps == 1000 and env.single_action_space.shape == (12,)
    obs, _ = env.reset()
    # standing still: no fall, a small positive reward (upright, near the height)
    for _ in range(50):
        obs, reward, term, trunc, info = env.step(torch.zeros(4, 12))
        assert not term.any() and not trunc.any() and torch.isfinite(reward).all()
    assert (reward > 0).all()
    gen = torch.Generator().manual_seed(0)
    falls = 0
    # flailing at the action bounds knocks it over; a fall ends the episode, not a time-out
    for _ in range(300):
        obs, reward, term, trunc, info = env.step(2 * torch.sign(torch.randn(4, 12, generator=gen)))
        falls += int(term.sum())
        assert not trunc.any()
    assert falls > 0
    assert torch.equal(
        concat := info["final_obs"]["critic"][:, :45], info["final_obs"]["policy"]
    ), concat
