"""Determinism (same seed, same result) and exact resume from a mid-run checkpoint, for both
algorithm files, on short CPU runs; plus the algorithm files' own bad-input errors."""

import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from algos import a2c, d3qn, ddpg, ddpg_h, double_dqn, dqn, modsac, ppo_h, ppo_vec, redq, sac, sac_h, td3, td3_h
from conftest import ROOT

_DQN = dict(env="CartPole-v1", num_envs=4, total_steps=4 * 150, learning_starts=100, batch_size=32,
            eval_every=0, save_every=4 * 50, eval_episodes=2, quiet=True)
_AC = dict(env="Pendulum-v1", num_envs=2, total_steps=2 * 120, learning_starts=60, batch_size=32, hidden=(32, 32),
           eval_every=0, save_every=2 * 40, eval_episodes=2, quiet=True)
_AC_H = {**_AC, "total_steps": 2 * 450, "save_every": 2 * 150, "h_term_update_gap": 1, "h_term_batch": 16}
SMALL = {
    ppo_vec: dict(env="CartPole-v1", num_envs=16, num_steps=16, num_minibatches=4, total_steps=16 * 16 * 6,
                  eval_every=0, save_every=16 * 16 * 2, eval_episodes=2, quiet=True),
    a2c: dict(env="Pendulum-v1", num_envs=8, num_steps=5, total_steps=8 * 5 * 6, eval_every=0, save_every=8 * 5 * 2,
              eval_episodes=2, quiet=True, norm_obs=True),
    dqn: _DQN, double_dqn: _DQN, d3qn: {**_DQN, "per": True},
    ddpg: _AC, td3: {**_AC, "per": True}, sac: _AC, modsac: {**_AC, "mod_period": 8}, redq: {**_AC, "utd": 2},
    # H-term variants: long enough for several finished episodes, so the store matters on resume
    ppo_h: dict(env="CartPole-v1", num_envs=16, num_steps=16, num_minibatches=4, total_steps=16 * 16 * 6,
                eval_every=0, save_every=16 * 16 * 2, eval_episodes=2, quiet=True, h_term_batch=16),
    ddpg_h: {**_AC_H}, td3_h: {**_AC_H}, sac_h: {**_AC_H},
}
ALL = list(SMALL)
IDS = [m.ALGO for m in ALL]
PENDULUM = dict(env="Pendulum-v1", num_envs=8, num_steps=8, num_minibatches=2, total_steps=8 * 8 * 6,
                eval_every=0, save_every=8 * 8 * 2, eval_episodes=2, quiet=True, norm_obs=True, norm_reward=True)

# batched MuJoCo (CPU batch backend): the simulator state travels in the checkpoint too
HOPPER = dict(PENDULUM, env="Hopper-v5", mujoco_backend="batch", hidden=(32, 32))
HOPPER_SAC = dict(_AC, env="Hopper-v5", mujoco_backend="batch")


def _params(ckpt_path):
    ck = torch.load(ckpt_path, weights_only=False)
    return ck["model"] if "model" in ck else {**{f"actor.{k}": v for k, v in ck["actor"].items()},
                                             **{f"critic.{k}": v for k, v in ck["critic"].items()}}


def _run_with_snapshots(module, args, monkeypatch):
    """Run `module.main(args)`, keeping a copy of every checkpoint it writes (they overwrite each other)."""
    snapshots = []
    original = module.save_checkpoint

    def keep(path, payload):
        out = original(path, payload)
        snap = path.parent / f"snap{len(snapshots)}.pt"
        shutil.copy(path, snap)
        snapshots.append(snap)
        return out

    monkeypatch.setattr(module, "save_checkpoint", keep)
    result = module.main(args)
    monkeypatch.setattr(module, "save_checkpoint", original)
    return result, snapshots


@pytest.mark.parametrize("module,kw", [(m, SMALL[m]) for m in ALL] + [(ppo_vec, PENDULUM), (ppo_vec, HOPPER),
                                                                    (sac, HOPPER_SAC)],
                         ids=IDS + ["ppo_vec-pendulum-normalized", "ppo_vec-hopper", "sac-hopper"])
def test_resume_continues_exactly(module, kw, tmp_path, monkeypatch):
    full, snaps = _run_with_snapshots(module, module.Args(out_dir=str(tmp_path / "full"), **kw), monkeypatch)
    assert len(snaps) >= 2
    # "interrupt" after the first periodic checkpoint: resume from a copy of it in a new directory
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copy(snaps[0], resumed_dir / "checkpoint.pt")
    resumed = module.main(module.Args(out_dir=str(tmp_path / "unused"), resume=str(resumed_dir / "checkpoint.pt"), **kw))
    assert resumed["steps"] == full["steps"]
    a, b = _params(full["checkpoint"]), _params(resumed["checkpoint"])
    for k in a:
        assert torch.equal(a[k], b[k]), f"parameter {k} differs after resume"
    assert resumed["eval_return"] == full["eval_return"]


@pytest.mark.parametrize("module", ALL, ids=IDS)
def test_same_seed_same_result(module, tmp_path):
    kw = SMALL[module]
    r1 = module.main(module.Args(out_dir=str(tmp_path / "a"), **kw))
    r2 = module.main(module.Args(out_dir=str(tmp_path / "b"), **kw))
    p1, p2 = _params(r1["checkpoint"]), _params(r2["checkpoint"])
    assert all(torch.equal(p1[k], p2[k]) for k in p1)
    r3 = module.main(module.Args(out_dir=str(tmp_path / "c"), **{**kw, "seed": 7}))
    p3 = _params(r3["checkpoint"])
    assert not all(torch.equal(p1[k], p3[k]) for k in p1)


def test_resume_refuses_foreign_checkpoint(tmp_path):
    r = dqn.main(dqn.Args(out_dir=str(tmp_path), **SMALL[dqn]))
    with pytest.raises(ValueError, match="written by algos/dqn.py, not algos/ppo_vec.py"):
        ppo_vec.main(ppo_vec.Args(resume=r["checkpoint"], **SMALL[ppo_vec]))
    with pytest.raises(ValueError, match="trained on 'CartPole-v1', not 'Acrobot-v1'"):
        dqn.main(dqn.Args(resume=r["checkpoint"], **{**SMALL[dqn], "env": "Acrobot-v1"}))


@pytest.mark.parametrize("module", ALL, ids=IDS)
def test_action_space_mismatch_is_refused(module, tmp_path):
    if module in (ppo_vec, a2c, ppo_h):
        pytest.skip(f"{module.ALGO} handles both kinds of action space")
    discrete = SMALL[module]["env"] == "CartPole-v1"
    other = "Pendulum-v1" if discrete else "CartPole-v1"
    kw = {**SMALL[module], "env": other, "out_dir": str(tmp_path)}
    with pytest.raises(ValueError, match="Discrete action space" if discrete else "continuous \\(Box\\) action space"):
        module.main(module.Args(**kw))
    assert not any(tmp_path.iterdir())


def test_algorithm_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="dqn needs a Discrete action space"):
        dqn.main(dqn.Args(out_dir=str(tmp_path), env="Pendulum-v1", quiet=True))
    with pytest.raises(ValueError, match="--num-min 3 must be between 1 and --num-critics 2"):
        redq.main(redq.Args(out_dir=str(tmp_path), num_critics=2, num_min=3, quiet=True))
    with pytest.raises(ValueError, match="not divisible by --num-minibatches 7"):
        ppo_vec.main(ppo_vec.Args(out_dir=str(tmp_path), num_envs=16, num_steps=16, num_minibatches=7, quiet=True))
    with pytest.raises(ValueError, match="unknown env id"):
        ppo_vec.main(ppo_vec.Args(out_dir=str(tmp_path), env="CartPoel-v1", quiet=True))
    with pytest.raises(ValueError, match="--learning-starts"):
        dqn.main(dqn.Args(out_dir=str(tmp_path), total_steps=1000, learning_starts=5000, quiet=True))
    assert not any(tmp_path.iterdir()), "a refused run must not leave a run directory behind"


@pytest.mark.parametrize("module", ALL, ids=IDS)
def test_cli_help(module):
    out = subprocess.run([sys.executable, f"algos/{module.ALGO}.py", "--help"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    for flag in ("--env", "--num-envs", "--seed", "--device", "--total-steps", "--resume", "--compile", "--track"):
        assert flag in out.stdout
    assert module.__doc__.splitlines()[0].split()[0] in out.stdout  # the docstring heads the help


def test_cli_wrong_flag():
    bad = subprocess.run([sys.executable, "algos/dqn.py", "--num-env", "4"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "--num-envs" in bad.stdout + bad.stderr  # tyro suggests the right flag


def test_resume_takes_saved_settings_and_refuses_changed_ones(tmp_path, monkeypatch):
    kw = SMALL[ppo_vec]
    full, snaps = _run_with_snapshots(ppo_vec, ppo_vec.Args(out_dir=str(tmp_path / "full"), **kw), monkeypatch)
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copy(snaps[0], resumed_dir / "checkpoint.pt")
    ck = str(resumed_dir / "checkpoint.pt")
    with pytest.raises(ValueError, match="trained with --num-envs 16, not 32: a resumed run keeps its settings"):
        ppo_vec.main(ppo_vec.Args(resume=ck, num_envs=32, quiet=True))
    # only --resume (and flags that may change): every other setting comes from the checkpoint
    resumed = ppo_vec.main(ppo_vec.Args(resume=ck, quiet=True, eval_episodes=2, eval_every=0, save_every=0,
                                        total_steps=kw["total_steps"]))
    a, b = _params(full["checkpoint"]), _params(resumed["checkpoint"])
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_mujoco_defaults_follow_env_on_the_command_line():
    assert ppo_vec.default_args("Ant").num_envs == 4096 and ppo_vec.default_args("Ant").norm_obs
    assert ppo_vec.default_args("CartPole-v1") == ppo_vec.Args()
    out = subprocess.run([sys.executable, "algos/ppo_vec.py", "--env", "Ant", "--help"], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "4096" in out.stdout and "--mujoco-backend" in out.stdout
    bad = subprocess.run([sys.executable, "algos/ppo_vec.py", "--env", "Hopper", "--mujoco-backend", "gpu",
                          "--total-steps", "100"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode != 0 and "choose auto, batch or warp" in bad.stderr


def test_resume_with_mujoco_defaults_keeps_saved_settings(tmp_path):
    """`--env Hopper --resume CK` starts from the MuJoCo defaults; those count as "not set"."""
    kw = dict(HOPPER, total_steps=8 * 8 * 2, save_every=0)
    full = ppo_vec.main(ppo_vec.Args(out_dir=str(tmp_path), **kw))
    resumed_args = replace(ppo_vec.default_args("Hopper-v5"), resume=full["checkpoint"], quiet=True,
                           total_steps=8 * 8 * 3, eval_episodes=2, eval_every=0, save_every=0)
    res = ppo_vec.main(resumed_args)
    assert res["steps"] == 8 * 8 * 3
    ck = torch.load(res["checkpoint"], weights_only=False)
    assert ck["args"]["num_envs"] == 8 and tuple(ck["args"]["hidden"]) == (32, 32)


def test_resume_without_total_steps_keeps_the_saved_length(tmp_path, monkeypatch):
    kw = SMALL[ppo_vec]
    full, snaps = _run_with_snapshots(ppo_vec, ppo_vec.Args(out_dir=str(tmp_path / "full"), **kw), monkeypatch)
    assert kw["total_steps"] != ppo_vec.Args().total_steps
    resumed = ppo_vec.main(ppo_vec.Args(resume=str(snaps[0]), quiet=True, eval_episodes=2, eval_every=0, save_every=0))
    assert resumed["steps"] == full["steps"] == kw["total_steps"]
