"""The DQN family's TD targets, checked against the formulas by hand on a fixed batch: Q-learning's
max, Double DQN's decoupled selection, and advantage learning's gap term (`--action-gap`), with and
without an action mask."""

import importlib

import pytest
import torch

from common.storage import Batch


def _batch(n=6, obs_dim=3, n_actions=3, mask=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs, next_obs = torch.randn(n, obs_dim, generator=g), torch.randn(n, obs_dim, generator=g)
    actions = torch.randint(0, n_actions, (n,), generator=g).float()
    # observation groups (common.wrappers.ObsGroups)
    obs, next_obs = {"policy": obs}, {"policy": next_obs}
    if mask:  # the last action is forbidden everywhere; the taken one never is
        actions = actions.clamp(max=n_actions - 2)
        allowed = torch.ones(n, n_actions, dtype=torch.bool)
        allowed[:, -1] = False
        obs["action_mask"], next_obs["action_mask"] = allowed, allowed
    return Batch(
        obs=obs,
        actions=actions,
        rewards=torch.randn(n, generator=g),
        next_obs=next_obs,
        terminated=torch.tensor([0.0, 1.0] * (n // 2)),
        indices=torch.arange(n),
        weights=torch.ones(n),
    )


@pytest.mark.parametrize("mask", [False, True])
@pytest.mark.parametrize("algo", ["dqn", "double_dqn", "d3qn"])
@pytest.mark.parametrize("alpha", [0.0, 0.9])
def test_td_target(algo, alpha, mask):
    module = importlib.import_module(f"algos.{algo}")
    torch.manual_seed(1)
    n_actions = 3
    q_net = module.QNetwork(3, n_actions, hidden=(8,))
    target_net = module.QNetwork(3, n_actions, hidden=(8,))
    b, gamma = _batch(mask=mask), 0.9
    loss, q_mean, td_abs = module.td_loss(q_net, target_net, gamma, alpha, b)

    with torch.no_grad():
        q_all, qt_next, qt_here = q_net(b["obs"]), target_net(b["next_obs"]), target_net(b["obs"])
        if mask:  # the forbidden action is never the max nor the argmax
            qt_next, qt_here = qt_next[:, :-1], qt_here[:, :-1]
        a = b["actions"].long()
        if algo == "dqn":
            next_q = qt_next.max(-1).values
        else:
            picker = q_net(b["next_obs"])[:, : qt_next.shape[1]]
            next_q = qt_next.gather(-1, picker.argmax(-1, keepdim=True)).squeeze(-1)
        gap = qt_here.max(-1).values - qt_here.gather(-1, a[:, None]).squeeze(-1)
        target = b["rewards"] + gamma * (1 - b["terminated"]) * next_q - alpha * gap
        q = q_all.gather(-1, a[:, None]).squeeze(-1)
    assert (gap >= 0).all() and (gap > 1e-4).any()  # the batch exercises the gap term
    torch.testing.assert_close(td_abs, (q - target).abs(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(loss, (q - target).square().mean(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(q_mean, q.mean())


@pytest.mark.parametrize("algo", ["dqn", "double_dqn", "d3qn"])
def test_action_gap_out_of_range(algo):
    module = importlib.import_module(f"algos.{algo}")
    with pytest.raises(ValueError, match="--action-gap must be in"):
        module.main(
            module.Args(action_gap=1.0, total_steps=2_000, quiet=True, save_every=0, eval_every=0)
        )
