"""Policy export (`tools/export.py`): every single-agent file's checkpoint to TorchScript,
torch.export and ONNX, the files run (torch.jit.load, torch.export.load, onnxruntime) and give
`load_policy`'s actions within 1e-5 on 1,000 observations, at any batch size; the command line's
lines and its errors."""

import importlib

import numpy as np
import pytest
import torch
from conftest import SMALL_RUNS, run_as_main

from tools import export

onnxruntime = pytest.importorskip("onnxruntime")


def _train(name: str, tmp_path) -> str:
    module = importlib.import_module(f"algos.{name}")
    settings = dict(SMALL_RUNS[name], out_dir=str(tmp_path / "runs"))
    if "norm_obs" in module.Args.__dataclass_fields__:
        settings["norm_obs"] = True  # the normalizer is part of what is exported
    return module.main(module.Args(**settings))["checkpoint"]


def _export_and_check(ckpt: str, tmp_path) -> None:
    out = export.main(
        export.Args(
            checkpoint=ckpt,
            onnx=str(tmp_path / "policy.onnx"),
            torchscript=str(tmp_path / "policy.pt"),
            pt2=str(tmp_path / "policy.pt2"),
        )
    )
    assert all(out[kind]["max_abs_diff"] <= 1e-5 for kind in ("torchscript", "pt2", "onnx"))
    module, policy, ckpt_ = export.policy_module(ckpt)
    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"))
    names = [i.name for i in session.get_inputs()]
    assert names == export.io_names(module)[0]
    for batch in (1, 7):  # the batch dimension is free in both files
        obs = export.sample_observations(module, batch, seed=batch)
        # obs, a recurrent policy's state, a masked one's mask
        inputs = export.example_inputs(module, policy, obs)
        want = export.reference(module, inputs)
        if len(inputs) == 1:  # the eager module is load_policy's policy
            np.testing.assert_array_equal(want[0], policy(obs).numpy())
        ts = torch.jit.load(str(tmp_path / "policy.pt"))(*inputs)
        pt2 = torch.export.load(str(tmp_path / "policy.pt2")).module()(*inputs)
        ort = session.run(None, {n: t.numpy() for n, t in zip(names, inputs)})
        for got in (ts, pt2, ort):
            got = [np.asarray(g) for g in (got if isinstance(got, (tuple, list)) else (got,))]
            assert len(got) == len(want)
            for g, w in zip(got, want):
                assert g.shape == w.shape and g.dtype == w.dtype
                np.testing.assert_allclose(g, w, atol=1e-5, rtol=0)


def test_ppo_vec_with_observation_normalization_exports_to_both(tmp_path):
    _export_and_check(_train("ppo_vec", tmp_path), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n in SMALL_RUNS if n != "ppo_vec"))
def test_every_single_agent_file_exports_to_both(name, tmp_path):
    _export_and_check(_train(name, tmp_path), tmp_path)


@pytest.mark.parametrize("name", ["ppo_vec", "dqn", "ppo_rnn"])
def test_a_masked_policy_exports_with_the_mask_as_an_input(name, tmp_path):
    module = importlib.import_module(f"algos.{name}")
    small = {k: v for k, v in SMALL_RUNS[name].items() if k != "env"}
    ckpt = module.main(module.Args(env="MaskedWalk-v0", out_dir=str(tmp_path / "runs"), **small))[
        "checkpoint"
    ]
    _export_and_check(ckpt, tmp_path)
    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"))
    only = np.zeros((4, 12), dtype=bool)
    # one allowed action per row: the exported policy picks it
    only[np.arange(4), [2, 4, 6, 8]] = True
    feed = {"obs": np.random.default_rng(0).random((4, 25), dtype=np.float32), "action_mask": only}
    if name == "ppo_rnn":
        feed["state"] = np.zeros((4, SMALL_RUNS[name]["rnn_hidden"]), dtype=np.float32)
    assert session.run(None, feed)[0].tolist() == [2, 4, 6, 8]


def test_the_command_line_says_what_it_wrote_and_refuses_bad_input(tmp_path):
    ckpt = _train("dqn", tmp_path)  # `python -m tools.export ...` three times (in one interpreter)
    ok, nothing, missing = run_as_main(
        ("module", "tools.export", [ckpt, "--torchscript", str(tmp_path / "p.pt")]),
        ("module", "tools.export", [ckpt]),
        ("module", "tools.export", [str(tmp_path / "none.pt"), "--onnx", "x.onnx"]),
    )
    assert ok.returncode == 0, ok.stderr
    assert (
        "-> " + str(tmp_path / "p.pt") + " (torchscript): matches load_policy on 1000 observations"
        in ok.stdout
    )
    assert nothing.returncode == 2 and nothing.stderr.strip() == (
        "error: nothing to write: pass --onnx PATH, --torchscript PATH and/or --pt2 PATH"
    )
    assert (
        missing.returncode == 2
        and "Traceback" not in missing.stderr
        and "no checkpoint at" in missing.stderr
    )


# a user's process with no env package at all: the checkpoint alone rebuilds each policy
# (common/policy.py)
_WITHOUT_ENVS = """
import json, sys, torch
sys.modules["envs"] = None  # `import envs` fails here
from tools.evaluate import load_policy
out = []
for path in json.loads(sys.argv[1]):
    policy, _ = load_policy(path)
    obs = torch.randn((5, *policy.obs_shape), generator=torch.Generator().manual_seed(0))
    out.append(policy(obs).tolist())
print(json.dumps(out))
"""


def _actions_without_envs(paths: list[str]) -> list:
    import json
    import subprocess
    import sys

    from conftest import ROOT

    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_ENVS, json.dumps(paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def _actions_here(path: str) -> list:
    from tools.evaluate import load_policy

    policy, _ = load_policy(path)
    return policy(
        torch.randn((5, *policy.obs_shape), generator=torch.Generator().manual_seed(0))
    ).tolist()


def test_the_deployable_policy_carries_its_normalizer_and_action_scaling_and_needs_no_env(tmp_path):
    """ppo_vec on Pendulum with observation normalization: the checkpoint's policy module holds the
    normalizer's final statistics (the env's, as saved) and acts within Pendulum's own bounds
    [-2, 2] (not the agent's [-1, 1]); it, and dqn's, load in a process where the env package cannot
    be imported, with the same actions."""
    from conftest import SMALL_PPO_PENDULUM_NORMALIZED

    from algos import dqn, ppo_vec
    from common.policy import Policy

    ppo = ppo_vec.main(
        ppo_vec.Args(**dict(SMALL_PPO_PENDULUM_NORMALIZED, out_dir=str(tmp_path / "ppo")))
    )["checkpoint"]
    q = dqn.main(dqn.Args(**dict(SMALL_RUNS["dqn"], out_dir=str(tmp_path / "dqn"))))["checkpoint"]
    ck = torch.load(ppo, weights_only=False)
    # NormalizeObservation's statistics, under NormalizeReward
    saved = ck["env"]["inner"]["own"]["rms"]
    assert torch.equal(ck["policy"]["obs_mean"], saved["mean"]) and torch.equal(
        ck["policy"]["obs_var"], saved["var"]
    )
    module, policy, _ = export.policy_module(ppo)
    assert isinstance(module, Policy) and module.normalize and module.box
    wide = module(torch.randn(256, 3, generator=torch.Generator().manual_seed(1)) * 50)
    # scaled to the env's bounds, clipped there
    assert wide.abs().max() > 1.0 and wide.abs().max() <= 2.0
    assert _actions_without_envs([ppo, q]) == [_actions_here(ppo), _actions_here(q)]


@pytest.mark.slow
def test_every_single_agent_policy_loads_without_the_env_package(tmp_path):
    paths = [_train(name, tmp_path / name) for name in sorted(SMALL_RUNS)]
    assert _actions_without_envs(paths) == [_actions_here(p) for p in paths]


@pytest.mark.parametrize("name", ["pqn", "ppo_vec", "ppo_rnn"])
def test_an_image_policy_exports_with_uint8_observations(name, tmp_path):
    """A conv policy (MinAtar's uint8 (4, 10, 10) planes; ppo_rnn's with its memory): the exported
    files take the env's uint8 observation and scale it themselves, and answer as load_policy
    does."""
    from dataclasses import replace

    module = importlib.import_module(f"algos.{name}")
    args = module.default_args("Breakout-MinAtar")
    if name == "ppo_rnn":  # no MinAtar row: a small rollout
        args = replace(args, num_envs=8, num_steps=8, num_minibatches=2)
    steps = args.num_envs * args.num_steps  # one iteration
    args = replace(args, total_steps=steps, eval_every=0, out_dir=str(tmp_path / "runs"))
    ckpt = module.main(args)["checkpoint"]
    _export_and_check(ckpt, tmp_path)
    session = onnxruntime.InferenceSession(str(tmp_path / "policy.onnx"))
    assert session.get_inputs()[0].type == "tensor(uint8)"
    assert list(session.get_inputs()[0].shape[1:]) == [4, 10, 10]


def test_the_policy_keeps_its_buffers_where_its_network_is():
    """The training loop evaluates `Policy.of(net, ...)` as is: its action bounds and normalizer
    live on the network's device (CUDA in training; the meta device stands in for it here)."""
    import gymnasium as gym

    from common.policy import Policy

    net = torch.nn.Linear(3, 2, device="meta")
    space = gym.spaces.Box(-2.0, 2.0, (2,))
    policy = Policy(net, {}, (3,), space, obs_norm=True)
    assert {b.device.type for b in policy.buffers()} == {"meta"}
