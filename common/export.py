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


def policy_module(checkpoint: str) -> tuple[ExportedPolicy, object, dict]:
    """(the exportable module, the `PolicyFn` it was built from, the checkpoint) on the CPU."""
    from common.evaluate import PolicyFn

    policy, ckpt = load_policy(checkpoint, "cpu")
    if not isinstance(policy, PolicyFn):
        raise ValueError(f"{checkpoint} was written by {ckpt.get('algo')}, a multi-agent file: export takes the "
                         f"checkpoints of single-agent files (ppo_vec, sac, td3, dqn, ...)")
    if policy.obs_shape is None:
        raise ValueError(f"{checkpoint}: its policy does not say its observation shape; cannot export it")
    return ExportedPolicy(policy.core).eval(), policy, ckpt


def sample_observations(policy, ckpt: dict, n: int = 1000, seed: int = 0) -> torch.Tensor:
    """`n` observations to compare outputs on: around the normalizer's mean, two of its standard deviations
    wide, where the checkpoint has one; standard normal otherwise."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((n, *policy.obs_shape), generator=g)
    norm = ckpt.get("obs_norm")
    if isinstance(norm, dict) and "mean" in norm and "var" in norm:
        x = norm["mean"].float().cpu() + 2.0 * norm["var"].float().cpu().sqrt() * x
    return x


def to_torchscript(module: ExportedPolicy, example: torch.Tensor, path: str) -> None:
    with torch.no_grad(), warnings.catch_warnings():
        # shape checks (the action rescaler's) are static for a given policy: what the tracer warns of is intended
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        traced = torch.jit.trace(module, example, check_trace=False)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    traced.save(path)


def to_pt2(module: ExportedPolicy, example: torch.Tensor, path: str) -> None:
    with torch.no_grad():
        program = torch.export.export(module, (example,), dynamic_shapes={"obs": {0: torch.export.Dim("batch")}})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    torch.export.save(program, path)


def to_onnx(module: ExportedPolicy, example: torch.Tensor, path: str) -> None:
    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        raise ImportError(f"--onnx needs onnx and onnxscript ({', '.join(missing)} missing): pip install onnx onnxscript")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    # the exporter logs each torchvision op it skips (torchvision is not used here) and warns of its own deprecations
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        torch.onnx.export(module, (example,), path, input_names=["obs"], output_names=["action"], dynamo=True,
                          dynamic_shapes={"obs": {0: torch.export.Dim("batch")}}, external_data=False,
                          verbose=False)


def _compare(name: str, got: np.ndarray, want: np.ndarray, atol: float) -> float:
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{name}: output {got.dtype}{list(got.shape)} differs from load_policy's "
                             f"{want.dtype}{list(want.shape)}")
    err = float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) if got.size else 0.0
    if not err <= atol:
        raise AssertionError(f"{name}: outputs differ from load_policy's by up to {err:.3g} (> {atol:g})")
    return err


def check_torchscript(path: str, policy, obs: torch.Tensor, atol: float = 1e-5) -> float:
    with torch.no_grad():
        got = torch.jit.load(path)(obs).numpy()
    return _compare(path, got, policy(obs).numpy(), atol)


def check_pt2(path: str, policy, obs: torch.Tensor, atol: float = 1e-5) -> float:
    with torch.no_grad():
        got = torch.export.load(path).module()(obs).numpy()
    return _compare(path, got, policy(obs).numpy(), atol)


def check_onnx(path: str, policy, obs: torch.Tensor, atol: float = 1e-5) -> float | None:
    """Max abs difference to `policy` on `obs` through onnxruntime; None when onnxruntime is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    got = session.run(None, {"obs": obs.numpy()})[0]
    return _compare(path, got, policy(obs).numpy(), atol)


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
    out = {}
    for kind, path, write, check in (("torchscript", args.torchscript, to_torchscript, check_torchscript),
                                     ("pt2", args.pt2, to_pt2, check_pt2), ("onnx", args.onnx, to_onnx, check_onnx)):
        if not path:
            continue
        write(module, obs[:2], path)
        err = check(path, policy, obs, args.atol) if args.check_samples else None
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
