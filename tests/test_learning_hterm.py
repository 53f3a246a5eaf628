"""Each H-term variant reaches its parent's threshold on its parent's test task, with the parent's
test settings (tests/conftest.py and tests/test_learning_offpolicy.py); and, on short runs, the H
step really moves the actor (h_term_lambda > 0 ends elsewhere than h_term_lambda = 0)."""

import importlib
import json
from pathlib import Path

import pytest
import torch

from conftest import pendulum_row
from conftest import PPO_CARTPOLE, PPO_PENDULUM, SMALL_RUNS

CASES = {
    "ppo_h-cartpole": ("ppo_h", PPO_CARTPOLE, 475),
    "ppo_h-pendulum": ("ppo_h", PPO_PENDULUM, -300),
    # each file's Pendulum-v1 row, 8k steps (as the parents')
    "ddpg_h": ("ddpg_h", pendulum_row("ddpg_h"), -250),
    "td3_h": ("td3_h", pendulum_row("td3_h"), -250),
    "sac_h": ("sac_h", pendulum_row("sac_h"), -250),
}
H_FILES = ["ppo_h", "ddpg_h", "td3_h", "sac_h"]


def _metrics(result) -> list[dict]:
    return [
        json.loads(line) for line in open(Path(result["run_dir"]) / "metrics.jsonl") if line.strip()
    ]


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_h_variant_learns(case, tmp_path):
    name, kw, threshold = CASES[case]
    module = importlib.import_module(f"algos.{name}")
    result = module.main(module.Args(out_dir=str(tmp_path), **kw))
    print(case, result)
    assert result["eval_return"] >= threshold
    share = [r["h_term_time_share"] for r in _metrics(result)]
    assert 0 < max(share) < 1  # the H-term ran, and its cost is reported


def _actor(ckpt_path) -> dict:
    """The actor's parameters (ppo_h keeps actor and critic in one "model"; the others save
    "actor")."""
    ck = torch.load(ckpt_path, weights_only=False)
    if "actor" in ck:
        return ck["actor"]
    actor = {k: v for k, v in ck["model"].items() if "critic" not in k}
    assert actor and len(actor) < len(ck["model"]), sorted(ck["model"])
    return actor


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", H_FILES)
def test_h_step_moves_the_actor(name, tmp_path, monkeypatch):
    """Three short runs on one seed (the H step every iteration, with a non-zero loss once episodes
    have finished: 6 of them for ppo_h, 50 for the others): lambda > 0; lambda > 0 with the H loss
    multiplied by 0 (an H step that does nothing: same code path, same random draws, zero gradient);
    lambda = 0. The H loss enters only through its gradient, so the do-nothing run equals the
    lambda = 0 run bit for bit, and the lambda > 0 run must end with another actor: this fails if
    the H step's gradient never reaches the actor."""
    module = importlib.import_module(f"algos.{name}")
    kw = dict(SMALL_RUNS[name], save_every=0, seed=1)
    original = module.h_term_loss

    def run(tag, lam, zero_grad=False):
        losses = []

        def recording(*a, **k):
            loss = original(*a, **k)
            losses.append(loss.detach().clone())
            return loss * 0.0 if zero_grad else loss

        monkeypatch.setattr(module, "h_term_loss", recording)
        result = module.main(
            module.Args(out_dir=str(tmp_path / tag), **{**kw, "h_term_lambda": lam})
        )
        monkeypatch.setattr(module, "h_term_loss", original)
        return result, torch.stack(losses)

    lam = 0.1
    on, on_losses = run("on", lam)
    dead, dead_losses = run("dead", lam, zero_grad=True)
    off, off_losses = run("off", 0.0)
    # the H step ran, with a non-zero loss, and its cost is logged
    assert (on_losses != 0).sum() >= 5, on_losses
    assert max(r["h_term_time_share"] for r in _metrics(on)) > 0
    # lambda = 0: the same number of H steps, every loss exactly zero; and it changes nothing that a
    # do-nothing H step would not: the two runs are identical
    assert len(off_losses) == len(on_losses) and (off_losses == 0).all()
    # the runs are identical up to the first H step with a gradient
    first = int((on_losses != 0).nonzero()[0])
    assert torch.equal(dead_losses[: first + 1], on_losses[: first + 1])
    assert _same(_actor(dead["checkpoint"]), _actor(off["checkpoint"]))
    # lambda > 0: the H step moved the actor
    assert not _same(_actor(on["checkpoint"]), _actor(off["checkpoint"])), (
        "the H step left the actor unchanged"
    )


def test_sac_h_log_prob_matches_sampling_density():
    from algos import sac_h

    torch.manual_seed(0)
    actor = sac_h.Actor(3, 2, (16, 16))
    obs = {"policy": torch.randn(64, 3)}  # named groups, as the env gives
    action, logp = actor.sample(obs)
    torch.testing.assert_close(actor.log_prob(obs, action), logp, rtol=1e-3, atol=1e-3)
