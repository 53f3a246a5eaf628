"""The adaptive-KL learning-rate schedule (`--lr-schedule adaptive --desired-kl`,
`common/optim.py`): rsl_rl's rule exactly, in every PPO file that has minibatch epochs, on the
device (tests/test_host_sync.py counts the syncs), resumed exactly with the rate it had; (slow) it
learns."""

from __future__ import annotations

import importlib

import pytest
import torch

from common.optim import LR_MAX, LR_MIN, adapt_lr
from conftest import SMALL_RUNS, checkpoint_params, run_with_snapshots

# a2c: one step per rollout, its KL before it is always 0
FILES = ["ppo_vec", "ppo_h", "ppo_rnn", "ppo_podracer"]


@pytest.mark.parametrize(
    "kl,lr,want",
    [
        (0.05, 1e-3, 1e-3 / 1.5),  # KL > 2 x 0.01: down
        (0.021, 1e-3, 1e-3 / 1.5),
        (0.02, 1e-3, 1e-3),  # the band [desired / 2, 2 x desired] leaves it
        (0.01, 1e-3, 1e-3),
        (0.005, 1e-3, 1e-3),
        (0.004, 1e-3, 1.5e-3),  # KL < desired / 2: up
        (0.0, 1e-3, 1.5e-3),
        (0.004, 9e-3, LR_MAX),  # bounds
        (0.05, 1.2e-5, LR_MIN),
    ],
)
def test_rule_is_rsl_rl_s(kl, lr, want):
    rate = torch.tensor(lr, dtype=torch.float64)
    adapt_lr(rate, torch.tensor(kl), desired_kl=0.01)
    assert rate.item() == pytest.approx(want, rel=1e-12)


def _small(name: str, **kw) -> dict:
    return dict(
        SMALL_RUNS[name], lr_schedule="adaptive", desired_kl=0.002, learning_rate=1e-3, **kw
    )


@pytest.mark.parametrize("name", FILES)
def test_the_rate_moves_and_resumes_exactly(name, tmp_path, monkeypatch):
    module = importlib.import_module(f"algos.{name}")
    full, snaps = run_with_snapshots(
        module, module.Args(out_dir=str(tmp_path / "a"), **_small(name)), monkeypatch
    )
    final = torch.load(full["checkpoint"], weights_only=False)
    mid = torch.load(snaps[0], weights_only=False)
    rate = lambda ck: float(ck["optimizer"]["param_groups"][0]["lr"])  # noqa: E731
    assert rate(mid) != 1e-3 and rate(final) != rate(mid), "the adaptive rate never moved"
    resumed = module.main(
        module.Args(resume=str(snaps[0]), **{**_small(name), "out_dir": str(tmp_path / "b")})
    )
    again = torch.load(resumed["checkpoint"], weights_only=False)
    assert rate(again) == rate(final)
    a, b = checkpoint_params(full["checkpoint"]), checkpoint_params(resumed["checkpoint"])
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_linear_schedule_is_unchanged_by_the_new_flags(tmp_path):
    """--lr-schedule linear (the default) with --anneal-lr anneals as before; --desired-kl is not
    read."""
    from algos import ppo_vec

    kw = dict(SMALL_RUNS["ppo_vec"], save_every=0)
    a = ppo_vec.main(ppo_vec.Args(out_dir=str(tmp_path / "a"), **kw))
    b = ppo_vec.main(ppo_vec.Args(out_dir=str(tmp_path / "b"), desired_kl=0.5, **kw))
    pa, pb = checkpoint_params(a["checkpoint"]), checkpoint_params(b["checkpoint"])
    assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_bad_desired_kl_gets_one_line(tmp_path):
    from algos import ppo_vec

    with pytest.raises(ValueError, match="--desired-kl must be positive"):
        ppo_vec.main(
            ppo_vec.Args(out_dir=str(tmp_path), **{**_small("ppo_vec"), "desired_kl": 0.0})
        )
    assert not any(tmp_path.iterdir())
