"""Determinism (same seed, same result) for every single-agent algorithm file on short CPU runs,
what a resumed run takes from its checkpoint (settings, length), and the algorithm files' own
bad-input errors.

Exact resume itself (a run interrupted and resumed ends bit-identical to the uninterrupted run) is
tested once, for every algorithm file and a few extra settings, by the SIGKILL test of
tests/test_faults.py."""

import dataclasses
import importlib
import re
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from algos import a2c, dqn, ppo_h, ppo_podracer, ppo_rnn, ppo_vec, redq
from common.cli import cli
from conftest import (
    ROOT,
    SMALL_PPO_HOPPER,
    SMALL_RUNS,
    checkpoint_params,
    run_as_main,
    run_with_snapshots,
)

ALL = [importlib.import_module(f"algos.{name}") for name in SMALL_RUNS]
IDS = list(SMALL_RUNS)
SMALL = {m: SMALL_RUNS[m.ALGO] for m in ALL}


# the quick tier runs it for the files that own their seeding code; their variants (same code, by
# the lineage rules) run in the full suite
SEEDING_OWNERS = {"ppo_vec", "a2c", "dqn", "pqn", "ddpg", "td3", "sac", "ppo_rnn"}


@pytest.mark.parametrize(
    "module",
    [m if m.ALGO in SEEDING_OWNERS else pytest.param(m, marks=pytest.mark.slow) for m in ALL],
    ids=IDS,
)
def test_same_seed_same_result(module, tmp_path):
    kw = SMALL[module]
    r1 = module.main(module.Args(out_dir=str(tmp_path / "a"), **kw))
    r2 = module.main(module.Args(out_dir=str(tmp_path / "b"), **kw))
    p1, p2 = checkpoint_params(r1["checkpoint"]), checkpoint_params(r2["checkpoint"])
    assert all(torch.equal(p1[k], p2[k]) for k in p1)
    r3 = module.main(module.Args(out_dir=str(tmp_path / "c"), **{**kw, "seed": 7}))
    p3 = checkpoint_params(r3["checkpoint"])
    assert not all(torch.equal(p1[k], p3[k]) for k in p1)


def test_resume_refuses_foreign_checkpoint(tmp_path):
    r = dqn.main(dqn.Args(out_dir=str(tmp_path), **SMALL[dqn]))
    with pytest.raises(ValueError, match="written by algos/dqn.py, not algos/ppo_vec.py"):
        ppo_vec.main(ppo_vec.Args(resume=r["checkpoint"], **SMALL[ppo_vec]))
    with pytest.raises(ValueError, match="trained on 'CartPole-v1', not 'Acrobot-v1'"):
        dqn.main(dqn.Args(resume=r["checkpoint"], **{**SMALL[dqn], "env": "Acrobot-v1"}))


@pytest.mark.parametrize("module", ALL, ids=IDS)
def test_action_space_mismatch_is_refused(module, tmp_path):
    if module.FAMILY == "PPO":
        pytest.skip(f"{module.ALGO} handles both kinds of action space")
    discrete = SMALL[module]["env"] == "CartPole-v1"
    other = "Pendulum-v1" if discrete else "CartPole-v1"
    kw = {**SMALL[module], "env": other, "out_dir": str(tmp_path)}
    with pytest.raises(
        ValueError,
        match="Discrete action space" if discrete else "continuous \\(Box\\) action space",
    ):
        module.main(module.Args(**kw))
    assert not any(tmp_path.iterdir())


def test_algorithm_bad_inputs(tmp_path):
    with pytest.raises(ValueError, match="dqn needs a Discrete action space"):
        dqn.main(dqn.Args(out_dir=str(tmp_path), env="Pendulum-v1", quiet=True))
    with pytest.raises(ValueError, match="--num-min 3 must be between 1 and --num-critics 2"):
        redq.main(redq.Args(out_dir=str(tmp_path), num_critics=2, num_min=3, quiet=True))
    with pytest.raises(ValueError, match="not divisible by --num-minibatches 7"):
        ppo_vec.main(
            ppo_vec.Args(
                out_dir=str(tmp_path), num_envs=16, num_steps=16, num_minibatches=7, quiet=True
            )
        )
    with pytest.raises(ValueError, match="unknown env id"):
        ppo_vec.main(ppo_vec.Args(out_dir=str(tmp_path), env="CartPoel-v1", quiet=True))
    with pytest.raises(ValueError, match="--learning-starts"):
        dqn.main(
            dqn.Args(out_dir=str(tmp_path), total_steps=1000, learning_starts=5000, quiet=True)
        )
    assert not any(tmp_path.iterdir()), "a refused run must not leave a run directory behind"


@pytest.mark.parametrize("module", ALL, ids=IDS)
def test_cli_help(module, cli_help):
    code, text = cli_help[module.ALGO]
    assert code in (0, None), (code, text)
    for flag in (
        "--env",
        "--num-envs",
        "--seed",
        "--device",
        "--total-steps",
        "--resume",
        "--compile",
        "--track",
    ):
        assert flag in text
    assert module.__doc__.splitlines()[0].split()[0] in text  # the docstring heads the help


def test_cli_wrong_flag():
    bad = subprocess.run(
        [sys.executable, "algos/dqn.py", "--num-env", "4"], cwd=ROOT, capture_output=True, text=True
    )
    # tyro's own message, with the right flag
    assert bad.returncode == 2 and bad.stdout == "", bad
    assert "Unrecognized options: --num-env" in bad.stderr and "Traceback" not in bad.stderr
    assert "Perhaps you meant" in bad.stderr and "--num-envs" in bad.stderr, bad.stderr


def test_resume_takes_saved_settings_and_refuses_changed_ones(tmp_path, monkeypatch):
    kw = SMALL[ppo_vec]
    full, snaps = run_with_snapshots(
        ppo_vec, ppo_vec.Args(out_dir=str(tmp_path / "full"), **kw), monkeypatch
    )
    resumed_dir = tmp_path / "resumed"
    resumed_dir.mkdir()
    shutil.copy(snaps[0], resumed_dir / "checkpoint.pt")
    ck = str(resumed_dir / "checkpoint.pt")
    with pytest.raises(
        ValueError, match="trained with --num-envs 16, not 48: a resumed run keeps its settings"
    ):
        ppo_vec.main(ppo_vec.Args(resume=ck, num_envs=48, quiet=True))
    # only --resume (and flags that may change): every other setting comes from the checkpoint
    resumed = ppo_vec.main(
        ppo_vec.Args(
            resume=ck,
            quiet=True,
            eval_episodes=2,
            eval_every=0,
            save_every=0,
            total_steps=kw["total_steps"],
        )
    )
    a, b = checkpoint_params(full["checkpoint"]), checkpoint_params(resumed["checkpoint"])
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_mujoco_defaults_follow_env_on_the_command_line():
    big = ppo_vec.default_args("Ant", num_envs=4096, device="cuda")
    cpu = ppo_vec.default_args("Ant", device="cpu")
    assert (big.num_envs, big.num_steps, big.num_minibatches) == (4096, 16, 4) and big.norm_obs
    assert (cpu.num_envs, cpu.num_steps, cpu.num_minibatches) == (64, 64, 8) and cpu.norm_obs
    assert big.update_epochs == cpu.update_epochs
    # both anneal 3e-4 (the KL-adaptive rate from 1e-3 stalled lower on Ant: bench/NOTES.md)
    assert (big.lr_schedule, big.learning_rate) == ("linear", 3e-4) and big.anneal_lr
    assert (cpu.lr_schedule, cpu.learning_rate) == ("linear", 3e-4) and cpu.anneal_lr
    for f in (ppo_h, ppo_podracer, ppo_rnn):  # the family's GPU shape alike
        a = f.default_args("Ant", 4096, "cuda")
        assert (a.lr_schedule, a.learning_rate) == ("linear", 3e-4)
    # on a CPU (and below 1024 envs on a GPU) the rollout follows --num-envs: about 4096 env steps
    # in minibatches of 512, so that the gradient steps per env step stay the same
    for device in ("cpu", "cuda"):
        shapes = [ppo_vec.default_args("Ant", n, device) for n in (16, 64, 256)]
        assert [(a.num_steps, a.num_minibatches) for a in shapes] == [(256, 8), (64, 8), (16, 8)]
    on_cpu = [ppo_vec.default_args("Hopper", n, "cpu") for n in (1024, 4096)]
    assert [(a.num_steps, a.num_minibatches) for a in on_cpu] == [(8, 16), (8, 64)]
    for f in (a2c, ppo_h, ppo_podracer, ppo_rnn):  # the family follows alike
        a = f.default_args("Ant", 256, "cpu")
        assert (a.num_envs, a.num_steps) == (256, 16)
        assert f is a2c or a.num_minibatches == 8
    assert ppo_vec.default_args("CartPole-v1") == replace(
        ppo_vec.Args(), **ppo_vec.TASK_DEFAULTS["CartPole-v1"]
    )
    # no row: the dataclass's
    assert ppo_vec.default_args("Acrobot-v1") == ppo_vec.Args(env="Acrobot-v1")
    assert (
        big.init_log_std == cpu.init_log_std == -1.0
        and ppo_vec.default_args("Hopper").init_log_std == 0.0
    )
    assert (
        ppo_vec.default_args("HalfCheetah").init_log_std
        == ppo_vec.default_args("Walker2d-v5").init_log_std
        == -1.0
    )
    cpu_help, big_help, bad = run_as_main(
        ("path", "algos/ppo_vec.py", ["--env", "Ant", "--device", "cpu", "--help"]),
        ("path", "algos/ppo_vec.py", ["--env", "Ant", "--num-envs", "4096", "--help"]),
        (
            "path",
            "algos/ppo_vec.py",
            ["--env", "Hopper", "--mujoco-backend", "gpu", "--total-steps", "100"],
        ),
    )
    for out, shown in ((cpu_help, "64"), (big_help, "4096")):
        assert out.returncode == 0, out.stderr
        assert f"(default: {shown})" in out.stdout and "--mujoco-backend" in out.stdout
    args = cli(
        ppo_vec.Args, argv=["--env", "Ant", "--num-envs=2048"], defaults_for=ppo_vec.default_args
    )
    assert (args.num_envs, args.num_steps) == (2048, 8)
    assert bad.returncode != 0 and "choose auto, batch or warp" in bad.stderr


def test_resume_with_mujoco_defaults_keeps_saved_settings(tmp_path):
    """`--env Hopper --resume CK` starts from the MuJoCo defaults; those count as "not set"."""
    kw = dict(SMALL_PPO_HOPPER, total_steps=8 * 8 * 2, save_every=0)
    full = ppo_vec.main(ppo_vec.Args(out_dir=str(tmp_path), **kw))
    resumed_args = replace(
        ppo_vec.default_args("Hopper-v5"),
        resume=full["checkpoint"],
        quiet=True,
        total_steps=8 * 8 * 3,
        eval_episodes=2,
        eval_every=0,
        save_every=0,
    )
    res = ppo_vec.main(resumed_args)
    assert res["steps"] == 8 * 8 * 3
    ck = torch.load(res["checkpoint"], weights_only=False)
    assert ck["args"]["num_envs"] == 8 and tuple(ck["args"]["hidden"]) == (32, 32)


def test_resume_without_total_steps_keeps_the_saved_length(tmp_path, monkeypatch):
    kw = SMALL[ppo_vec]
    full, snaps = run_with_snapshots(
        ppo_vec, ppo_vec.Args(out_dir=str(tmp_path / "full"), **kw), monkeypatch
    )
    assert kw["total_steps"] != ppo_vec.Args().total_steps
    resumed = ppo_vec.main(
        ppo_vec.Args(resume=str(snaps[0]), quiet=True, eval_episodes=2, eval_every=0, save_every=0)
    )
    assert resumed["steps"] == full["steps"] == kw["total_steps"]


_SHIFTING = {"changed": False}


def _shifting_env(**kw):
    """An env id whose env changes under it (a custom env edited between runs): CartPole-v1's
    spaces, or Acrobot-v1's (6 observations, 3 actions) once `_SHIFTING["changed"]`; a continuous
    twin likewise."""
    import envs

    return envs.make("Acrobot-v1" if _SHIFTING["changed"] else "CartPole-v1", **kw)


def _shifting_box_env(**kw):
    import envs

    return envs.make("MountainCarContinuous-v0" if _SHIFTING["changed"] else "Pendulum-v1", **kw)


@pytest.mark.parametrize("name", ["dqn", "ppo_vec", "sac", "td3"])
def test_resume_on_an_env_with_other_spaces_is_refused_by_name(name, tmp_path, monkeypatch, capfd):
    import envs
    from conftest import assert_user_error

    module = importlib.import_module(f"algos.{name}")
    discrete = SMALL_RUNS[name]["env"] == "CartPole-v1"
    env_id = "Shifting-v0" if discrete else "ShiftingBox-v0"
    envs.register(env_id, _shifting_env if discrete else _shifting_box_env)
    monkeypatch.setitem(_SHIFTING, "changed", False)
    kw = dict(SMALL_RUNS[name], env=env_id, out_dir=str(tmp_path))
    r = module.main(module.Args(**kw))
    monkeypatch.setitem(_SHIFTING, "changed", True)
    saved, now = (
        ("Box(shape=(4,), float32)", "Box(shape=(6,), float32)")
        if discrete
        else ("Box(shape=(3,), float32)", "Box(shape=(2,), float32)")
    )
    with pytest.raises(
        ValueError,
        match=f"with observation space {re.escape(saved)}, but this env has "
        f"{re.escape(now)}: the env changed",
    ) as e:
        module.main(module.Args(**dict(kw, resume=r["checkpoint"])))
    assert_user_error(e.value, capfd)


def test_resume_keeps_the_saved_bookkeeping_flags_it_is_not_given():
    """A flag that may change on resume (`--save-every`, `--eval-every`, `--quiet`, `--out-dir`,
    ...) left out keeps the saved run's value (a run started with `--save-every 10000` still
    checkpoints every 10k after Ctrl-C and `--resume`); given, it takes the new value; `--device` is
    never the saved one (another machine)."""
    from common.checkpoint import resume_args

    saved = dataclasses.asdict(
        dataclasses.replace(
            ppo_vec.Args(),
            save_every=10_000,
            eval_every=4096,
            quiet=True,
            out_dir="runs_x",
            device="cuda",
        )
    )
    got = resume_args(ppo_vec.Args(resume="ck.pt"), {"args": saved})
    assert (got.save_every, got.eval_every, got.quiet, got.out_dir, got.device) == (
        10_000,
        4096,
        True,
        "runs_x",
        "auto",
    )
    got = resume_args(ppo_vec.Args(resume="ck.pt", save_every=2048), {"args": saved})
    assert (got.save_every, got.eval_every) == (2048, 4096)


def _host_cartpole(**kw):
    from envs.gym_adapter import GymnasiumVecEnv

    return GymnasiumVecEnv("CartPole-v1", **kw)


@pytest.mark.parametrize("host", [False, True])
def test_a_resumed_run_observes_its_env_where_the_env_resumed(host, tmp_path, monkeypatch):
    """A torch env's checkpoint puts its episodes back where they stood, and the run's saved
    observation with them; a host simulator's games start again (ALE's, a gymnasium env's): the
    run keeps the observation the fresh games begin with, never the one of a game that is gone."""
    import common.run
    import envs

    envs.register("HostCartPole-v0", _host_cartpole)
    kw = dict(SMALL[ppo_vec], env="HostCartPole-v0" if host else "CartPole-v1")
    saved = ppo_vec.main(ppo_vec.Args(out_dir=str(tmp_path), **kw))["checkpoint"]
    seen, start = {}, common.run.Run.start

    def spy(self, env, state, *a, **k):
        seen["fresh"] = state["next_obs"]["policy"].clone()  # (a Batch of the obs groups)
        start(self, env, state, *a, **k)
        seen["resumed"] = state["next_obs"]["policy"].clone()

    monkeypatch.setattr(common.run.Run, "start", spy)
    ppo_vec.main(ppo_vec.Args(**dict(kw, out_dir=str(tmp_path / "again"), resume=saved)))
    before = torch.load(saved, weights_only=False)["next_obs"]["policy"]
    assert not torch.equal(seen["fresh"], before)  # the saved run had moved on from its start
    assert torch.equal(seen["resumed"], seen["fresh"] if host else before)
