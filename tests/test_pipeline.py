"""Pipeline parallelism (`--pipeline`, common/pipeline.py) in SAC and TD3: the pipelined learners
reach the off-policy learning tests' threshold on Pendulum-v1 with their budgets, log a positive
explore/learn overlap, give the same result for the same seed (the explorer has its own generator
and the segments hand over in lockstep), do as many updates as without the pipeline, and resume
exactly from a mid-run checkpoint."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from algos import sac_podracer as sac, td3_podracer as td3
from conftest import pendulum_row

# as in tests/test_learning_offpolicy.py (the file's Pendulum-v1 row, 8k steps, threshold -250),
# with the pipeline on: seed 1 evaluated -140 at 4k, 6k and 8k steps (11 s alone; the 128x128
# setting before it took ~55 s in the suite). One pipelined learner is trained to the threshold: the
# pipeline (common/pipeline.py and the explore/learn closures) is the same code in td3_podracer.py,
# whose pipelined runs are covered by the same-seed, update-count and SIGKILL-resume tests and, with
# the pipeline off, by tests/test_podracer.py against td3.py (which learns).
LEARN = {"sac": (sac, pendulum_row("sac_podracer", pipeline=True))}
# short runs: 8 vectorized steps (16 env steps) per segment, a checkpoint every 5 segments
SMALL = dict(
    env="Pendulum-v1",
    num_envs=2,
    total_steps=2 * 120,
    learning_starts=60,
    batch_size=32,
    hidden=(32, 32),
    eval_every=0,
    save_every=2 * 40,
    eval_episodes=2,
    quiet=True,
    pipeline=True,
    pipeline_segment=8,
)
SHORT = {
    "sac": (sac, SMALL),
    "sac-norm-obs": (sac, {**SMALL, "norm_obs": True}),
    "td3-per": (td3, {**SMALL, "per": True}),
}


def _params(ckpt_path) -> dict:
    ck = torch.load(ckpt_path, weights_only=False)
    return {
        f"{net}.{k}": v for net in ("actor", "critic", "critic_target") for k, v in ck[net].items()
    }


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(LEARN))
def test_pipeline_learns_pendulum(name, tmp_path):
    module, kw = LEARN[name]
    result = module.main(module.Args(out_dir=str(tmp_path), **kw))
    print(name, result)
    assert result["eval_return"] >= -250, (
        f"{name} --pipeline: eval {result['eval_return']:.1f} < -250"
    )
    rows = [json.loads(line) for line in open(Path(result["run_dir"]) / "metrics.jsonl")]
    ticks = [r for r in rows if "pipeline_overlap" in r]
    assert len(ticks) >= 2, rows
    for r in ticks:  # exploring and learning really ran at the same time, at every logging tick
        assert 0 < r["pipeline_overlap"] <= min(r["explore_busy"], r["learn_busy"]) + 1e-9, r
        assert 0 < r["explore_busy"] <= 1 + 1e-9 and 0 < r["learn_busy"] <= 1 + 1e-9, r


@pytest.mark.parametrize(
    "name", [n if n == "sac" else pytest.param(n, marks=pytest.mark.slow) for n in SHORT]
)
def test_pipeline_same_seed_same_result(name, tmp_path):
    module, kw = SHORT[name]
    r1 = module.main(module.Args(out_dir=str(tmp_path / "a"), **kw))
    r2 = module.main(module.Args(out_dir=str(tmp_path / "b"), **kw))
    assert _same(_params(r1["checkpoint"]), _params(r2["checkpoint"]))
    assert r1["eval_return"] == r2["eval_return"]
    r3 = module.main(module.Args(out_dir=str(tmp_path / "c"), **{**kw, "seed": 7}))
    assert not _same(_params(r1["checkpoint"]), _params(r3["checkpoint"]))
    # the pipeline changes when updates happen, not how many
    plain = module.main(module.Args(out_dir=str(tmp_path / "d"), **{**kw, "pipeline": False}))
    updates = [torch.load(r["checkpoint"], weights_only=False)["updates"] for r in (r1, plain)]
    assert updates[0] == updates[1] > 0
    assert not _same(_params(r1["checkpoint"]), _params(plain["checkpoint"]))


# exact resume: tests/test_faults.py's SIGKILL test covers the files; this, the pipeline's state
@pytest.mark.slow
@pytest.mark.parametrize("name", list(SHORT))
def test_pipeline_resume_continues_exactly(name, tmp_path, monkeypatch):
    import common.run

    module, kw = SHORT[name]
    # the run shell writes a migrated file's checkpoints
    owner = common.run if hasattr(module, "Run") else module
    snapshots, original = [], owner.save_checkpoint

    def keep(path, payload):  # keep a copy of every checkpoint (they overwrite each other)
        out = original(path, payload)
        snapshots.append(shutil.copy(path, path.parent / f"snap{len(snapshots)}.pt"))
        return out

    monkeypatch.setattr(owner, "save_checkpoint", keep)
    full = module.main(module.Args(out_dir=str(tmp_path / "full"), **kw))
    monkeypatch.setattr(owner, "save_checkpoint", original)
    assert len(snapshots) >= 2
    mid = torch.load(snapshots[0], weights_only=False)
    # a segment's updates are owed
    assert mid["explore_rng"] is not None and mid["learned"] < mid["iteration"]
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copy(snapshots[0], resumed_dir / "checkpoint.pt")
    resumed = module.main(
        module.Args(
            out_dir=str(tmp_path / "unused"), resume=str(resumed_dir / "checkpoint.pt"), **kw
        )
    )
    assert resumed["steps"] == full["steps"]
    assert _same(_params(full["checkpoint"]), _params(resumed["checkpoint"]))
    assert resumed["eval_return"] == full["eval_return"]


def test_pipeline_bad_segment_is_refused(tmp_path):
    with pytest.raises(ValueError, match="--pipeline-segment must be positive"):
        sac.main(sac.Args(out_dir=str(tmp_path), **{**SMALL, "pipeline_segment": 0}))
    assert not any(tmp_path.iterdir())
