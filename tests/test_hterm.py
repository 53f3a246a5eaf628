"""The H-term's trajectory store and loss on hand-made trajectories whose values are computed by
hand."""

import pytest
import torch

from algos.ddpg_h import h_term_loss
from common.buffers import TrajectoryStore


def test_h_term_loss_by_hand():
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.5, -0.5]])
    mask = torch.tensor([[True, True, False], [True, True, True]])
    returns_norm = torch.tensor([2.0, -1.0])
    # window 0: H = -1 + 0.5 * -2 = -2 (third step masked);
    # window 1: H = -0.5 * (1 + 0.5 + 0.25) = -0.875
    # loss = -0.1 * mean(-2 * 2, -0.875 * -1) = -0.1 * (-4 + 0.875) / 2 = 0.15625
    assert h_term_loss(logp, mask, returns_norm, gamma=0.5, lam=0.1).item() == pytest.approx(
        0.15625
    )


@pytest.mark.parametrize("name", ["ppo_h", "td3_h", "sac_h"])
def test_every_h_file_has_the_same_loss(name):
    import importlib

    torch.manual_seed(0)
    logp, mask, ret = torch.randn(8, 5), torch.rand(8, 5) > 0.2, torch.randn(8)
    other = importlib.import_module(f"algos.{name}").h_term_loss
    assert torch.equal(other(logp, mask, ret, 0.9, 0.3), h_term_loss(logp, mask, ret, 0.9, 0.3))


def _fill(store, rewards, dones):
    """Two sub-envs; obs encodes (env, absolute step) so gathered windows can be checked."""
    for t, (r, d) in enumerate(zip(rewards, dones)):
        obs = torch.tensor([[0.0, t], [1.0, t]])
        store.add(obs, torch.tensor([10 * t, 10 * t + 1]), torch.tensor(r), torch.tensor(d))


def test_store_records_episodes_and_samples_windows():
    s = TrajectoryStore(
        num_envs=2, horizon=16, obs_shape=(2,), action_dtype=torch.long, max_episodes=8
    )
    # env 0: episodes [t0..t1] return 2, [t2..t4] return 0, [t5] return 5
    # env 1: one episode [t0..t3] return 4, then running
    rewards = [[1.0, 1.0], [1.0, 1.0], [0.0, 1.0], [0.0, 1.0], [0.0, 0.0], [5.0, 0.0]]
    dones = [
        [False, False],
        [True, False],
        [False, False],
        [False, True],
        [True, False],
        [True, False],
    ]
    _fill(s, rewards, dones)
    v = s.valid()
    assert v.sum().item() == 4
    table = sorted(
        zip(
            s.tab_env[:8][v].tolist(),
            s.tab_start[:8][v].tolist(),
            s.tab_len[:8][v].tolist(),
            s.tab_ret[:8][v].tolist(),
        )
    )
    assert table == [(0, 0, 2, 2.0), (0, 2, 3, 0.0), (0, 5, 1, 5.0), (1, 0, 4, 4.0)]

    g = torch.Generator().manual_seed(0)
    obs, act, mask, rn, ok = s.sample(512, k_step=2, drop_rate=0.25, generator=g)
    assert bool(ok)
    # drop_rate 1/4 of 4 episodes drops the worst (return 0): kept returns 2, 4, 5
    kept = torch.tensor([2.0, 4.0, 5.0])
    expected = {round(((r - kept.mean()) / kept.std(unbiased=False)).item(), 5) for r in kept}
    assert {round(x, 5) for x in rn.tolist()} == expected
    assert all(abs(x - (0 - kept.mean()) / kept.std(unbiased=False)) > 1e-3 for x in rn.tolist())
    # windows are consecutive steps of one sub-env, actions match the obs they were taken in
    assert torch.equal(obs[:, 1, 1][mask[:, 1]], obs[:, 0, 1][mask[:, 1]] + 1)
    assert torch.equal(obs[:, :, 0], obs[:, :1, 0].expand(-1, 2))
    assert torch.equal(act, (10 * obs[..., 1] + obs[..., 0]).long())
    # the 1-step episode (return 5) gives windows with only their first step valid
    best = rn == max(rn.tolist())
    assert best.any() and mask[best, 0].all() and not mask[best, 1].any()


def test_store_forgets_overwritten_episodes_and_handles_empty():
    s = TrajectoryStore(num_envs=1, horizon=4, obs_shape=(1,), max_episodes=4)
    obs, act, mask, rn, ok = s.sample(8, k_step=3)
    assert (
        not bool(ok)
        and not mask.any()
        and h_term_loss(torch.zeros(8, 3), mask, rn, 0.9, 1.0).item() == 0.0
    )
    for t in range(3):  # one episode of 3 steps
        s.add(torch.tensor([[float(t)]]), torch.zeros(1), torch.ones(1), torch.tensor([t == 2]))
    assert s.valid().sum().item() == 1
    for t in range(2):  # two more steps overwrite the episode's first step in the 4-step ring
        s.add(torch.tensor([[9.0]]), torch.zeros(1), torch.ones(1), torch.tensor([False]))
    assert s.valid().sum().item() == 0


class _Built(Exception):
    pass


@pytest.mark.parametrize("name", ["ppo_h", "ddpg_h", "td3_h", "sac_h"])
@pytest.mark.parametrize(
    "env_id, flag, horizon",
    [("BipedalWalker-v3", 0, 1600), ("Pendulum-v1", 0, 1024), ("BipedalWalker-v3", 64, 64)],
)
def test_store_holds_a_whole_episode_by_default(name, env_id, flag, horizon, monkeypatch, tmp_path):
    """An episode longer than the store is never ranked: by default the store holds the env's time
    limit (BipedalWalker's 1,600 steps), at least 1,024; an explicit --h-term-horizon is kept."""
    import importlib

    module = importlib.import_module(f"algos.{name}")
    built = []

    def store(num_envs, h, *rest):
        built.append(h)
        raise _Built  # the store's size is all this test needs: stop before training

    monkeypatch.setattr(module, "TrajectoryStore", store)
    args = module.Args(env=env_id, num_envs=2, h_term_horizon=flag, out_dir=str(tmp_path))
    with pytest.raises(_Built):
        module.main(args)
    assert built == [horizon]
