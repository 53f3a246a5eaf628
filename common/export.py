"""Export a trained policy as one file that runs without this library (a robot, a game engine, C++):

    python -m common.export runs/<run>/checkpoint.pt --onnx policy.onnx
    python -m common.export runs/<run>/checkpoint.pt --torchscript policy.pt
    python -m common.export runs/<run>/checkpoint.pt --pt2 policy.pt2          # torch.export's format

What is exported is the deterministic policy that `common.evaluate.load_policy` rebuilds from the checkpoint
(the algorithm file that wrote it says how): observation normalization, the network and the action rescaling,
in one graph. Input `obs`: raw observations, float32 `[batch, *obs_shape]` (any batch size). Output
`action`: what the env takes, float32 `[batch, *action_shape]` within the action bounds, or int64 `[batch]`
for a discrete action space. Every file written is checked before the command returns: its outputs on 1,000
random observations (spread like the ones seen in training where the checkpoint has normalization statistics)
equal `load_policy`'s within 1e-5 (the ONNX file through onnxruntime when it is installed; otherwise the check
says it was skipped).

Using the files:

    import onnxruntime;  s = onnxruntime.InferenceSession("policy.onnx");  action = s.run(None, {"obs": obs})[0]
    import torch;        policy = torch.jit.load("policy.pt");  action = policy(obs)     # also from C++ (libtorch)
    import torch;        policy = torch.export.load("policy.pt2").module();  action = policy(obs)

TorchScript is what rsl_rl and IsaacLab deploy with, and what libtorch loads from C++; torch deprecates it in
favour of `torch.export` (`--pt2`, loadable from Python and AOTInductor). ONNX is the portable one.

A recurrent policy (`algos/ppo_rnn.py`) exports with its memory as an explicit input and output:
`action, state = policy(obs, state)`, `state` float32 `[batch, *state_shape]`, zeros at an episode's start
(ONNX names: inputs `obs`, `state`; outputs `action`, `next_state`). The check then runs two steps.

ONNX export needs `pip install onnx onnxscript` (torch's exporter); single-agent files only (the multi-agent
ones have per-agent policies and no `load_policy` of this kind).
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import numpy as np
import torch
import tyro

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from common.evaluate import load_policy  # noqa: E402


class ExportedPolicy(torch.nn.Module):
    """`core` (a `PolicyFn.core`: raw obs -> env action) as a module whose parameters are its networks'. The
    networks a core closes over are registered here, frozen, so that tracing records them as weights (not
    as constants that require grad)."""

    def __init__(self, core):
        super().__init__()
        self.core = core
        for i, value in enumerate(inspect.getclosurevars(core).nonlocals.values()):
            if isinstance(value, torch.nn.Module):
                self.add_module(f"net{i}", value.eval().requires_grad_(False))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.core(obs)


class ExportedRecurrentPolicy(ExportedPolicy):
    """A `RecurrentPolicyFn.recurrent_core` ((obs, state) -> (action, next state)) as a module."""

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.core(obs, state)


def policy_module(checkpoint: str) -> tuple[ExportedPolicy, object, dict]:
    """(the exportable module, the `PolicyFn` it was built from, the checkpoint) on the CPU."""
    from common.evaluate import PolicyFn, RecurrentPolicyFn

    policy, ckpt = load_policy(checkpoint, "cpu")
    if not isinstance(policy, PolicyFn):
        raise ValueError(f"{checkpoint} was written by {ckpt.get('algo')}, a multi-agent file: export takes the "
                         f"checkpoints of single-agent files (ppo_vec, sac, td3, dqn, ...)")
    if policy.obs_shape is None:
        raise ValueError(f"{checkpoint}: its policy does not say its observation shape; cannot export it")
    if isinstance(policy, RecurrentPolicyFn):
        return ExportedRecurrentPolicy(policy.recurrent_core).eval(), policy, ckpt
    return ExportedPolicy(policy.core).eval(), policy, ckpt


def example_inputs(module: ExportedPolicy, policy, obs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The inputs the module takes for a batch of observations: (obs,) or (obs, blank state)."""
    if isinstance(module, ExportedRecurrentPolicy):
        return obs, policy.initial_state(obs.shape[0]).cpu()
    return (obs,)


def reference(policy, inputs: tuple[torch.Tensor, ...]) -> tuple[np.ndarray, ...]:
    """load_policy's outputs for `inputs` (a recurrent policy: (action, next state), its own state untouched)."""
    with torch.no_grad():
        if len(inputs) == 2:
            return tuple(t.numpy() for t in policy.recurrent_core(*inputs))
        return (policy(inputs[0]).numpy(),)


def check_steps(run, policy, inputs: tuple[torch.Tensor, ...], name: str, atol: float) -> float:
    """`run(inputs) -> outputs (numpy)` against load_policy's: one step, or two for a recurrent policy (the second
    from the state the first returned, on other observations)."""
    err = max(_compare(name, g, w, atol) for g, w in zip(run(inputs), reference(policy, inputs)))
    if len(inputs) == 2:
        second = (inputs[0].flip(0), torch.as_tensor(reference(policy, inputs)[1]))
        err = max(err, *(_compare(name, g, w, atol) for g, w in zip(run(second), reference(policy, second))))
    return err


def _names(example: tuple) -> tuple[list[str], list[str], dict]:
    batch = torch.export.Dim("batch")
    if len(example) == 2:
        return ["obs", "state"], ["action", "next_state"], {"obs": {0: batch}, "state": {0: batch}}
    return ["obs"], ["action"], {"obs": {0: batch}}


def sample_observations(policy, ckpt: dict, n: int = 1000, seed: int = 0) -> torch.Tensor:
    """`n` observations to compare outputs on: around the normalizer's mean, two of its standard deviations
    wide, where the checkpoint has one; standard normal otherwise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((n, *policy.obs_shape), generator=g)
    norm = ckpt.get("obs_norm")
    if isinstance(norm, dict) and "mean" in norm and "var" in norm:
        x = norm["mean"].float().cpu() + 2.0 * norm["var"].float().cpu().sqrt() * x
    return x


def to_torchscript(module: ExportedPolicy, example: tuple, path: str) -> None:
    with torch.no_grad(), warnings.catch_warnings():
        # shape checks (the action rescaler's) are static for a given policy: what the tracer warns of is intended
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(module, example, check_trace=False)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    traced.save(path)


def to_pt2(module: ExportedPolicy, example: tuple, path: str) -> None:
    with torch.no_grad():
        program = torch.export.export(module, example, dynamic_shapes=_names(example)[2])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, path)


def to_onnx(module: ExportedPolicy, example: tuple, path: str) -> None:
    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"--onnx needs onnx and onnxscript ({', '.join(missing)} missing): pip install onnx onnxscript")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # the exporter logs each torchvision op it skips (torchvision is not used here) and warns of its own deprecations
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        inputs, outputs, dynamic = _names(example)
        torch.onnx.export(module, example, path, input_names=inputs, output_names=outputs, dynamo=True,
                          dynamic_shapes=dynamic, external_data=False, verbose=False)


def _compare(name: str, got: np.ndarray, want: np.ndarray, atol: float) -> float:
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{name}: output {got.dtype}{list(got.shape)} differs from load_policy's "
                             f"{want.dtype}{list(want.shape)}")
    err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) if got.size else 0.0
    if not err <= atol:
        raise AssertionError(f"{name}: outputs differ from load_policy's by up to {err:.3g} (> {atol:g})")
    return err


def _outputs(out) -> tuple[np.ndarray, ...]:
    return tuple(np.asarray(o) for o in (out if isinstance(out, (tuple, list)) else (out,)))


def check_torchscript(path: str, policy, inputs: tuple, atol: float = 1e-5) -> float:
    module = torch.jit.load(path)
    with torch.no_grad():
        return check_steps(lambda x: _outputs(tuple(t.numpy() for t in _as_tuple(module(*x)))), policy, inputs, path, atol)


def check_pt2(path: str, policy, inputs: tuple, atol: float = 1e-5) -> float:
    module = torch.export.load(path).module()
    with torch.no_grad():
        return check_steps(lambda x: _outputs(tuple(t.numpy() for t in _as_tuple(module(*x)))), policy, inputs, path, atol)


def check_onnx(path: str, policy, inputs: tuple, atol: float = 1e-5) -> float | None:
    """Max abs difference to `policy` on `inputs` through onnxruntime; None when onnxruntime is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = _names(inputs)[0]
    return check_steps(lambda x: _outputs(session.run(None, {n: t.numpy() for n, t in zip(names, x)})), policy, inputs,
                       path, atol)


def _as_tuple(out) -> tuple:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@dataclass
class Args:
    checkpoint: Annotated[str, tyro.conf.Positional, tyro.conf.arg(metavar="CHECKPOINT")]
    """path of a checkpoint.pt written by a single-agent algorithm file"""
    onnx: str | None = None
    """write the policy as ONNX here (needs onnx and onnxscript)"""
    torchscript: str | None = None
    """write the policy as TorchScript here (torch.jit.load; libtorch in C++)"""
    pt2: str | None = None
    """write the policy as a torch.export program here (torch.export.load)"""
    check_samples: int = 1000
    """random observations the written files are checked on against load_policy (0: no check)"""
    atol: float = 1e-5
    """largest output difference the check accepts"""


def main(args: Args) -> dict:
    if not (args.onnx or args.torchscript or args.pt2):
        raise ValueError("nothing to write: pass --onnx PATH, --torchscript PATH and/or --pt2 PATH")
    module, policy, ckpt = policy_module(args.checkpoint)
    obs = sample_observations(policy, ckpt, max(args.check_samples, 2))
    inputs = example_inputs(module, policy, obs)
    out = {}
    for kind, path, write, check in (("torchscript", args.torchscript, to_torchscript, check_torchscript),
                                     ("pt2", args.pt2, to_pt2, check_pt2), ("onnx", args.onnx, to_onnx, check_onnx)):
        if not path:
            continue
        write(module, tuple(t[:2].clone() for t in inputs), path)
        err = check(path, policy, inputs, args.atol) if args.check_samples else None
        out[kind] = {"path": path, "max_abs_diff": err}
        if err is not None:
            checked = f"matches load_policy on {len(obs)} observations (max abs difference {err:.2g})"
        else:
            checked = "not checked" + (" (onnxruntime is not installed)" if args.check_samples and kind == "onnx" else "")
        print(f"{ckpt['algo']} policy for {ckpt['env_id']} -> {path} ({kind}): {checked}")
    return out


if __name__ == "__main__":
    from common.cli import cli

    main(cli(Args, __doc__))
