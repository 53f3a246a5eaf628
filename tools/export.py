"""Export a trained policy as one file that runs without this library (a robot, a game engine, C++):

    python -m tools.export runs/<run>/checkpoint.pt --onnx policy.onnx
    python -m tools.export runs/<run>/checkpoint.pt --torchscript policy.pt
    python -m tools.export runs/<run>/checkpoint.pt --pt2 policy.pt2   # torch.export's format

What is exported is the checkpoint's deployable policy (`common/policy.py`), the module
`load_policy` rebuilds from the checkpoint alone: observation normalization, the network and the
action rescaling, in one graph. Input `obs`: raw observations, float32 `[batch, *obs_shape]` (any
batch size; uint8 for an image, which the graph scales). Output `action`: what the env takes,
float32 `[batch, *action_shape]` within the action bounds, or int64 `[batch]` for a discrete action
space. Every file written is checked before the
command returns: its outputs on 1,000 random observations (spread like the ones seen in training
where the checkpoint has normalization statistics) equal `load_policy`'s within 1e-5 (the ONNX file
through onnxruntime when it is installed; otherwise the check says it was skipped).

Using the files:

    import onnxruntime;  s = onnxruntime.InferenceSession("policy.onnx")
    action = s.run(None, {"obs": obs})[0]
    import torch;  policy = torch.jit.load("policy.pt");  action = policy(obs)  # or libtorch (C++)
    import torch;  policy = torch.export.load("policy.pt2").module();  action = policy(obs)

TorchScript is what rsl_rl and IsaacLab deploy with, and what libtorch loads from C++; torch
deprecates it in favour of `torch.export` (`--pt2`, loadable from Python and AOTInductor). ONNX is
the portable one.

A recurrent policy (`algos/ppo_rnn.py`) exports with its memory as an explicit input and output:
`action, state = policy(obs, state)`, `state` float32 `[batch, *state_shape]`, zeros at an episode's
start (ONNX names: inputs `obs`, `state`; outputs `action`, `next_state`). The check then runs two
steps. The policy of an env with action masks takes the mask as an input after those: `action_mask`,
bool `[batch, n_actions]` (the env's `info["action_mask"]`); a forbidden action is never chosen.

ONNX export needs `pip install onnx onnxscript` (torch's exporter); single-agent files only (the
multi-agent ones have per-agent policies and no `load_policy` of this kind).
"""

from __future__ import annotations

import importlib.util
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

from common.errors import MissingPackage, UserError  # noqa: E402
from common.policy import Policy, RecurrentPolicy  # noqa: E402
from tools.evaluate import load_policy  # noqa: E402


def policy_module(checkpoint: str) -> tuple[Policy, object, dict]:
    """(the deployable policy module of `checkpoint` (common/policy.py), its `PolicyFn`, the
    checkpoint) on the CPU."""
    policy, ckpt = load_policy(checkpoint, "cpu")
    module = getattr(policy, "module", None)
    if not isinstance(module, Policy):
        raise UserError(
            f"{checkpoint} was written by {ckpt.get('algo')}, a multi-agent file: export takes the "
            f"checkpoints of single-agent files (ppo_vec, sac, td3, dqn, ...)"
        )
    return module.eval(), policy, ckpt


def example_inputs(
    module: Policy, policy, obs: torch.Tensor, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """The inputs the module takes for a batch of observations: obs, then a blank state (recurrent
    policies), then random action masks (masked ones)."""
    inputs = [obs]
    if isinstance(module, RecurrentPolicy):
        inputs.append(module.initial_state(obs.shape[0]).cpu())
    if module.mask_dim:
        inputs.append(
            torch.rand(obs.shape[0], module.mask_dim, generator=torch.Generator().manual_seed(seed))
            < 0.6
        )
    return tuple(inputs)


def io_names(module: Policy) -> tuple[list[str], list[str]]:
    recurrent = isinstance(module, RecurrentPolicy)
    inputs = [
        "obs",
        *(["state"] if recurrent else []),
        *(["action_mask"] if module.mask_dim else []),
    ]
    return inputs, ["action", "next_state"] if recurrent else ["action"]


def reference(module: Policy, inputs: tuple[torch.Tensor, ...]) -> tuple[np.ndarray, ...]:
    """What load_policy's policy answers to `inputs` (its core, run eagerly): (action,) or (action,
    next state)."""
    with torch.no_grad():
        out = module(*inputs)
    return tuple(t.numpy() for t in (out if isinstance(out, tuple) else (out,)))


def check_steps(run, module, inputs: tuple[torch.Tensor, ...], name: str, atol: float) -> float:
    """`run(inputs) -> outputs (numpy)` against load_policy's: one step, or two for a recurrent
    policy (the second from the state the first returned, on other observations)."""
    want = reference(module, inputs)
    err = max(_compare(name, g, w, atol) for g, w in zip(run(inputs), want))
    if len(want) == 2:
        second = (inputs[0].flip(0), torch.as_tensor(want[1]), *inputs[2:])
        err = max(
            err,
            *(_compare(name, g, w, atol) for g, w in zip(run(second), reference(module, second))),
        )
    return err


def _names(module: Policy) -> tuple[list[str], list[str], dict]:
    batch = torch.export.Dim("batch")
    inputs, outputs = io_names(module)
    return inputs, outputs, {n: {0: batch} for n in inputs}


def sample_observations(module: Policy, n: int = 1000, seed: int = 0) -> torch.Tensor:
    """`n` observations to compare outputs on: around the normalizer's mean, two of its standard
    deviations wide, where the policy normalizes; standard normal otherwise; for an image, pixels
    uniform over its range."""
    g = torch.Generator().manual_seed(seed)
    if module.obs_dtype == "uint8":
        high = int(module.obs_high or 255) + 1
        return torch.randint(0, high, (n, *module.obs_shape), generator=g, dtype=torch.uint8)
    x = torch.randn((n, *module.obs_shape), generator=g)
    if module.normalize:
        x = module.obs_mean.float().cpu() + 2.0 * module.obs_var.float().cpu().sqrt() * x
    return x


def to_torchscript(module: Policy, example: tuple, path: str) -> None:
    with torch.no_grad(), warnings.catch_warnings():
        # shape checks (the action rescaler's) are static for a given policy: what the tracer warns
        # of is intended
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(module, example, check_trace=False)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    traced.save(path)


def to_pt2(module: Policy, example: tuple, path: str) -> None:
    with torch.no_grad():
        program = torch.export.export(module, example, dynamic_shapes=_names(module)[2])
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, path)


def to_onnx(module: Policy, example: tuple, path: str) -> None:
    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingPackage(
            f"--onnx needs onnx and onnxscript ({', '.join(missing)} missing): pip install onnx "
            f"onnxscript"
        )
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # the exporter logs each torchvision op it skips (torchvision is not used here) and warns of its
    # own deprecations
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        inputs, outputs, dynamic = _names(module)
        torch.onnx.export(
            module,
            example,
            path,
            input_names=inputs,
            output_names=outputs,
            dynamo=True,
            dynamic_shapes=dynamic,
            external_data=False,
            verbose=False,
        )


def _compare(name: str, got: np.ndarray, want: np.ndarray, atol: float) -> float:
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(
            f"{name}: output {got.dtype}{list(got.shape)} differs from load_policy's "
            f"{want.dtype}{list(want.shape)}"
        )
    err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) if got.size else 0.0
    if not err <= atol:
        raise AssertionError(
            f"{name}: outputs differ from load_policy's by up to {err:.3g} (> {atol:g})"
        )
    return err


def check_torchscript(path: str, eager: Policy, inputs: tuple, atol: float = 1e-5) -> float:
    """Max abs difference of the written file's outputs to the eager policy's (`eager`, from
    `policy_module`)."""
    loaded = torch.jit.load(path)
    with torch.no_grad():
        return check_steps(
            lambda x: tuple(t.numpy() for t in _as_tuple(loaded(*x))), eager, inputs, path, atol
        )


def check_pt2(path: str, eager: Policy, inputs: tuple, atol: float = 1e-5) -> float:
    loaded = torch.export.load(path).module()
    with torch.no_grad():
        return check_steps(
            lambda x: tuple(t.numpy() for t in _as_tuple(loaded(*x))), eager, inputs, path, atol
        )


def check_onnx(path: str, eager: Policy, inputs: tuple, atol: float = 1e-5) -> float | None:
    """As `check_torchscript`, through onnxruntime; None when onnxruntime is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = io_names(eager)[0]
    return check_steps(
        lambda x: tuple(
            np.asarray(o) for o in session.run(None, {n: t.numpy() for n, t in zip(names, x)})
        ),
        eager,
        inputs,
        path,
        atol,
    )


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
        raise UserError("nothing to write: pass --onnx PATH, --torchscript PATH and/or --pt2 PATH")
    module, policy, ckpt = policy_module(args.checkpoint)
    obs = sample_observations(module, max(args.check_samples, 2))
    inputs = example_inputs(module, policy, obs)
    out = {}
    for kind, path, write, check in (
        ("torchscript", args.torchscript, to_torchscript, check_torchscript),
        ("pt2", args.pt2, to_pt2, check_pt2),
        ("onnx", args.onnx, to_onnx, check_onnx),
    ):
        if not path:
            continue
        write(module, tuple(t[:2].clone() for t in inputs), path)
        err = check(path, module, inputs, args.atol) if args.check_samples else None
        out[kind] = {"path": path, "max_abs_diff": err}
        if err is not None:
            checked = (
                f"matches load_policy on {len(obs)} observations (max abs difference {err:.2g})"
            )
        else:
            checked = "not checked" + (
                " (onnxruntime is not installed)" if args.check_samples and kind == "onnx" else ""
            )
        print(f"{ckpt['algo']} policy for {ckpt['env_id']} -> {path} ({kind}): {checked}")
    return out


if __name__ == "__main__":
    from common.cli import cli

    main(cli(Args, __doc__))
