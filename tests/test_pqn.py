"""PQN (`algos/pqn.py`): the Q(lambda) returns are what the formula says; (slow) it learns
CartPole-v1 and Acrobot-v1 with its defaults."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from algos import pqn


def test_q_lambda_returns():
    r = torch.tensor([[1.0], [2.0], [3.0]])
    q = torch.tensor([[10.0], [20.0], [30.0]])  # max_a Q(s_t+1, a)
    zero = torch.zeros(3, 1)
    g, lam = 0.9, 0.5
    # lambda 0: one-step targets
    torch.testing.assert_close(pqn.q_lambda_returns(r, zero, zero, q, g, 0.0), r + g * q)
    # lambda 1, no episode end: the discounted rewards of the rollout, then the last bootstrap
    full = pqn.q_lambda_returns(r, zero, zero, q, g, 1.0)
    assert full[0].item() == pytest.approx(1 + g * 2 + g * g * 3 + g**3 * 30)
    # the recursion by hand
    g2 = 3 + g * 30
    g1 = 2 + g * ((1 - lam) * 20 + lam * g2)
    g0 = 1 + g * ((1 - lam) * 10 + lam * g1)
    torch.testing.assert_close(
        pqn.q_lambda_returns(r, zero, zero, q, g, lam), torch.tensor([[g0], [g1], [g2]])
    )
    # an episode that ended at step 1: truncated bootstraps from its final observation alone,
    # terminated from nothing
    done = torch.tensor([[0.0], [1.0], [0.0]])
    trunc = pqn.q_lambda_returns(r, zero, done, q, g, lam)
    assert trunc[1].item() == pytest.approx(2 + g * 20)
    term = pqn.q_lambda_returns(r, done, done, q, g, lam)
    assert term[1].item() == pytest.approx(2.0)
    assert term[0].item() == pytest.approx(1 + g * ((1 - lam) * 10 + lam * 2.0))


def test_q_network_has_layer_norm_and_no_target():
    net = pqn.QNetwork(4, 2, (32, 32))
    assert sum(isinstance(m, torch.nn.LayerNorm) for m in net.modules()) == 2
    assert (
        "target_every" not in pqn.Args.__dataclass_fields__
        and "buffer_size" not in pqn.Args.__dataclass_fields__
    )


@pytest.mark.slow
@pytest.mark.parametrize("env,threshold", [("CartPole-v1", 475), ("Acrobot-v1", -100)])
def test_pqn_learns_with_its_defaults(env, threshold, tmp_path):
    """The task's defaults (CartPole-v1: its TASK_DEFAULTS row), 200k steps, seed 1 (measured:
    Acrobot -74, -89, -89 on seeds 1-3; CartPole with the row >= 475 on seed 1, held-out sweep seeds
    1-5 reach 475 by 10k-53k steps)."""
    out = pqn.main(
        replace(
            pqn.default_args(env),
            seed=1,
            eval_every=0,
            save_every=0,
            eval_episodes=20,
            quiet=True,
            out_dir=str(tmp_path),
        )
    )
    assert out["eval_return"] >= threshold, out["eval_return"]
