"""Where a run computes and how it is seeded: the device (`--device auto`), `--compile` for that
device, seeds, and the host RNG states a checkpoint saves and a resume restores."""

from __future__ import annotations

import random

import numpy as np
import torch

from common.errors import UserError


def canonical(device) -> torch.device:
    """`device` as the tensors made on it report it: "cuda" -> cuda:<current>
    (`torch.device("cuda") != torch.device("cuda:0")`, so an env on "cuda" would refuse its own
    tensors), "cpu:0" -> cpu (a CPU tensor's device has no index)."""
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    if dev.type == "cpu":
        return torch.device("cpu")
    return dev


def resolve_device(spec: str) -> torch.device:
    """`auto` -> CUDA when present, else CPU; anything else must be a valid, available device (cuda
    -> cuda:N)."""
    if spec == "auto":
        return canonical("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(spec)
    except (RuntimeError, TypeError) as e:
        raise UserError(
            f"--device {spec!r} is not a device: use auto, cpu, cuda or cuda:N ({e})"
        ) from None
    if dev.type not in ("cpu", "cuda"):
        raise UserError(
            f"--device {spec!r}: environments and learners run on cpu or cuda; use auto, cpu, cuda "
            f"or cuda:N"
        )
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UserError(
            f"--device {spec} asked for CUDA but torch sees no GPU here; use --device auto or cpu"
        )
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        raise UserError(
            f"--device {spec}: this machine has {torch.cuda.device_count()} GPU(s), cuda:0 to "
            f"cuda:{torch.cuda.device_count() - 1}"
        )
    return canonical(dev)


def check_seed(seed) -> int:
    """A seed torch, numpy and the environments all take: an int in [-2**63, 2**63)."""
    if not isinstance(seed, int) or isinstance(seed, bool) or not -(2**63) <= seed < 2**63:
        raise UserError(f"--seed {seed!r}: a seed is an integer in [-2**63, 2**63)")
    return seed


def seed_everything(seed: int) -> None:
    check_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def rng_state() -> dict:
    """Host RNG states (python, numpy, torch CPU and CUDA) as checkpoint-safe objects."""
    np_state = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    name, keys, *rest = state["numpy"]
    # .cpu(): a checkpoint loaded with map_location="cuda" brings these byte tensors to the GPU, and
    # the RNGs take their states from host memory only
    np.random.set_state((name, keys.cpu().numpy().astype(np.uint32), *rest))
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def compile_fn(fn, device, graphs: bool = True):
    """`torch.compile(fn)` for `--compile`. On CUDA each compiled function replays as a CUDA graph
    of its own, except with `graphs=False` (the optimizer steps: fused kernels, no graph);
    inductor's default mode elsewhere.

    Plain CUDA graphs, not mode "reduce-overhead"'s CUDA graph trees: an output of a compiled
    function stays valid until that same function runs again, which is how the loops use them
    (actions into the buffers, a loss into its backward, GAE's advantages over an update). Trees
    assume that an iteration is a forward, its backward and nothing else compiled: the optimizer
    step's graph started a new one and freed the gradients, and `ppo_vec --env Ant --compile`
    stopped at its first step ("accessing tensor output of CUDAGraphs that has been overwritten"). A
    graph of the optimizer step holds the gradients' addresses, which change from backward to
    backward (`zero_grad(set_to_none=True)`): ppo_vec's failed its static-address check. (What ran
    where and how fast: bench/results/gpu/lease.md.)"""
    if torch.device(device).type != "cuda" or not graphs:
        return torch.compile(fn)
    return torch.compile(fn, options={"triton.cudagraphs": True, "triton.cudagraph_trees": False})
